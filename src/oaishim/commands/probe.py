"""``oaishim probe``: the command line of the probe (a thin shell: parse, run, write, print).

Exit status: 0 when side A (the URL probed) has no error-level finding, 1 when it has (with
``--baseline``: only findings the baseline did not have count), 2 for a usage error. Side B
(``--against``) is the reference and never changes the exit status.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oaishim.probe._results import FindingKey

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "probe",
        help="probe a live endpoint (optionally against another) side by side, as the compat.* cases compare them, and more",
        description="Run the probe catalogue against an OpenAI-compatible endpoint: every answer judged by the "
        "checker and by the case's own expectations; compat records, Markdown and HTML reports. Exit 1 on any "
        "error-level finding of URL (with --baseline: any new one).",
    )
    p.add_argument("url", nargs="?", metavar="URL", help="the endpoint's base URL (with or without /v1)")
    p.add_argument("--model", help="the model name to request at URL")
    p.add_argument("--api-key", help="sent as Authorization: Bearer to URL")
    p.add_argument("--against", metavar="URL2", help="a second endpoint to compare with, field by field")
    p.add_argument("--model2", metavar="NAME2", help="the model name at URL2 (default: --model)")
    p.add_argument("--api-key2", metavar="K2", help="the key for URL2 (default: none)")
    p.add_argument("--name", help="what the reports call URL, e.g. 'gateway, profile vllm' (default: the URL)")
    p.add_argument("--name2", metavar="NAME2", help="what the reports call URL2, e.g. 'raw vLLM 0.32'")
    p.add_argument("--out", type=Path, default=Path("oaishim-probe"), help="report folder (default: %(default)s)")
    p.add_argument("--cases", metavar="GLOB", help="comma-separated globs over case ids, e.g. 'compat.*,tools.*'")
    p.add_argument("--concurrency", type=int, default=4, metavar="N", help="cases in flight (default: %(default)s)")
    p.add_argument("--baseline", type=Path, metavar="FILE", help="an earlier results.json: only new findings fail")
    p.add_argument(
        "--special-tokens",
        type=Path,
        metavar="TOKENIZER",
        help="the model's tokenizer folder or file: enables the end-of-turn case and rules",
    )
    p.add_argument("--steer", choices=("auto", "none"), default="auto", help="find out how to force output (auto)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default: %(default)s)")
    p.add_argument(
        "--overflow-words",
        type=int,
        default=200_000,
        help="words in the context-overflow prompt (default: %(default)s)",
    )
    p.add_argument("--list", action="store_true", help="list the cases (after --cases) and exit")
    p.set_defaults(run=run)
    return p


def _fail(message: str) -> int:
    print(f"oaishim probe: {message}", file=sys.stderr)
    return 2


def _baseline(path: Path | None) -> set[FindingKey] | str | None:
    import orjson

    from oaishim.probe._results import baseline_keys

    if path is None:
        return None
    try:
        return baseline_keys(orjson.loads(path.read_bytes()))
    except (OSError, orjson.JSONDecodeError, ValueError) as exc:
        return f"cannot read the baseline {path}: {exc}"


def run(args: argparse.Namespace) -> int:
    # imported here: `oaishim check` and `serve` start without loading the probe's client stack
    from oaishim.probe._cases import CatalogueError, load_catalogue, select
    from oaishim.probe._files import write_reports
    from oaishim.probe._results import new_errors
    from oaishim.probe._runner import ProbeOptions, Target, run_probe
    from oaishim.probe._terminal import ProgressPrinter, summary_table

    try:
        cases = select(load_catalogue(), args.cases)
    except CatalogueError as exc:
        return _fail(f"the catalogue is broken: {exc}")
    if not cases:
        return _fail(f"no case matches {args.cases!r}")
    if args.list:
        for case in cases:
            print(f"{case.id:<36} {case.title}")
        return 0
    if not args.url or not args.model:
        return _fail("give URL and --model (or --list)")
    baseline = _baseline(args.baseline)
    if isinstance(baseline, str):
        return _fail(baseline)
    special = None
    if args.special_tokens is not None:
        from oaishim.engine.tokens import load_special_tokens

        try:
            special = load_special_tokens(args.special_tokens)
        except (OSError, ValueError) as exc:
            return _fail(f"cannot load special tokens from {args.special_tokens}: {exc}")
    targets = [Target(args.url, args.model, args.api_key, "A", args.name or "")]
    if args.against:
        targets.append(Target(args.against, args.model2 or args.model, args.api_key2, "B", args.name2 or ""))
    options = ProbeOptions(
        concurrency=max(1, args.concurrency),
        timeout=args.timeout,
        special_tokens=special,
        overflow_words=max(1, args.overflow_words),
        steer=args.steer,
    )
    result = run_probe(targets, cases, options, ProgressPrinter(sys.stderr))
    files = write_reports(result, args.out)
    print(summary_table(result))
    print(f"reports: {files['html']}, {files['markdown']}, {files['json']}, {args.out / 'records'}/")
    failing = new_errors(result.primary, baseline)
    if baseline is not None:
        print(f"{len(failing)} error-level finding(s) not in the baseline")
    return 1 if failing else 0
