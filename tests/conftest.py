"""Settings for every test: property tests are reproducible.

Hypothesis runs with a fixed seed (``derandomize``) and without its example database, so the test
command gives the same result on every run and every clean clone: a green run means the same
examples passed. ``scripts/explore`` is the exploratory run (random seeds, many more examples, see
``tests/_props.py``); a counterexample it finds becomes a fixed regression test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from _postgres import Cluster, find_bindir

settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile(
    "explore",
    derandomize=False,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("OAISHIM_HYPOTHESIS_PROFILE", "ci"))


def _missing(why: str) -> None:
    # CI installs PostgreSQL (.ci/run): a missing server there is a failure, not a quiet skip.
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """A private PostgreSQL cluster for the session (``tests/_postgres.py``): the response store's
    tests and the gateways that share one store use it."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _missing("psycopg is not installed (pip install -e '.[dev]')")
    bindir = find_bindir()
    if bindir is None:
        _missing("the PostgreSQL server is not installed (apt-get install postgresql)")
    assert bindir is not None
    cluster = Cluster(bindir).start()
    try:
        yield cluster
    finally:
        cluster.stop()
