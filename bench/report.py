"""From the raw figures of every round to ``latest.json``, its dated copy and the Markdown table.

``latest.json`` has one key per path (``direct``, ``nginx``, ``oaishim``, ``oaishim_capture``,
``litellm``), each holding the medians over rounds in the layout the issue fixes; ``spread`` holds
the same layout with ``[min, max]``; ``absolute`` the unsubtracted figures; ``meta`` how and where
it ran. A figure that does not apply (the direct path has no proxy process) or a path that could not
run is ``null``, and ``meta.skipped`` says why.
"""

from __future__ import annotations

import re
import statistics
import time
from pathlib import Path
from typing import Any

import capture_pairs
import chunk_floor
import orjson
import paths

GOALS = {  # the goals, shown beside the figures (goals, not assertions)
    "latency": "≤ 1/10 LiteLLM, ≤ 2× nginx",
    "cpu_us_per_chunk": "≤ 10",
    "rss_idle_mb": "≤ 80",
    "rss_per_stream_kb": "≤ 30",
    "start_s": "≤ 1",
}
ROWS = [  # (label, key path, goal key)
    ("added latency, c1 p50 (ms)", ("added_latency_ms", "c1", "p50"), "latency"),
    ("added latency, c1 p99 (ms)", ("added_latency_ms", "c1", "p99"), "latency"),
    ("added latency, c32 p50 (ms)", ("added_latency_ms", "c32", "p50"), "latency"),
    ("added latency, c32 p99 (ms)", ("added_latency_ms", "c32", "p99"), "latency"),
    ("added latency, c64 p50 (ms)", ("added_latency_ms", "c64", "p50"), "latency"),
    ("added latency, c64 p99 (ms)", ("added_latency_ms", "c64", "p99"), "latency"),
    ("added TTFT, stream p50 (ms)", ("ttft_added_ms", "p50"), "latency"),
    ("added TTFT, stream p99 (ms)", ("ttft_added_ms", "p99"), "latency"),
    ("CPU per request (µs = ms per 1,000)", ("cpu_us_per_request",), None),
    ("CPU per streamed chunk (µs)", ("cpu_us_per_chunk",), "cpu_us_per_chunk"),
    ("of which the capture process, per request (µs)", ("capture_cpu_us_per_request",), None),
    ("of which the capture process, per streamed chunk (µs)", ("capture_cpu_us_per_chunk",), None),
    ("the capture process while the load ran, per request (µs)", ("capture_during_us_per_request",), None),
    ("the capture process while the load ran, per chunk (µs)", ("capture_during_us_per_chunk",), None),
    ("RSS idle (MB)", ("rss_idle_mb",), "rss_idle_mb"),
    ("RSS per open stream (KB)", ("rss_per_stream_kb",), "rss_per_stream_kb"),
    ("start-up (s)", ("start_s",), "start_s"),
    ("saturation, plain (requests/s at which p99 doubles)", ("saturation", "plain_rps"), None),
    ("saturation, streams (chunks/s at which p99 doubles)", ("saturation", "chunks_per_s"), None),
    ("Responses: added latency, plain c1 p50 (ms)", ("responses", "added_latency_ms", "c1", "p50"), None),
    ("Responses: added latency, plain c32 p50 (ms)", ("responses", "added_latency_ms", "c32", "p50"), None),
    ("Responses: CPU per plain request (µs)", ("responses", "cpu_us_per_request"), None),
    ("Responses: CPU per streamed chunk (µs)", ("responses", "cpu_us_per_chunk"), "cpu_us_per_chunk"),
]
LEVELS = ("c1", "c32", "c64")


PATHS = (
    "direct",
    "nginx",
    "oaishim",
    "oaishim_workers",
    "oaishim_capture",
    "oaishim_poll",
    "litellm",
    "oaishim_before",
)


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


_pct = pct


def _saturated(steps: list[dict[str, Any]], key: str) -> float | None:
    """The throughput of the highest step whose p99 is at most twice the first step's."""
    if not steps:
        return None
    limit = 2 * steps[0]["p99_us"]
    return max((s[key] for s in steps if s["p99_us"] <= limit), default=None)


def _responses(r: dict[str, Any] | None, base: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """/v1/responses figures; "added" against the direct path's chat figures (the same upstream work)."""
    if not r:
        return _responses_empty()
    short, long = params["stream_lengths"]
    chunks = params["streams"] // 2 * (long - short)
    return {
        "added_latency_ms": {
            c: {p: (r[c][f"{p}_us"] - base[c][f"{p}_us"]) / 1000 for p in ("p50", "p99")} for c in ("c1", "c32")
        },
        "cpu_us_per_request": r["c32"]["cpu_s"] / max(r["c32"]["requests"], 1) * 1e6,
        "cpu_us_per_chunk": (r[f"streams{long}"]["cpu_s"] - r[f"streams{short}"]["cpu_s"]) / chunks * 1e6,
    }


def _responses_empty() -> dict[str, Any]:
    return {
        "added_latency_ms": {c: {"p50": None, "p99": None} for c in ("c1", "c32")},
        "cpu_us_per_request": None,
        "cpu_us_per_chunk": None,
    }


def _one_round(m: dict[str, Any], base: dict[str, Any], proxy: bool, params: dict[str, Any]) -> dict[str, Any]:
    """This round's figures for one path, against the direct path's from the same round."""
    ttft, ttft0 = m["ttft"]["ttft_us"], base["ttft"]["ttft_us"]
    out: dict[str, Any] = {
        "added_latency_ms": {
            c: {p: (m[c][f"{p}_us"] - base[c][f"{p}_us"]) / 1000 for p in ("p50", "p99")} for c in LEVELS if c in m
        },
        "ttft_added_ms": {p: (_pct(ttft, q) - _pct(ttft0, q)) / 1000 for p, q in (("p50", 50), ("p99", 99))},
        "cpu_us_per_request": None,
        "cpu_us_per_chunk": None,
        "capture_cpu_us_per_request": None,
        "capture_cpu_us_per_chunk": None,
        "capture_during_us_per_request": None,
        "capture_during_us_per_chunk": None,
        "rss_idle_mb": None,
        "rss_per_stream_kb": None,
        "start_s": None,
        "saturation": {
            "plain_rps": _saturated(m.get("saturation", {}).get("plain", []), "rps"),
            "chunks_per_s": _saturated(m.get("saturation", {}).get("streams", []), "chunks_per_s"),
        },
        "responses": _responses(m.get("responses"), base, params) if proxy else _responses_empty(),
    }
    if proxy:
        short, long = params["stream_lengths"]
        chunks = params["streams"] * (long - short)
        out |= {
            "cpu_us_per_request": m["c32"]["cpu_s"] / m["c32"]["requests"] * 1e6,
            "cpu_us_per_chunk": (m[f"streams{long}"]["cpu_s"] - m[f"streams{short}"]["cpu_s"]) / chunks * 1e6,
            "rss_idle_mb": m["rss_idle_kb"] / 1024,
            **_capture_share(m, short, long, chunks),
            "rss_per_stream_kb": (m["rss_hold_kb"] - m["rss_before_hold_kb"]) / max(m["hold_open"], 1),
            "start_s": m["start_s"],
        }
    return out


def _capture_share(m: dict[str, Any], short: int, long: int, chunks: int) -> dict[str, Any]:
    """What of the CPU figures the capture process spent on the load's records (the capture path
    only): all of it, counted until it went idle after the load (it builds most records once the
    gateway is quiet, within a share while it is busy), and the part it spent while the load ran."""
    if "capture_cpu_s" not in m["c32"]:
        return {}
    out: dict[str, Any] = {}
    for key, field in (("capture_cpu_us", "capture_cpu_s"), ("capture_during_us", "capture_cpu_during_s")):
        out[key + "_per_request"] = m["c32"][field] / m["c32"]["requests"] * 1e6
        out[key + "_per_chunk"] = (m[f"streams{long}"][field] - m[f"streams{short}"][field]) / chunks * 1e6
    return out


def _absolute(m: dict[str, Any], proxy: bool) -> dict[str, Any]:
    ttft = m["ttft"]["ttft_us"]
    return {
        "latency_ms": {c: {p: m[c][f"{p}_us"] / 1000 for p in ("p50", "p99")} for c in LEVELS if c in m},
        "ttft_ms": {"p50": _pct(ttft, 50) / 1000, "p99": _pct(ttft, 99) / 1000},
        "requests_per_s": {c: m[c]["requests"] / (m[c]["duration_us"] / 1e6) for c in LEVELS if c in m},
        "cpu_us_per_request_c1": m["c1"]["cpu_s"] / m["c1"]["requests"] * 1e6 if proxy else None,
        "rss_fresh_mb": m["rss_fresh_kb"] / 1024 if proxy else None,
        "streams_held_open": m.get("hold_open"),
        "errors": sum(m[c]["errors"] + m[c]["non2xx"] for c in LEVELS if c in m)
        + m["ttft"]["errors"] + sum(m[k]["errors"] for k in m if k.startswith("streams")),
        "saturation_steps": m.get("saturation"),
    }  # fmt: skip


def _fold(per_round: list[dict[str, Any]], how: Any) -> Any:
    """The same layout with ``how(values over rounds)`` at each leaf (None stays None)."""
    first = per_round[0]
    if isinstance(first, dict):
        return {k: _fold([r[k] for r in per_round], how) for k in first}
    if isinstance(first, list) or any(isinstance(v, (dict, list)) for v in per_round):
        return first  # a list of steps: the first round's, as measured
    values = [v for v in per_round if v is not None]
    return how(values) if values else None


def summarise(rounds: list[dict[str, Any]], meta: dict[str, Any], names: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    spread: dict[str, Any] = {}
    absolute: dict[str, Any] = {}
    empty = _one_round_empty()
    for name in names:
        if name not in rounds[0]:
            result[name] = empty
            continue
        proxy = name != "direct"
        figures = [_one_round(r[name], r["direct"], proxy, meta["params"]) for r in rounds]
        result[name] = _fold(figures, statistics.median)
        spread[name] = _fold(figures, lambda v: [min(v), max(v)])
        absolute[name] = _fold([_absolute(r[name], proxy) for r in rounds], statistics.median)
    return {**result, "spread": spread, "absolute": absolute, "meta": meta}


def _one_round_empty() -> dict[str, Any]:
    return {
        "added_latency_ms": {c: {"p50": None, "p99": None} for c in LEVELS},
        "ttft_added_ms": {"p50": None, "p99": None},
        "cpu_us_per_request": None,
        "cpu_us_per_chunk": None,
        "capture_cpu_us_per_request": None,
        "capture_cpu_us_per_chunk": None,
        "capture_during_us_per_request": None,
        "capture_during_us_per_chunk": None,
        "rss_idle_mb": None,
        "rss_per_stream_kb": None,
        "start_s": None,
        "saturation": {"plain_rps": None, "chunks_per_s": None},
        "responses": _responses_empty(),
    }


# -- Markdown ---------------------------------------------------------------------------------------
def _get(tree: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        tree = tree.get(key) if isinstance(tree, dict) else None
    return tree


def fmt(value: float | None) -> str:
    if value is None:
        return "—"
    a = abs(value)
    return f"{value:.0f}" if a >= 100 else f"{value:.1f}" if a >= 10 else f"{value:.2f}" if a >= 1 else f"{value:.3f}"


def _ratio(top: float | None, bottom: float | None) -> str:
    if top is None or bottom is None or bottom <= 0:
        return "—"
    return f"{top / bottom:.2f}×"


def markdown(result: dict[str, Any]) -> str:
    meta = result["meta"]
    names = [n for n in PATHS if n in result]
    ours = [n for n in paths.OURS if n in result and n not in meta["skipped"]]
    before = "oaishim_before" in result and "oaishim_before" not in meta["skipped"]
    head = ["figure (median of rounds)", "goal", *names]
    for n in ours:
        head += [f"{n} ÷ litellm", f"{n} ÷ nginx"]
    if before:
        head.append("oaishim ÷ oaishim_before")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, keys, goal in ROWS:
        cells = [label, GOALS.get(goal or "", "")]
        cells += [fmt(_get(result[n], keys)) if n not in meta["skipped"] else "n/a" for n in names]
        for n in ours:
            value = _get(result[n], keys)
            cells += [_ratio(value, _get(result.get("litellm"), keys)), _ratio(value, _get(result.get("nginx"), keys))]
        if before:
            cells.append(_ratio(_get(result["oaishim"], keys), _get(result["oaishim_before"], keys)))
        lines.append("| " + " | ".join(cells) + " |")
    base = result["absolute"]["direct"]
    lines += [
        "",
        f"Direct baseline (subtracted above): c1 p50 {fmt(base['latency_ms']['c1']['p50'])} ms, "
        f"c32 p50 {fmt(base['latency_ms']['c32']['p50'])} ms, TTFT p50 {fmt(base['ttft_ms']['p50'])} ms.",
    ]
    for key, who in (("micro", "oaishim"), ("micro_before", "oaishim_before")):
        if key in result:
            m = result[key]
            lines.append(
                f"{who} pure work (bench/micro.py, CPU time, no sockets): {fmt(m['plain_us_per_request'])} µs "
                f"per plain request, {fmt(m['stream_us_per_chunk'])} µs per streamed chunk."
            )
    for name, why in meta["skipped"].items():
        lines.append(f"{name}: {why}")
    lines += capture_pairs.markdown(result.get("capture_pairs"))
    lines += capture_pairs.dropped_line(result.get("capture_dropped"))
    lines += chunk_floor.markdown(result.get("chunk_floor"))
    lines += callgrind_lines(result.get("callgrind"), result.get("callgrind_baseline"), result.get("callgrind_pure"))
    lines += ["", "Spread (min – max over rounds):", ""]
    lines += ["| figure | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    for label, keys, _ in ROWS:
        cells = [label]
        for n in names:
            pair = _get(result["spread"].get(n, {}), keys)
            cells.append(f"{fmt(pair[0])} – {fmt(pair[1])}" if pair else "—")
        lines.append("| " + " | ".join(cells) + " |")
    load = ", ".join(f"{x[0]:.2f}" for x in meta["loadavg_per_round"])
    v = meta["versions"]
    lines += [
        "",
        f"{meta['date']}{' (' + meta['label'] + ')' if meta['label'] else ''}: {meta['rounds']} rounds in "
        f"{meta['wall_s']:.0f} s on {meta['cpus']} × {meta['cpu_model']}; 1-min load average before and after "
        f"each round: {load}. oaishim {v['oaishim']}{BUILDS.get(meta.get('oaishim_build', ''), '')}, {v['nginx']}, "
        f"LiteLLM {v['litellm']}, {v['wrk']}, "
        f"Python {v['python']}"
        + (f"; the gateway on Python {v['gateway_python']}." if v.get("gateway_python") else "."),
    ]
    return "\n".join(lines) + "\n"


BUILDS = {"compiled": " (core compiled with mypyc, as a wheel installs it)", "pure": " (run as Python)"}

CALLGRIND_ROWS = [
    ("instructions per plain request (chat)", "plain_request"),
    ("instructions per streamed request, chunks aside (chat)", "stream_request"),
    ("instructions per streamed chunk (chat)", "stream_chunk"),
    ("instructions per plain request (Responses)", "responses_plain_request"),
    ("instructions per streamed event (Responses)", "responses_stream_chunk"),
]


def callgrind_lines(
    now: dict[str, Any] | None, baseline: dict[str, Any] | None, pure: dict[str, Any] | None = None
) -> list[str]:
    """The instruction counts (bench/callgrind.py: oaishim under valgrind, N vs 2N), beside the
    baseline's; with ``pure``, the same source run as Python too (``now`` is then the compiled build)."""
    if not now:
        return []
    label = baseline.get("label", "baseline") if baseline else "baseline"
    lines = ["", f"Instruction counts (callgrind; stable to ~1 % across runs; baseline: {label}):", ""]
    if pure:
        lines += [
            "| figure | baseline | now, as Python | now, compiled core | compiled ÷ baseline |",
            "|---|---|---|---|---|",
        ]
    else:
        lines += ["| figure | baseline | now | now ÷ baseline |", "|---|---|---|---|"]
    for text, key in CALLGRIND_ROWS:
        a, b = (baseline or {}).get(key), now.get(key)
        if b is None:
            continue
        ratio = f"{b / a:.2f}×" if a else "—"
        middle = [f"{pure[key]:,}" if pure.get(key) else "—"] if pure else []
        lines.append("| " + " | ".join([text, f"{a:,}" if a else "—", *middle, f"{b:,}", ratio]) + " |")
    return lines


def write(result: dict[str, Any], out: Path, label: str, readme: Path | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    data = orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n"
    table = markdown(result)
    stamp = time.strftime("%Y-%m-%dT%H%M") + (f"-{label}" if label else "")
    for stem in ("latest", stamp):
        (out / f"{stem}.json").write_bytes(data)
        (out / f"{stem}.md").write_text(table)
    if readme is not None and readme.exists():
        text = readme.read_text()
        block = f"<!-- bench:latest -->\n{table}<!-- /bench:latest -->"
        readme.write_text(re.sub(r"<!-- bench:latest -->.*?<!-- /bench:latest -->", lambda _: block, text, flags=re.S))
    print(table)
