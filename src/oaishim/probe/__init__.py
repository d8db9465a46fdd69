"""``oaishim probe``: the side-by-side comparison of OpenAI-compatible endpoints, automated, against live ones.

Layers, pure to impure (style.md: a core with no I/O and a thin shell):

* ``cases.yaml`` + :mod:`._cases`: the catalogue as data: requests, steering, expectations;
* :mod:`._steer`: how a server can be made to write a known text or call a tool (found by effect);
* :mod:`._view`, :mod:`._expect`, :mod:`._record`, :mod:`._judge`: an answer read as a client
  reads it, the case's own expectations, the compat record (:mod:`._record`), and the judgement (checker
  findings + expectations -> checks);
* :mod:`._results`, :mod:`._compare`: checks, scores, baselines; the two sides of ``--against``;
* :mod:`._runner`: the only network I/O (aiohttp), calibration, concurrency, progress;
* :mod:`._terminal`, :mod:`._markdown`, :mod:`._html`, :mod:`._files`: the reports;
* the command line, ``oaishim probe URL --model NAME ...``, is :mod:`oaishim.commands.probe`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oaishim.probe._cases import Case, CatalogueError, load_catalogue, select
    from oaishim.probe._results import CaseResult, CheckResult, ProbeRun, SideResult, baseline_keys, new_errors
    from oaishim.probe._runner import ProbeOptions, Target, probe, run_probe
    from oaishim.probe._steer import Steering

# Loaded on first use, so that `oaishim check` and `oaishim serve` do not import the probe's HTTP
# client (oaishim.commands.probe registers the subcommand without importing it).
_EXPORTS = {
    "Case": "_cases",
    "CatalogueError": "_cases",
    "load_catalogue": "_cases",
    "select": "_cases",
    "CaseResult": "_results",
    "CheckResult": "_results",
    "ProbeRun": "_results",
    "SideResult": "_results",
    "baseline_keys": "_results",
    "new_errors": "_results",
    "ProbeOptions": "_runner",
    "Target": "_runner",
    "probe": "_runner",
    "run_probe": "_runner",
    "Steering": "_steer",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'oaishim.probe' has no attribute {name!r}")
    return getattr(importlib.import_module(f"oaishim.probe.{_EXPORTS[name]}"), name)


__all__ = [
    "Case",
    "CaseResult",
    "CatalogueError",
    "CheckResult",
    "ProbeOptions",
    "ProbeRun",
    "SideResult",
    "Steering",
    "Target",
    "baseline_keys",
    "load_catalogue",
    "new_errors",
    "probe",
    "run_probe",
    "select",
]
