"""The strict checker: does what a client received match the official OpenAI API exactly?

``check(exchange)`` takes one request/response pair (a plain body or a list of SSE events) and
returns :class:`Finding` objects (rule id, severity, JSON path, chunk number, message). The rules
are listed, with their default severities, in ``RULES``.
"""

from oaishim.check._check import check, infer_endpoint
from oaishim.check._findings import fold
from oaishim.check._load import exchange_from_bytes, looks_like_sse
from oaishim.check._model import CheckOptions, Endpoint, Exchange, Finding
from oaishim.check._rules import RULES, Severity

__all__ = [
    "RULES",
    "CheckOptions",
    "Endpoint",
    "Exchange",
    "Finding",
    "Severity",
    "check",
    "exchange_from_bytes",
    "fold",
    "infer_endpoint",
    "looks_like_sse",
]
