"""Capture on against capture off, measured in pairs (`bench/compare.py`'s last phase).

The rounds measure each path once a round, a minute or more apart, and the table gives the median
of three rounds: on this kind of machine one path's c32 p50 moves by 10-15 % from one round to
the next (bench/README.md), as much as the goal this figure is judged by ("capture on within 10 %
of off"). Here the two are measured next to each other instead: ``blocks`` blocks, each starting
the direct path, ``oaishim`` and ``oaishim_capture`` afresh one after the other (the order turned
by one each block, so none always goes first), warming each as the rounds do, and running wrk at
c1 then c32 (``seconds`` each, the rounds' duration). Each block gives one ratio a figure: capture
on's added latency (its latency less the direct path's in the same block) over capture off's; the
summary is the median of the blocks' ratios, with their min and max, and the whole latencies'
ratio beside (a p99 the direct path's own tail can match leaves the added one near zero).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any, Protocol

TRIO = ("direct", "oaishim", "oaishim_capture")
LEVELS = (1, 32)
FIGURES = (("c1", "p50"), ("c1", "p99"), ("c32", "p50"), ("c32", "p99"))


class Run(Protocol):
    url: str

    def stop(self) -> None: ...


def measure(
    start: Callable[[str], Run],
    wrk: Callable[[str, int, float], dict[str, Any]],
    blocks: int,
    seconds: float,
    dropped: Callable[[str], float | None] | None = None,
) -> list[dict[str, Any]]:
    """The blocks' raw figures: for each, each path's wrk result at c1 and c32 (and, with
    ``dropped``, how many exchanges capture on had no room for: its figures hold only if none)."""
    out: list[dict[str, Any]] = []
    for b in range(blocks):
        order = TRIO[b % len(TRIO) :] + TRIO[: b % len(TRIO)]
        block: dict[str, Any] = {"order": list(order)}
        for name in order:
            run = start(name)
            try:
                wrk(run.url, 4, 1)  # warm, as the rounds do
                time.sleep(0.3)
                block[name] = {f"c{c}": wrk(run.url, c, seconds) for c in LEVELS}
                if name == "oaishim_capture" and dropped is not None:
                    block[name]["capture_dropped"] = dropped(run.url)
            finally:
                run.stop()  # (a capture process builds what it holds before it exits: the next starts quiet)
        out.append(block)
    return out


def ratios(block: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """One block's on ÷ off, for each figure: of the added latencies (None when capture off's added
    latency is not above zero) and of the whole latencies."""
    out: dict[str, dict[str, float | None]] = {}
    for level, p in FIGURES:
        key = f"{p}_us"
        base, off, on = (block[n][level][key] for n in TRIO)
        added = (on - base) / (off - base) if off > base else None
        out[f"{level}_{p}"] = {"added": added, "whole": on / off if off > 0 else None}
    return out


def summarise(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """The median and [min, max] over blocks of each ratio, and the blocks themselves."""
    each = [ratios(b) for b in blocks]
    summary: dict[str, Any] = {}
    for level, p in FIGURES:
        name = f"{level}_{p}"
        summary[name] = {}
        for kind in ("added", "whole"):
            values = [v for r in each if (v := r[name][kind]) is not None]
            summary[name][kind] = (
                {"median": statistics.median(values), "min": min(values), "max": max(values), "blocks": len(values)}
                if values
                else None
            )
    return {"blocks": blocks, "ratios": each, "summary": summary}


def markdown(pairs: dict[str, Any] | None) -> list[str]:
    """The table under the main one: capture on ÷ off, paired."""
    if not pairs:
        return []
    n = len(pairs["blocks"])
    lines = [
        "",
        f"Capture on ÷ capture off, paired (bench/capture_pairs.py: {n} blocks, each the direct path, oaishim and "
        "oaishim_capture started afresh one after the other; median of the blocks' ratios, min – max):",
        "",
        "| figure | added latency, on ÷ off | whole latency, on ÷ off |",
        "|---|---|---|",
    ]
    for level, p in FIGURES:
        cells = [f"{level} {p}"]
        for kind in ("added", "whole"):
            s = pairs["summary"][f"{level}_{p}"][kind]
            cells.append(
                "—" if s is None else f"{s['median']:.3f} ({s['min']:.3f} – {s['max']:.3f}, {s['blocks']} blocks)"
            )
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def dropped_line(counts: dict[str, list[float | None]] | None) -> list[str]:
    """How many exchanges capture on had no room for, in each round and block (``/metrics``)."""
    if not counts or not (counts["rounds"] or counts["pairs"]):
        return []

    def show(values: list[float | None]) -> str:
        return ", ".join("?" if v is None else f"{v:.0f}" for v in values) or "—"

    return [
        "",
        f"Exchanges capture on dropped (`oaishim_capture_dropped_total`; none, or its figures leave work out): "
        f"rounds {show(counts['rounds'])}; pairs {show(counts['pairs'])}.",
    ]
