"""``oaishim capture``: a pure logging proxy (the JSONL logging proxy that found the TensorRT-LLM problems T-2, T-11, T-15, T-18, made lossless).

Nothing is rewritten. The client's method, target, headers (its ``Authorization`` included) and
body go to the upstream as they came, minus the connection-level headers HTTP forbids a proxy to
forward, and with ``Accept-Encoding: identity`` in place of the client's: a compressed answer could
not be redacted or read in the record (HTTP lets a server answer uncompressed whatever the client
accepts, so the client reads it as ever). The upstream's status, headers and body bytes come back the
same way, piece by piece as
they are read, and when the upstream breaks off, so does the client's connection. Only the record
is redacted. The gateway's own pieces do the work: ``Upstreams`` (pool, timeouts, errors),
``relay.watching_client`` (a client that leaves closes the upstream) and ``Recorder``.
"""

from __future__ import annotations

import logging

from oaishim.server import relay
from oaishim.server.asgi import BodyTooLarge, ClientGone, Receive, Scope, Send, lifespan, read_body, send_error
from oaishim.server.config import ModelRoute, Settings
from oaishim.server.recording import Recorder, Recording, RecordingUpstream
from oaishim.server.upstream import Upstreams
from oaishim.wire.errors import OpenAIError, too_large
from oaishim.wire.headers import HOP_BY_HOP, is_hop_by_hop

log = logging.getLogger("oaishim.capture_tools.proxy")
# Hop-by-hop headers and Host, which names the proxy, not the upstream; Accept-Encoding is replaced
# by identity (see above).
NOT_FORWARDED = HOP_BY_HOP | {b"host", b"accept-encoding"}


class UpstreamBroke(Exception):
    """The upstream broke off after the response started: the client's connection is broken too."""


class CaptureProxy:
    def __init__(self, upstream: str, recording: Recording, settings: Settings | None = None) -> None:
        self.route = ModelRoute(name="*", upstreams=(upstream,), profile="openai")
        base = settings or Settings()
        self.settings = Settings(
            models=(self.route,),
            max_body_bytes=base.max_body_bytes,
            connect_timeout=base.connect_timeout,
            first_byte_timeout=base.first_byte_timeout,
            idle_timeout=base.idle_timeout,
        )
        self.upstreams = Upstreams(self.settings)
        self.upstreams.record_wire = True  # its connections note the reads of each answer (server.capture_wire)
        self.notes_reads = True  # and the HTTP server the read that carried a whole request (server.http)
        self.recording = recording

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send, self.startup, self.shutdown)
            return
        if scope["type"] != "http":
            return
        recorder = self.recording.begin(scope)
        receive, send = recorder.wrap(receive, send)
        error: str | None = None
        try:
            await self._relay(scope, receive, send, recorder)
        except OpenAIError as exc:  # nothing came from the upstream: the proxy's own answer
            error = exc.message
            await send_error(send, exc)
        except ClientGone:
            error = "the client went away"
        except UpstreamBroke as exc:
            error = str(exc)
            raise
        finally:
            recorder.end(error)

    async def startup(self) -> None:
        self.recording.start()
        await self.upstreams.start()

    async def shutdown(self) -> None:
        await self.upstreams.close()
        self.recording.close()

    async def _relay(self, scope: Scope, receive: Receive, send: Send, recorder: Recorder) -> None:
        try:
            body = await read_body(receive, self.settings.max_body_bytes)
        except BodyTooLarge:
            raise too_large(self.settings.max_body_bytes) from None
        query = scope.get("query_string", b"")
        # Forwarded as it came; Upstreams.open refuses a target that is not a path ("*@host:port/x"
        # would otherwise name another host after the upstream's base URL).
        target = (scope.get("raw_path") or scope["path"].encode()) + (b"?" + query if query else b"")
        headers = [
            (k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"] if k.lower() not in NOT_FORWARDED
        ]
        headers.append(("accept-encoding", "identity"))
        await relay.watching_client(
            receive, self._exchange(scope["method"], target.decode("latin-1"), body, headers, send, recorder)
        )

    async def _exchange(
        self, method: str, target: str, body: bytes, headers: list[tuple[str, str]], send: Send, recorder: Recorder
    ) -> None:
        upstream = RecordingUpstream(self.upstreams, recorder)
        response = await upstream.open(self.route, method, target, body or None, None, headers=headers)
        try:
            returned = [(k, v) for k, v in response.headers if not is_hop_by_hop(k)]
            await send({"type": "http.response.start", "status": response.status, "headers": returned})
            try:
                async for piece in response.pieces():
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
            except OpenAIError as exc:
                raise UpstreamBroke(f"the upstream broke off in the middle of the body: {exc.message}") from None
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            response.close()  # back to the pool when it was read to its end, else closed
