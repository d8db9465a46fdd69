"""The ``oaishim`` command line: a thin shell that reads files and prints; the work is elsewhere."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from oaishim import __version__
from oaishim.check import CheckOptions, check, exchange_from_bytes
from oaishim.check._report import json_report, text_report
from oaishim.commands.capture import add_parsers as _add_capture_commands
from oaishim.commands.probe import add_parser as _add_probe


def _add_check(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check",
        help="check raw response bodies (.sse or JSON) against the official OpenAI API",
        description="Check raw response bodies against the official OpenAI API. Exit 1 on any error-level finding.",
    )
    p.add_argument("bodies", nargs="+", metavar="BODY", type=Path, help="a raw SSE body or a JSON body")
    p.add_argument("--request", type=Path, help="the request JSON, which enables the request-aware rules")
    p.add_argument("--status", type=int, help="the HTTP status of the response (unknown when omitted)")
    p.add_argument("--content-type", help="the response's Content-Type (guessed from the bytes when omitted)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument(
        "--extensions-as-notes", action="store_true", help="report known vendor extension fields as notes, not errors"
    )
    p.add_argument("--special-token", action="append", default=[], help="a special token of the model (repeatable)")
    p.add_argument("--eot-token", action="append", default=[], help="an end-of-turn token of the model (repeatable)")
    p.set_defaults(run=_run_check)


def _fail(message: str) -> int:
    print(f"oaishim: {message}", file=sys.stderr)
    return 2


def _run_check(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    request = None
    if args.request is not None:
        try:
            request = orjson.loads(args.request.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            return _fail(f"cannot read the request {args.request}: {exc}")
        if not isinstance(request, dict):
            return _fail(f"the request {args.request} is not a JSON object")
    options = CheckOptions(
        extensions_as_notes=args.extensions_as_notes,
        special_tokens=frozenset(args.special_token),
        eot_tokens=frozenset(args.eot_token),
    )
    headers = {"content-type": args.content_type} if args.content_type else None
    errors = 0
    reports = []
    for path in args.bodies:
        try:
            raw = path.read_bytes()
        except OSError as exc:
            return _fail(f"cannot read {path}: {exc}")
        findings = check(exchange_from_bytes(raw, request=request, status=args.status, headers=headers), options)
        errors += sum(f.severity == "error" for f in findings)
        if args.format == "json":
            reports.append(json_report(str(path), findings))
        else:
            print(text_report(str(path), findings))
    elapsed = time.perf_counter() - started
    if args.format == "json":
        sys.stdout.buffer.write(
            orjson.dumps({"files": reports, "seconds": round(elapsed, 4)}, option=orjson.OPT_INDENT_2)
        )
        sys.stdout.write("\n")
    else:
        print(f"{len(args.bodies)} file(s) checked in {elapsed * 1000:.0f} ms: {errors} error(s)")
    return 1 if errors else 0


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="run the normalising gateway in front of an OpenAI-compatible server",
        description="Run the gateway: every client sees the exact official OpenAI wire format. "
        "Settings also come from OAISHIM_* environment variables and --config.",
    )
    p.add_argument(
        "--upstream",
        help="backend base URL (comma-separated replicas), e.g. http://127.0.0.1:8080; "
        "without one, an embedded llama.cpp engine serves --model (default: a tiny generated model)",
    )
    p.add_argument("--model", type=Path, help="a GGUF file for the embedded engine (when no --upstream is given)")
    p.add_argument(
        "--profile",
        help="auto (default), a family (vllm, sglang, trtllm, llamacpp, ollama, openai: its version is asked), FAMILY@VERSION (pinned) or generic",
    )
    p.add_argument("--served-model-name", help="the model name clients use (default: the backend's names)")
    p.add_argument("--api-key", action="append", default=[], help="a key clients must present (repeatable)")
    p.add_argument("--upstream-api-key", help="the key sent to the backend (the client's is never forwarded)")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 8000)")
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="serving processes sharing the port, each with its own upstream pool; 0 for one per usable core "
        "(default 1)",
    )
    p.add_argument("--config", type=Path, help="a TOML or YAML file with settings and models")
    p.add_argument("--keep-extensions", action="store_true", default=None, help="keep the backend's extra fields")
    p.add_argument("--reasoning-field", help="reasoning_content|reasoning|both|drop (default reasoning_content)")
    p.add_argument(
        "--no-text-repair",
        dest="text_repair",
        action="store_false",
        default=None,
        help="do not split <think> text, parse tool-call text or enforce stop strings at the gateway",
    )
    p.add_argument(
        "--thinking-open",
        action="store_true",
        default=None,
        help="the chat template opens <think>: outputs start in reasoning",
    )
    p.add_argument(
        "--special-tokens",
        type=Path,
        help="the model's tokenizer folder or tokenizer_config.json/tokenizer.json: its special tokens are kept whole",
    )
    p.add_argument(
        "--display-cleanup",
        action="store_true",
        default=None,
        help="strip the special tokens that do not end the turn (<|im_start|>, ...) from reasoning and content "
        "(never from tool calls or JSON output); end-of-turn tokens are never stripped",
    )
    p.add_argument("--capture", type=Path, metavar="DIR", help="record every exchange, both sides, in DIR")
    p.add_argument("--capture-redact", action="append", default=[], metavar="JSONPATH", help="also redact this")
    p.add_argument(
        "--capture-backlog-mb",
        type=float,
        metavar="MB",
        help="exchanges the capture process may hold before their records are built, in MiB; past half of it "
        "it builds at full pace; each worker may hold its share while busy, and hands its frames over at half "
        "of that (default: a sixteenth of the memory, 256 to 2048)",
    )
    p.add_argument(
        "--passthrough",
        action="append",
        default=[],
        metavar="PATH",
        help="a backend path clients may reach, '[METHOD] PATH' or a prefix 'PATH*' (repeatable; 'none' for none; "
        "default: POST /tokenize, POST /detokenize, GET /version)",
    )
    _add_limits(p)
    p.add_argument(
        "--max-upstream-event-mb",
        type=float,
        metavar="MB",
        help="the largest SSE event or plain body read from the backend, in MiB (default 16); past it: a 502",
    )
    p.add_argument(
        "--state",
        metavar="URL|PATH",
        help="the response store of /v1/responses: an SQLite path, sqlite:///…, postgresql://… or memory "
        "(default: $XDG_STATE_HOME/oaishim/responses.sqlite)",
    )
    p.add_argument(
        "--state-max-age",
        type=float,
        metavar="SECONDS",
        help="how long a stored response is kept, 0 for ever (default 2592000, 30 days)",
    )
    p.add_argument("--state-max-mb", type=float, metavar="MB", help="the largest stored record, in MiB (default 8)")
    p.add_argument(
        "--state-secret",
        metavar="SECRET",
        help="the key that seals encrypted_content (default: a random key kept beside an SQLite store; "
        "required for PostgreSQL, the same on every replica)",
    )
    p.add_argument(
        "--access-log",
        choices=("text", "json", "off"),
        help="one line per request on stderr (logger oaishim.access): text (default), json or off",
    )
    p.add_argument("--metrics-key", metavar="KEY", help="a key GET /metrics asks for, as Bearer (default: none)")
    p.add_argument(
        "--limits",
        metavar="URL",
        help="where the virtual keys' limits are counted: memory (default, this process) or redis://… "
        "(shared by replicas)",
    )
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.set_defaults(run=_run_serve)


# (flag, type, help): the client side, then the upstream side; defaults are in server/config.py
_LIMITS: tuple[tuple[str, type[int] | type[float], str], ...] = (
    ("--header-timeout", float, "seconds a client has to send a request's head (default 20)"),
    ("--body-timeout", float, "seconds a client has to send a request's body, after its head (default 60)"),
    ("--send-timeout", float, "seconds a client may take none of its answer before it is dropped (default 60)"),
    ("--max-header-bytes", int, "the largest request head, request line and headers (default 65536)"),
    ("--max-body-bytes", int, "the largest request body (default 16777216)"),
    ("--max-connections", int, "open client connections at most, 0 for no bound (default 1024)"),
    (
        "--idle-poll-us",
        int,
        "microseconds each serving process keeps polling after a read before it sleeps: lower latency "
        "on VMs whose idle vCPUs halt, for CPU spent polling (default 0, off; at most 100000)",
    ),
    ("--connect-timeout", float, "seconds to connect to the upstream (default 10)"),
    ("--first-byte-timeout", float, "seconds for the upstream's response head, from the request (default 600)"),
    ("--idle-timeout", float, "seconds the upstream may go silent inside a response (default 300)"),
    ("--total-timeout", float, "seconds for the whole upstream exchange, 0 for none (default none)"),
)


# The embedded engine's settings (serve with no --upstream); each is also OAISHIM_<NAME> and a config key.
_ENGINE: tuple[tuple[str, type[int] | type[float], str], ...] = (
    ("--ctx-size", int, "the engine's context in tokens, 0 for the model's own (default: 65536 for the tiny model)"),
    ("--threads", int, "CPU threads for the engine (default 1)"),
    ("--parallel", int, "requests the engine serves at once, sharing its context (default: llama.cpp's 4)"),
)


def _add_limits(p: argparse.ArgumentParser) -> None:
    for flag, kind, text in (*_LIMITS, *_ENGINE):
        p.add_argument(flag, type=kind, metavar="N" if kind is int else "SECONDS", help=text)
    p.add_argument(
        "--llama-arg",
        action="append",
        default=[],
        metavar="ARG",
        dest="llama_args",
        help="one more llama-server argument for the embedded engine (repeatable: --llama-arg=--flash-attn "
        "--llama-arg=on)",
    )


def _run_serve(args: argparse.Namespace) -> int:
    from oaishim.server.config import ConfigError, build_settings

    try:
        settings = build_settings(
            upstream=args.upstream,
            profile=args.profile,
            served_model_name=args.served_model_name,
            api_keys=args.api_key,
            upstream_api_key=args.upstream_api_key,
            host=args.host,
            port=args.port,
            workers=args.workers,
            config=args.config,
            keep_extensions=args.keep_extensions,
            reasoning_field=args.reasoning_field,
            text_repair=args.text_repair,
            thinking_open=args.thinking_open,
            special_tokens=args.special_tokens,
            display_cleanup=args.display_cleanup,
            capture=args.capture,
            capture_redact=args.capture_redact,
            capture_backlog_mb=args.capture_backlog_mb,
            passthrough=args.passthrough,
            **{
                flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_"))
                for flag, _, _ in (*_LIMITS, *_ENGINE)
            },
            llama_args=args.llama_args,
            max_upstream_event_mb=args.max_upstream_event_mb,
            state=args.state,
            state_max_age=args.state_max_age,
            state_max_mb=args.state_max_mb,
            state_secret=args.state_secret,
            access_log=args.access_log,
            metrics_key=args.metrics_key,
            limits=args.limits,
        )
    except ConfigError as exc:
        return _fail(str(exc))
    from oaishim.server.main import serve

    if settings.models:
        print(f"oaishim gateway on http://{settings.host}:{settings.port}/v1", flush=True)
        code: int | None = serve(settings, log_level=args.log_level)
        return code or 0
    return _serve_embedded(args, settings, serve)


def _serve_embedded(args: argparse.Namespace, settings: Any, serve: Any) -> int:
    """No upstream: start llama.cpp on the tiny model (or --model) and serve it through the gateway."""
    import dataclasses

    from oaishim.engine.embedded import EngineError, start_embedded
    from oaishim.server.config import ModelRoute

    alias = args.served_model_name or (args.model.stem if args.model else "tiny")
    print("oaishim: starting the embedded llama.cpp engine (the tiny model is built on first use)", flush=True)
    try:
        engine = start_embedded(
            args.model,
            alias,
            ctx_size=settings.ctx_size,
            threads=settings.threads,
            parallel=settings.parallel,
            extra_args=settings.llama_args,
        )
    except EngineError as exc:
        return _fail(str(exc))
    try:
        route = ModelRoute(name=alias, upstreams=(engine.server.url,), profile="llamacpp")
        settings = dataclasses.replace(
            settings, models=(route,), special_tokens=settings.special_tokens or engine.special
        )
        print(f"oaishim gateway on http://{settings.host}:{settings.port}/v1 (model {alias!r}, llama.cpp)", flush=True)
        code: int | None = serve(settings, log_level=args.log_level)
    finally:
        engine.server.stop()  # once, in the parent: the engine is shared by every worker
    return code or 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oaishim", description="Make self-hosted LLM servers speak exact OpenAI.")
    parser.add_argument("--version", action="version", version=f"oaishim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_check(sub)
    _add_serve(sub)
    _add_probe(sub)
    _add_capture_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except BrokenPipeError:
        # The reader went away (`oaishim inspect … | head`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code


if __name__ == "__main__":
    raise SystemExit(main())
