"""What the Python client-case scripts (python_clients.py, embedded_clients.py) share: the expectation,
litellm's streamed completion rebuilt, and the main that runs one client's cases and prints the report.
Imported by those scripts in the clients' own virtual environments (the script's folder is on
``sys.path``), never by pytest.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

Cases = Callable[[str], dict[str, Callable[[], None]]]  # a client's cases for a base URL


def expect(ok: bool, detail: str) -> None:
    if not ok:
        raise AssertionError(detail)


def litellm_stream(litellm: Any, base: str, model: str, key: str, **extra: Any) -> Any:
    """One streamed completion through litellm (``messages`` default: "Hi there"), rebuilt with
    ``stream_chunk_builder``: its first choice."""
    chunks = list(
        litellm.completion(
            model="openai/" + model,
            api_base=base,
            api_key=key,
            messages=extra.pop("messages", [{"role": "user", "content": "Hi there"}]),
            stream=True,
            num_retries=0,
            **extra,
        )
    )
    return litellm.stream_chunk_builder(chunks).choices[0]


def main(clients: dict[str, tuple[Cases, tuple[str, ...]]], calls: list[str]) -> None:
    """``SCRIPT CLIENT BASE_URL``: run the client's cases (``calls``, the tool's record, cleared before
    each) and print ``{"versions": {...}, "cases": {CASE: {"ok", "detail", "trace"?}}}``."""
    name, base = sys.argv[1], sys.argv[2]
    build, packages = clients[name]
    results: dict[str, dict[str, Any]] = {}
    for case, run in build(base).items():
        calls.clear()
        try:
            run()
            results[case] = {"ok": True, "detail": ""}
        except Exception as exc:  # the client's own error is a result too
            detail = f"{type(exc).__name__}: {exc}" if not isinstance(exc, AssertionError) else str(exc)
            results[case] = {
                "ok": False,
                "detail": " ".join(detail.split())[:300],
                "trace": traceback.format_exc()[-2000:],
            }
    print(json.dumps({"versions": {p: version(p) for p in packages}, "cases": results}))
