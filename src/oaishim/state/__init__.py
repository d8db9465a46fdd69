"""The response store behind ``store: true`` and ``previous_response_id``: each stored Response with
its input items and the conversation that continues it, per tenant, bounded in age and size.

``base`` is the contract (records, limits, errors, the shared serialising step); one module per
backend: ``sqlite`` (default, one host), ``postgres`` (replicas sharing one database; optional
dependency), ``memory`` (tests). :func:`open_store` picks one from a setting. No network server
code here: the gateway's endpoints build on this package, not the other way round.
"""

from oaishim.state.base import (
    Limits,
    Record,
    RecordConflict,
    RecordTooLarge,
    StateStore,
    StoreError,
    StoreUnavailable,
)
from oaishim.state.factory import open_store

__all__ = [
    "Limits",
    "Record",
    "RecordConflict",
    "RecordTooLarge",
    "StateStore",
    "StoreError",
    "StoreUnavailable",
    "open_store",
]
