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


# The fast suite's selections: the pure run's, and the compiled core's (scripts/test), which leaves out
# the tests that swap a function inside the package (compiled modules call their own directly).
FAST = ("not live", "not live and not patches_internals")


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which turns ``numprocesses`` into workers
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The fast suite, ``pytest -m "not live"`` with no paths, runs on every core (at most 4) when
    pytest-xdist is installed (the ``dev`` extra): its tests are independent, each worker starts its
    own servers on free ports. Any other selection stays in one process: the live tests start real
    engines, which must not run two at a time, and a run of a few files would spend more on starting
    workers than it saves. ``-n 0`` (or ``-p no:xdist``) keeps the fast suite in one process too."""
    option = config.option
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    if option.numprocesses is not None or option.dist != "no" or option.collectonly or option.usepdb:
        return  # the command line chose, or a run that cannot be distributed
    if " ".join(option.markexpr.split()) not in FAST or config.args_source is not pytest.Config.ArgsSource.TESTPATHS:
        return
    workers = min(_cpus(), 4)
    if workers > 1:
        option.numprocesses = workers
        option.dist = "worksteal"  # a worker that runs out takes tests from the other: the durations are uneven


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
