"""Settings for every test: property tests are reproducible.

Hypothesis runs with a fixed seed (``derandomize``) and without its example database, so the test
command gives the same result on every run and every clean clone: a green run means the same
examples passed. ``scripts/explore`` is the exploratory run (random seeds, many more examples, see
``tests/_props.py``); a counterexample it finds becomes a fixed regression test.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

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
