"""Recording exchanges as they pass (``oaishim serve --capture DIR``, ``oaishim capture``).

A :class:`Recorder` follows one exchange through its phases, as mitmproxy's hooks do: the client
request received (``wrap`` sees every ASGI message), the upstream request sent and its response
headers, and each upstream read (:class:`RecordingUpstream`, a wrapper around the upstream seam),
each piece sent to the client (``wrap`` again), and the end (``end``). A stream's pieces relayed
where the upstream's bytes arrive (``server.direct``) are noted there too: the upstream's by the
sink :class:`AttachableRecordingResponse` hands the connection, the client's by the direct write
:meth:`Recorder.direct` wraps, so a capture keeps that path. On the request path it only reads a
clock and appends references to lists; the record is built, redacted, checked and written by the
store's thread (``capture.store``) or the capture process, and ``end`` never blocks.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Protocol, cast

from oaishim.capture.build import build_record, warm_up
from oaishim.capture.raw import Mode, RawExchange, RawRequest, RawResponse
from oaishim.capture.record import Record
from oaishim.capture.redact import Redactor
from oaishim.capture.store import CaptureWriter
from oaishim.check import CheckOptions
from oaishim.server.asgi import Message, Receive, Scope, Send
from oaishim.server.config import ModelRoute, Settings
from oaishim.server.direct import Attachable
from oaishim.server.exchange import DirectBody
from oaishim.server.seam import ResponseWrapper, Upstream, UpstreamResponse, UpstreamWrapper

now = time.perf_counter_ns


class Submit(Protocol):
    """Where a finished exchange goes: the writer thread, or the capture process (server.capture_process)."""

    def submit(self, exchange: RawExchange) -> bool: ...


class Recorder:
    __slots__ = ("_writer", "raw")

    def __init__(self, writer: Submit, scope: Scope, mode: Mode) -> None:
        self._writer = writer
        t0 = now()
        query = scope.get("query_string", b"")
        target = scope.get("raw_path") or scope["path"].encode()
        target = (target + b"?" + query) if query else target
        self.raw = RawExchange(t0, time.time(), mode)
        self.raw.client_request = RawRequest(t0, scope["method"], target.decode("latin-1"), scope["headers"])

    def wrap(self, receive: Receive, send: Send) -> tuple[Receive, Send]:
        """The ASGI receive and send of this exchange, recording what passes through them."""
        request = self.raw.client_request
        assert request is not None

        async def recording_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                request.t_ns = now()
                request.body.append(message.get("body", b""))
            return message

        async def recording_send(message: Message) -> None:
            if message["type"] == "http.response.body":
                response = self.raw.client_response
                if response is not None:
                    response.reads.append((now(), message.get("body", b"")))
                    response.complete = not message.get("more_body", False)
            elif message["type"] == "http.response.start":
                self.raw.client_response = RawResponse(now(), message["status"], message.get("headers", []))
            await send(message)

        return recording_receive, recording_send

    def direct(self, direct_body: DirectBody | None) -> DirectBody | None:
        """The server's direct write of body pieces (``server.direct``), noting each piece as sent."""
        if direct_body is None:
            return None
        raw = self.raw

        def recording_direct(scope: Scope) -> tuple[Callable[[], bool], Callable[[bytes], None]] | None:
            found = direct_body(scope)
            if found is None:
                return None
            ready, write = found

            def recording_write(data: bytes) -> None:
                response = raw.client_response
                if response is not None:
                    response.reads.append((now(), data))
                write(data)

            return ready, recording_write

        return recording_direct

    def upstream_read(self, piece: bytes, opened: RawResponse | None = None, t_ns: int = 0) -> None:
        """Each piece read from the upstream (at ``t_ns``, or now); ``b""`` when its body ended.
        ``opened``: the response the piece belongs to; a record holds one upstream answer, so pieces
        of another (n fanned out: the copies' answers) are not mixed into it."""
        response = self.raw.upstream_response
        if response is not None and (opened is None or opened is response):
            if piece:
                response.reads.append((t_ns or now(), piece))
            else:
                response.complete = True

    def upstream_sent(self, t_ns: int, response: UpstreamResponse, body: bytes | None) -> RawResponse:
        sent = response.request
        self.raw.upstream_request = RawRequest(t_ns, sent.method, sent.url, sent.headers)
        self.raw.upstream_request.body.append(body or b"")
        self.raw.upstream_response = RawResponse(now(), response.status, list(response.headers))
        return self.raw.upstream_response

    def end(self, error: str | None = None) -> None:
        self.raw.end_ns = now()
        response = self.raw.client_response
        if error is None and response is None:
            error = "no response was sent: the client went away first"
        elif error is None and response is not None and not response.complete:
            error = "the client went away before the response ended"
        self.raw.error = error
        self._writer.submit(self.raw)


class RecordingUpstream(UpstreamWrapper):
    """An upstream (any ``server.seam.Upstream``) whose requests, response heads and body pieces one
    :class:`Recorder` notes as they pass."""

    __slots__ = ("recorder",)

    def __init__(self, inner: Upstream, recorder: Recorder) -> None:
        super().__init__(inner)
        self.recorder = recorder

    async def open(
        self,
        route: ModelRoute,
        method: str,
        path: str,
        body: bytes | None,
        content_type: str | None = "application/json",
        headers: list[tuple[str, str]] | None = None,
    ) -> UpstreamResponse:
        started = now()
        response = await self.inner.open(route, method, path, body, content_type, headers)
        opened = self.recorder.upstream_sent(started, response, body)
        if hasattr(response, "attach"):  # the raw connection's: its pieces can be relayed direct
            return AttachableRecordingResponse(response, self.recorder, opened)
        return RecordingResponse(response, self.recorder, opened)


class RecordingResponse(ResponseWrapper):
    __slots__ = ("opened", "recorder")

    def __init__(self, inner: UpstreamResponse, recorder: Recorder, opened: RawResponse | None = None) -> None:
        super().__init__(inner)
        self.recorder, self.opened = recorder, opened

    async def pieces(self) -> AsyncIterator[bytes]:
        read, opened = self.recorder.upstream_read, self.opened
        async for piece in self.inner.pieces():
            read(piece, opened)
            yield piece
        read(b"", opened)


class AttachableRecordingResponse(RecordingResponse):
    """A recorded response whose connection can hand its pieces to a sink (``server.direct``): a
    piece the sink takes is noted here, since ``pieces`` will not see it; one it declines is."""

    __slots__ = ()

    def attach(self, sink: Callable[[bytes], bool]) -> None:
        read, opened = self.recorder.upstream_read, self.opened

        def recording_sink(piece: bytes) -> bool:
            t_ns = now()  # when it arrived, before the sink relays it to the client
            if not sink(piece):
                return False
            read(piece, opened, t_ns)
            return True

        cast(Attachable, self.inner).attach(recording_sink)

    def detach(self) -> None:
        cast(Attachable, self.inner).detach()


class CheckBudget:
    """The checker's share of the writer's time: ``share`` of wall time on average, with bursts up
    to ``burst`` seconds. The checker costs a few milliseconds per streamed answer (ten times what
    recording it does), so past the budget records are stored unchecked (``findings: null``) and
    ``oaishim inspect`` checks them when it shows them.

    With ``idle`` (a :class:`~oaishim.server.knobs.IdleCores`), the share also follows the CPU the
    machine leaves idle: at most ``IDLE_USE`` of the idle cores seen over the last ``window``
    seconds, so on a machine the gateway keeps busy the checker waits rather than take a core from
    the serving processes (the capture process's budget)."""

    IDLE_USE = 0.5

    def __init__(
        self,
        share: float = 0.1,
        burst: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        idle: Callable[[], float | None] | None = None,
        window: float = 0.5,
    ) -> None:
        self.share, self.burst, self.clock = share, burst, clock
        self.idle, self.window = idle, window
        self.rate = share  # the share in force
        self.tokens = burst
        self.last = self._seen = clock()
        self.skipped = 0

    def allow(self) -> bool:
        now_s = self.clock()
        if self.idle is not None and now_s - self._seen >= self.window:
            self._seen = now_s
            idle = self.idle()
            self.rate = self.share if idle is None else max(0.0, min(self.share, self.IDLE_USE * idle))
        self.tokens = min(self.burst, self.tokens + (now_s - self.last) * self.rate)
        self.last = now_s
        if self.tokens > 0:
            return True
        self.skipped += 1
        return False

    def spend(self, seconds: float) -> None:
        self.tokens -= seconds


class Recording:
    """Where a gateway's or a proxy's exchanges go: one writer (thread) for the process."""

    def __init__(
        self,
        directory: Path,
        *,
        mode: Mode,
        secrets: Iterable[str | None] = (),
        redact_paths: Iterable[str] = (),
        run_checker: bool = True,
        check_budget: CheckBudget | None = None,
        max_file_bytes: int = 64 << 20,
        queue_size: int = 1024,
        client_options: CheckOptions | None = None,
    ) -> None:
        self.redactor = Redactor.build(redact_paths, secrets)
        self.client_options = client_options
        self.mode: Mode = mode
        self.run_checker = run_checker
        self.budget = check_budget or CheckBudget()
        self.writer = CaptureWriter(
            directory,
            self._build,
            max_file_bytes=max_file_bytes,
            queue_size=queue_size,
            warm_up=warm_up if run_checker else None,
        )

    def _build(self, raw: RawExchange) -> tuple[Record, bytes]:
        """In the writer thread: the checker runs while its budget lasts."""
        if not (self.run_checker and self.budget.allow()):
            return build_record(raw, self.redactor, run_checker=False)
        started = time.thread_time()
        built = build_record(raw, self.redactor, client_options=self.client_options)
        self.budget.spend(time.thread_time() - started)
        return built

    def start(self) -> None:
        self.writer.start()

    def close(self) -> None:
        self.writer.close()

    def begin(self, scope: Scope) -> Recorder:
        return Recorder(self.writer, scope, self.mode)


def recording_for(settings: Settings, check_budget: CheckBudget | None = None) -> Recording | None:
    """The gateway's recording (``--capture DIR``), or None. The gateway's keys and the upstream
    keys are scrubbed from records wherever they appear, besides the redacted headers. The capture
    process passes its own ``check_budget``."""
    if settings.capture_dir is None:
        return None
    secrets = [*settings.client_keys, *(route.upstream_api_key for route in settings.models)]
    return Recording(
        settings.capture_dir,
        mode="gateway",
        secrets=secrets,
        redact_paths=settings.capture_redact,
        client_options=gateway_check_options(settings),
        check_budget=check_budget,
    )


REASONING_FIELDS_SENT = {
    "reasoning_content": frozenset({"reasoning_content"}),
    "reasoning": frozenset({"reasoning"}),
    "both": frozenset({"reasoning_content", "reasoning"}),
    "drop": frozenset(),
}


def gateway_check_options(settings: Settings) -> CheckOptions:
    """How to judge what the gateway itself sent: the reasoning field ``--reasoning-field`` names is
    sent on purpose (a note, not an unknown-field error), and so are the backend's extensions under
    ``--keep-extensions``; everything else is judged as strictly as any endpoint."""
    return CheckOptions(
        extensions_as_notes=settings.keep_extensions,
        intended_fields=REASONING_FIELDS_SENT[settings.reasoning_field],
    )
