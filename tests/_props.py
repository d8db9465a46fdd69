"""How many examples a property test runs: ``examples(n)`` in the test command, ``n`` times
``OAISHIM_EXPLORE_FACTOR`` (default 20) in the exploratory run (``scripts/explore``)."""

from __future__ import annotations

import os

from hypothesis import settings

EXPLORING = os.environ.get("OAISHIM_HYPOTHESIS_PROFILE") == "explore"
FACTOR = int(os.environ.get("OAISHIM_EXPLORE_FACTOR", "20")) if EXPLORING else 1


def examples(n: int) -> settings:
    """Settings for a property test of ``n`` examples (seed and database come from the profile)."""
    return settings(max_examples=n * FACTOR)
