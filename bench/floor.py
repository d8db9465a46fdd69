"""The server's own floor: instructions per plain request for an ASGI app that answers at once.

The gateway's HTTP server (``server.serving``, as ``server.main.run_asgi`` runs it; uvicorn with a
guarded protocol before 2026-12-02: 147k) runs under callgrind with an app that reads the request
and sends a fixed ~1.3 KB JSON answer; the same harness as ``callgrind.py`` (N vs 2N sequential requests on one keep-alive connection) gives
what a request costs before the gateway does anything: the part a faster server could save.

    python bench/floor.py            # prints one JSON object: {"floor_plain_request": …}
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import callgrind
import loadgen

ANSWER = (
    b'{"id":"chatcmpl-floor","object":"chat.completion","created":1,"model":"bench","choices":[{"index":0,'
    b'"message":{"role":"assistant","content":"' + b"hello " * 180 + b'"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":5,"completion_tokens":16,"total_tokens":21}}'
)
HEAD = [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode())]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEAD})
    await send({"type": "http.response.body", "body": ANSWER})


def serve(port: int) -> None:
    from oaishim.server.main import run_asgi

    run_asgi(app, "127.0.0.1", port, "warning")


def measure(requests: int = 100) -> dict[str, int]:
    port = callgrind.free_port()
    with tempfile.TemporaryDirectory(prefix="oaishim-floor-") as tmp:
        folder = Path(tmp)
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/cg.out.%p"]
        proc = subprocess.Popen([*argv, sys.executable, __file__, "serve", str(port)], stderr=subprocess.DEVNULL)
        try:
            callgrind.wait_port(port, proc, 300)
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            gauge = callgrind.Gauge(proc.pid, folder)
            raw = loadgen.request_bytes(url, 16, False)
            asyncio.run(callgrind.batch(url, raw, 20))
            one, two = gauge.measure(url, raw, requests), gauge.measure(url, raw, 2 * requests)
            return {"floor_plain_request": round((two - one) / requests)}
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(int(sys.argv[2]))
    else:
        print(json.dumps(measure()))
