"""The capture commands: ``capture``, ``replay``, ``mock``, ``inspect`` (``add_parsers`` wires them).

A thin shell like ``oaishim.commands.main``: arguments in, files and servers opened, text out; the work is in
the modules it calls.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from oaishim.capture.reader import CaptureReader

    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]


def _fail(message: str) -> int:
    print(f"oaishim: {message}", file=sys.stderr)
    return 2


def add_parsers(sub: SubParsers) -> None:
    _add_capture(sub)
    _add_replay(sub)
    _add_mock(sub)
    _add_inspect(sub)


def run_asgi(app: Any, host: str, port: int, log_level: str) -> None:
    """Serve an ASGI app the way the gateway is served, adding no headers of its own."""
    from oaishim.server.main import run_asgi as serve_asgi

    serve_asgi(app, host, port, log_level, date_header=False)


# -- capture ----------------------------------------------------------------------------------------
def _add_capture(sub: SubParsers) -> None:
    p = sub.add_parser(
        "capture",
        help="a logging proxy: record every exchange with an upstream, passing bytes through untouched",
        description="Run a pure logging proxy in front of --upstream: requests and responses pass through as they "
        "came (client headers included); each exchange, redacted, is recorded in --out.",
    )
    p.add_argument("--upstream", required=True, help="the server to forward to, e.g. http://127.0.0.1:8080")
    p.add_argument("--out", required=True, type=Path, help="the capture folder (created 0700, files 0600)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8001, help="listen port (default 8001)")
    p.add_argument("--redact", action="append", default=[], metavar="JSONPATH", help="also redact this JSON path")
    p.add_argument("--no-check", action="store_true", help="do not run the checker on recorded exchanges")
    p.add_argument("--max-file-mb", type=float, default=64.0, help="start a new JSONL file past this size")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.set_defaults(run=_run_capture)


def _run_capture(args: argparse.Namespace) -> int:
    from oaishim.capture.redact import parse_path
    from oaishim.capture_tools.proxy import CaptureProxy
    from oaishim.server.config import ConfigError, upstream_url
    from oaishim.server.recording import Recording

    try:
        upstream = upstream_url(args.upstream, "--upstream")
        for path in args.redact:
            parse_path(path)
    except (ConfigError, ValueError) as exc:
        return _fail(str(exc))
    recording = Recording(
        args.out,
        mode="proxy",
        redact_paths=args.redact,
        run_checker=not args.no_check,
        max_file_bytes=int(args.max_file_mb * (1 << 20)),
    )
    print(f"oaishim capture on http://{args.host}:{args.port} -> {upstream}, recording to {args.out}", flush=True)
    run_asgi(CaptureProxy(upstream, recording), args.host, args.port, args.log_level)
    return 0


# -- replay -----------------------------------------------------------------------------------------
def _add_replay(sub: SubParsers) -> None:
    p = sub.add_parser(
        "replay",
        help="re-send recorded requests to a server and report how its answers differ",
        description="Re-send each recorded request to --to and compare the answers: status, field sets, text, "
        "finish reasons, checker findings. Exit 1 when any answer differs.",
    )
    p.add_argument("source", type=Path, metavar="DIR|FILE", help="a capture folder or one of its JSONL files")
    p.add_argument("--to", required=True, help="the server to send them to, e.g. http://127.0.0.1:8000")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight at once (default 4)")
    p.add_argument(
        "--side", choices=("client", "upstream"), default="client", help="which recorded request to send again"
    )
    p.add_argument("--api-key", help="the key to send (recorded keys are redacted)")
    p.add_argument("--id", action="append", default=[], help="only this exchange (an id or its start; repeatable)")
    p.add_argument("--ignore", action="append", default=[], help="a kind of difference not to report (repeatable)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(run=_run_replay)


def _run_replay(args: argparse.Namespace) -> int:
    from oaishim.capture.diff import KINDS
    from oaishim.capture.reader import CaptureReader
    from oaishim.capture_tools.replay import replay

    unknown = [k for k in args.ignore if k not in KINDS]
    if unknown:
        return _fail(f"--ignore: {', '.join(unknown)} (kinds: {', '.join(KINDS)})")
    try:
        reader = CaptureReader(args.source)
        records = [reader.get(i) for i in args.id] if args.id else list(reader.records())
    except (FileNotFoundError, KeyError) as exc:
        return _fail(str(exc).strip("'\""))
    outcomes = asyncio.run(
        replay(
            records,
            args.to,
            concurrency=args.concurrency,
            which=args.side,
            api_key=args.api_key,
            ignore=args.ignore,
        )
    )
    changed = [o for o in outcomes if o.differences or o.error]
    if args.format == "json":
        report = [
            {
                "id": o.record_id,
                "request": f"{o.method} {o.target}",
                "error": o.error,
                "differences": [{"kind": d.kind, "message": d.message} for d in o.differences],
            }
            for o in outcomes
        ]
        sys.stdout.buffer.write(orjson.dumps({"exchanges": report}, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        for o in outcomes:
            status = "error" if o.error else f"{len(o.differences)} difference(s)" if o.differences else "same"
            print(f"{o.record_id}  {o.method} {o.target}: {status}")
            if o.error:
                print(f"    {o.error}")
            for d in o.differences:
                print(f"    {d.kind:<13} {d.message}")
        print(f"{len(outcomes)} replayed: {len(outcomes) - len(changed)} same, {len(changed)} different or failed")
    return 1 if changed else 0


# -- mock -------------------------------------------------------------------------------------------
def _add_mock(sub: SubParsers) -> None:
    p = sub.add_parser(
        "mock",
        help="serve recorded responses as an OpenAI-compatible backend",
        description="Serve a capture as a backend: each request is answered with the recorded response to the "
        "same method, path and (normalised) body; /v1/models lists the recorded models.",
    )
    p.add_argument("source", type=Path, metavar="DIR|FILE", help="a capture folder or one of its JSONL files")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8002, help="listen port (default 8002)")
    p.add_argument(
        "--timing",
        choices=("original", "fast"),
        default="original",
        help="send each piece at its recorded offset, or all at once",
    )
    p.add_argument(
        "--side",
        choices=("upstream", "client"),
        default="upstream",
        help="serve what the backend sent (default) or what the client received",
    )
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.set_defaults(run=_run_mock)


def _run_mock(args: argparse.Namespace) -> int:
    from oaishim.capture.playbook import Playbook
    from oaishim.capture.reader import CaptureReader
    from oaishim.capture_tools.mock import MockBackend

    try:
        reader = CaptureReader(args.source)
    except FileNotFoundError as exc:
        return _fail(str(exc))
    book = Playbook.of(reader.records(), side=args.side)
    if not len(book):
        return _fail(f"{args.source} holds no exchange with a {args.side} response to serve")
    print(f"oaishim mock on http://{args.host}:{args.port}: {len(book)} recorded response(s)", flush=True)
    run_asgi(MockBackend(book, args.timing), args.host, args.port, args.log_level)
    return 0


# -- inspect ----------------------------------------------------------------------------------------
def _add_inspect(sub: SubParsers) -> None:
    p = sub.add_parser(
        "inspect",
        help="list recorded exchanges, or show one: request, stream timeline, final message, findings",
        description="List the exchanges of a capture, or show one (--id) in full.",
    )
    p.add_argument("source", type=Path, metavar="DIR|FILE", help="a capture folder or one of its JSONL files")
    p.add_argument("--id", help="show this exchange (its id, or enough of its start)")
    p.add_argument("--side", choices=("client", "upstream"), default="client", help="which side's stream to show")
    p.add_argument("--model", help="list only this model's exchanges")
    p.add_argument("--path", help="list only exchanges whose path contains this")
    p.add_argument("--status", type=int, help="list only exchanges with this status")
    p.add_argument("--with-findings", action="store_true", help="list only exchanges with client-side findings")
    p.add_argument("--limit", type=int, help="list only the last N exchanges")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(run=_run_inspect)


def _client_findings(reader: CaptureReader, row: dict[str, Any]) -> int:
    """How many client-side findings a listed exchange has; one stored unchecked (the recorder was over
    its checker budget) is checked now, and its row says so, rather than being taken for clean."""
    if row.get("findings") is None:
        from oaishim.capture.build import findings_now
        from oaishim.capture.record import RecordError

        try:
            found = findings_now(reader.at(row))
        except (OSError, RecordError):
            return 0
        row.update(findings=len(found["client"]), upstream_findings=len(found["upstream"]), checked_now=True)
    return int(row["findings"])


def _run_inspect(args: argparse.Namespace) -> int:
    from oaishim.capture.reader import CaptureReader
    from oaishim.capture.render import render_exchange, render_list

    try:
        reader = CaptureReader(args.source)
        if args.id:
            record = reader.get(args.id)
            if args.format == "json":
                sys.stdout.buffer.write(orjson.dumps(record, option=orjson.OPT_INDENT_2) + b"\n")
            else:
                print(render_exchange(record, args.side))
            return 0
        rows = reader.entries()
    except (FileNotFoundError, KeyError) as exc:
        return _fail(str(exc).strip("'\""))
    rows = [
        r
        for r in rows
        if (args.model is None or r.get("model") == args.model)
        and (args.path is None or args.path in str(r.get("path")))
        and (args.status is None or r.get("status") == args.status)
    ]
    if args.with_findings:
        rows = [r for r in rows if _client_findings(reader, r)]
    if args.limit is not None:
        rows = rows[-args.limit :] if args.limit > 0 else []
    if args.format == "json":
        body = {"exchanges": rows, "dropped": reader.dropped, "torn": reader.torn}
        sys.stdout.buffer.write(orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(render_list(rows, torn=reader.torn, dropped=reader.dropped))
    return 0
