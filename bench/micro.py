"""The gateway's pure work, timed without sockets: what one plain request and one streamed chunk
cost in ``transform/`` and ``wire/`` (CPU time, so a busy machine disturbs it less than wall time).

    .venv/bin/python bench/micro.py [--repeat 5]

Prints one JSON line: µs per plain request (validate + prepare + normalise + serialise) and per
streamed chunk (the stream pipe: SSE decode + normalise + encode; also with the Responses encoder),
each the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import upstream
from loadgen import request_body

from oaishim.profiles import get_profile
from oaishim.server.config import ModelRoute, Settings
from oaishim.transform.pipe import StreamPipe
from oaishim.transform.plan import response_context
from oaishim.transform.request import prepare, rewrite
from oaishim.transform.response import normalize_chat
from oaishim.transform.responses import ResponsesStreamEncoder, responses_to_chat
from oaishim.transform.validate import validate

SETTINGS = Settings(models=(ModelRoute("bench", ("http://127.0.0.1:1",), "vllm"),))
PROFILE = get_profile("vllm")


def _dechunk(raw: bytes) -> bytes:
    """An HTTP/1.1 chunk's payload (the upstream renders events as chunks)."""
    return raw.split(b"\r\n", 1)[1][:-2]


def plain(n: int) -> float:
    raw_request = request_body(128, False)
    raw_response = upstream._plain(128).split(b"\r\n\r\n", 1)[1]
    t0 = time.process_time()
    for _ in range(n):
        body = orjson.loads(raw_request)
        prepared = rewrite("chat", validate("chat", body), PROFILE, upstream_model=None)  # as the gateway does
        orjson.dumps(prepared.body)
        ctx = response_context("chat", prepared, SETTINGS)
        orjson.dumps(normalize_chat(orjson.loads(raw_response), ctx))
    return (time.process_time() - t0) / n * 1e6


def stream(n_streams: int, tokens: int, responses: bool = False) -> float:
    """µs per streamed chunk; ``responses``: written as Responses events (``POST /v1/responses``)."""
    body = orjson.loads(request_body(tokens, True))
    prepared = prepare("chat", body, PROFILE, upstream_model=None)
    events = [upstream.ROLE, upstream.FIRST, *[upstream.TOKENS[i % len(upstream.TOKENS)] for i in range(tokens - 2)]]
    pieces = [_dechunk(e) for e in events] + [_dechunk(upstream.FINISH), b"data: [DONE]\n\n"]
    info = responses_to_chat({"model": "bench", "input": "hi", "stream": True})[1]
    t0 = time.process_time()
    for _ in range(n_streams):
        encoder = ResponsesStreamEncoder(info) if responses else None
        pipe = StreamPipe(response_context("chat", prepared, SETTINGS), encoder=encoder)
        if encoder is not None:
            encoder.start()
        for piece in pieces:  # one read per event, as when tokens arrive one at a time
            pipe.feed(piece)
        pipe.flush()
    return (time.process_time() - t0) / (n_streams * len(pieces)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    result = {
        "plain_us_per_request": round(min(plain(2000) for _ in range(args.repeat)), 2),
        "stream_us_per_chunk": round(min(stream(100, 128) for _ in range(args.repeat)), 2),
        "responses_stream_us_per_chunk": round(min(stream(100, 128, True) for _ in range(args.repeat)), 2),
    }
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
