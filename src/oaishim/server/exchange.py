"""One request as the operator sees it: its id, and what the access line and the metrics report.

The gateway makes one :class:`Exchange` per HTTP request in its ASGI entry point and keeps it in a
context variable for the request's task, so the parts that know a fact note it where they are
(the relay: the upstream status, the first streamed byte, the usage; the upstream client: the id
it sends) without threading one more argument through every call. Noting a fact is an attribute
write; the access line and the metrics are made once, at the request's end (``server.access``,
``server.metrics``).

The request id is OpenAI's ``x-request-id``: the client's own ``x-request-id`` or
``x-client-request-id`` when it is sane (at most 128 printable ASCII characters, no spaces), else
a new ``req_`` id. It is sent back on every response, sent upstream, and written in the access
line, in the capture record (its headers both ways) and in the gateway's error logs.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Final, Protocol

from oaishim.server.asgi import Headers, Message, Scope, Scrubbing, Send
from oaishim.server.config import VirtualKey
from oaishim.transform.context import ResponseContext
from oaishim.transform.fanin import FanIn
from oaishim.transform.ids import random_hex
from oaishim.transform.output_format import KINDS as FORMAT_KINDS
from oaishim.transform.pipe import StreamPipe
from oaishim.transform.request import PreparedRequest
from oaishim.wire.errors import OpenAIError

__all__ = [
    "Exchange",
    "RequestIdFilter",
    "StreamCount",
    "Trace",
    "current",
    "fault_cause",
    "new_request_id",
    "note",
    "request_id_from",
]

# ASGI extension (scope["extensions"]) by which the HTTP server reports a lost client to a callback:
# ``on_gone(callback)`` registers it and returns the function that unregisters it.
ON_GONE: Final = "oaishim.on_client_gone"
OnGone = Callable[[Callable[[], None]], Callable[[], None]]
# ASGI extension by which the HTTP server lets a stream's body pieces be written without a message
# (server.direct): ``direct(scope)`` gives (ready, write) for that request's response, or None.
DIRECT_BODY: Final = "oaishim.direct_body"
DirectBody = Callable[[Any], "tuple[Callable[[], bool], Callable[[bytes], None]] | None"]
# ASGI extension: the task the HTTP server runs the request in (asyncio.current_task() asks the
# running loop, a getpid() system call each time: 7 % of a plain request's samples under load).
REQUEST_TASK: Final = "oaishim.request_task"
# ASGI extension: ``respond(status, headers, body)`` writes a whole sized response at once (no
# messages) and returns the bytes it wrote (head and body: what a capture records); None when it
# cannot now (the response started, the client's writes are paused).
RESPOND: Final = "oaishim.respond"
Respond = Callable[[int, Headers, bytes], "bytes | None"]
# scope key (not an extension: no callable) the HTTP server sets under capture (its state's
# ``note_reads``) on a request that arrived whole in one read, nothing of another request with it:
# ``(t_ns, read)``, the read's ``perf_counter_ns`` time and its bytes, which a recorder keeps as
# the request (``server.recorder``) instead of the scope's head and the body's messages.
READ: Final = "oaishim.read"

log: Final = logging.getLogger("oaishim.exchange")
# The request path's clock (its own module's name, Final: a static read once compiled, in this
# module and in those that import it, where ``time.perf_counter()`` is a module lookup and an
# attribute read a call)
perf: Final = time.perf_counter
_wall: Final = time.time
MAX_ID: Final = 128
_PRINTABLE: Final = frozenset(
    range(0x21, 0x7F)
)  # visible ASCII: no space, no control byte, nothing to split a log line
_current: Final[contextvars.ContextVar[Exchange | None]] = contextvars.ContextVar("oaishim_exchange", default=None)


def _sane(value: bytes | None) -> str | None:
    if not value or len(value) > MAX_ID or not _PRINTABLE.issuperset(value):
        return None
    return value.decode("ascii")


def new_request_id() -> str:
    return "req_" + random_hex(16)  # OpenAI's shape: req_ and 32 hex digits


def request_id_from(headers: Headers) -> str:
    """The client's ``x-request-id`` (else ``x-client-request-id``) when sane, else a new one."""
    given: bytes | None = None
    client: bytes | None = None
    for key, value in headers:  # (typed: compiled to index the list and compare bytes)
        if key == b"x-request-id":
            given = value if given is None else given
        elif key == b"x-client-request-id":
            client = value if client is None else client
    return _sane(given) or _sane(client) or new_request_id()


class Exchange:
    """What one request did. Times are ``time.perf_counter()`` seconds."""

    __slots__ = (
        "added",
        "bytes_out",
        "direct_body",
        "direct_declined",
        "direct_taken",
        "endpoint",
        "first_token",
        "format_violations",
        "gone",
        "headers_out",
        "key_label",
        "limited",
        "method",
        "model",
        "on_gone",
        "path",
        "peer",
        "profile",
        "repairs",
        "request_id",
        "respond",
        "scope",
        "scrubbing",
        "sink",
        "started",
        "status",
        "stream",
        "streams",
        "task",
        "tokens_in",
        "tokens_out",
        "trace",
        "upstream_fault",
        "upstream_sent",
        "upstream_status",
        "violations_seen",
        "vkey",
        "wall",
    )

    def __init__(self, scope: Scope, streams: StreamCount | None = None) -> None:
        self.streams = streams
        self.started = perf()
        self.wall = _wall()
        self.request_id = request_id_from(scope.get("headers") or [])
        self.peer: Any = scope.get("client")  # (host, port), or None; as text: client()
        self.method: str = scope.get("method", "-")
        self.path: str = scope.get("path", "-")
        # the server's way to say the client left (server.http), where it offers one: see relay.watching_client
        extensions: dict[str, Any] | None = scope.get("extensions")  # (typed: compiled, direct dict reads)
        self.on_gone: OnGone | None = extensions.get(ON_GONE) if extensions else None
        self.direct_body: DirectBody | None = extensions.get(DIRECT_BODY) if extensions else None
        self.task: asyncio.Task[Any] | None = extensions.get(REQUEST_TASK) if extensions else None
        self.respond: Respond | None = extensions.get(RESPOND) if extensions else None
        self.sink: Send | None = None  # the send chain's head (Exchange.watch): what answer() stands for
        self.scrubbing: Scrubbing | None = None  # the secret masking of this response's send chain
        self.scope = scope
        self.endpoint = "other"  # chat, completions, embeddings, responses, models, health, metrics, passthrough
        self.model: str | None = None  # a configured route name only (the metrics' cardinality is bounded)
        self.profile: str | None = None
        self.key_label: str | None = None
        self.vkey: VirtualKey | None = None  # the virtual key presented, if one was
        self.limited = ""  # the limit that refused the request ("requests", "tokens"), if one did
        self.headers_out: Headers = []  # added to the response head (the key's x-ratelimit-*)
        self.stream = False
        self.status = 0
        self.upstream_status: int | None = None
        self.upstream_fault: str | None = None  # the cause, when the backend failed the request
        self.first_token: float | None = None  # the first streamed output sent (after the stream's head)
        self.tokens_in: int | None = None
        self.tokens_out: int | None = None
        self.repairs: list[str] = []
        self.format_violations = 0  # choices whose answer broke the response_format asked for
        self.violations_seen = False  # what the answer violated was reported (Exchange.violated)
        # under capture, where the upstream client notes what crossed the wire itself: the
        # recorder's ``upstream_sent``, which the client calls with each request it sent (server.upstream)
        self.upstream_sent: Callable[[int, Any, bytes | None], object] | None = None
        self.bytes_out = 0
        self.direct_taken = self.direct_declined = 0  # a stream's reads written direct, or handed back (server.direct)
        self.added = 0.0  # seconds the gateway itself spent (before the upstream request, and rewriting the answer)
        self.gone = False  # the client went away before the answer ended
        self.trace: Trace | None = None  # the request's span, when tracing is on (server.spans)

    def client(self) -> str:
        """The client's address as the access log writes it, ``host:port`` (``-`` unknown): formatted
        only for a line that is written."""
        peer = self.peer
        return f"{peer[0]}:{peer[1]}" if peer else "-"

    def usage(self, usage: object) -> None:
        """Note the token counts of an OpenAI ``usage`` object (chat, completions or Responses names)."""
        if not isinstance(usage, dict):
            return
        prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
        completion = usage.get("completion_tokens", usage.get("output_tokens"))
        self.tokens_in = prompt if isinstance(prompt, int) and not isinstance(prompt, bool) else self.tokens_in
        self.tokens_out = completion if isinstance(completion, int) and not isinstance(completion, bool) else None

    def repaired(self, kinds: Iterable[str]) -> None:
        for kind in kinds:
            if kind not in self.repairs:
                self.repairs.append(kind)

    def watch(self, send: Send) -> Send:
        """``send``, adding ``x-request-id`` to the response head and noting the status and the bytes
        sent (an addition per message)."""

        async def watched(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.body":
                self.bytes_out += len(message.get("body", b""))
            elif kind == "http.response.start":
                self.status = message["status"]
                message = {**message, "headers": self._head(message.get("headers", ()))}
            await send(message)

        self.sink = watched
        return watched

    def _head(self, headers: Iterable[tuple[bytes, bytes]]) -> Headers:
        """The response's headers with the gateway's: one x-request-id, the gateway's (a backend's
        own, passed through, is replaced), and what the request added (``headers_out``)."""
        # (a name is lowered only when it has the length of this one: a call each saved, compiled)
        kept = [h for h in headers if len(h[0]) != 12 or h[0].lower() != b"x-request-id"]
        return [*kept, *self.headers_out, (b"x-request-id", self.request_id.encode())]

    def answer(
        self, send: Send, status: int, body: bytes, content_type: bytes, extra: Iterable[tuple[bytes, bytes]] = ()
    ) -> bool:
        """A whole sized answer written at once through the server's ``respond``, as ``send`` (the
        head of the chain :meth:`watch` made, masking included) would have sent its two messages;
        False, with nothing sent, when it cannot go this way: ``send`` is another (a fan-out's, a
        capture's chain), or the server cannot now (then ``send`` it)."""
        respond = self.respond
        if respond is None or send is not self.sink:
            return False
        headers = self._head([(b"content-type", content_type), (b"content-length", b"%d" % len(body)), *extra])
        sent = body
        if self.scrubbing is not None:
            headers, sent = self.scrubbing.whole(headers, body)
        if respond(status, headers, sent) is None:
            return False
        self.status = status
        self.bytes_out += len(body)
        return True

    def fault(self, error: OpenAIError) -> None:
        """The backend failed the request (it could not be reached, broke off, sent what cannot be read)."""
        self.upstream_fault = fault_cause(error)

    def sending(self) -> None:
        """The request goes upstream now: what the gateway did so far (reading, validating,
        rewriting) is its own time."""
        self.added += perf() - self.started

    def opened(self, status: int) -> None:
        self.upstream_status = status
        if status >= 400:
            self.upstream_fault = f"http_{status // 100}xx"
            self.repaired(("error_normalized",))

    def stream_open(self) -> None:
        self.stream = True
        if self.streams is not None:
            self.streams.n += 1

    def streamed(self, pipe: StreamPipe | FanIn, first: float | None, spent: float) -> None:
        """A relayed stream ended: what its pipe knows (the usage, the repairs, a failure)."""
        if self.streams is not None:
            self.streams.n -= 1
        normalizer = pipe.normalizer
        self.first_token = first
        self.added += spent
        self.usage(normalizer.usage)
        self.repaired(sorted(normalizer.ctx.repairs))
        self.violated(normalizer.ctx)
        if normalizer.error is not None and self.upstream_fault is None and not self.gone:
            self.upstream_fault = fault_cause(normalizer.error)
        if self.trace is not None:
            self.trace.streamed(pipe)

    def answered(self, ctx: ResponseContext, body: object, spent: float) -> None:
        """A plain answer was rewritten in ``spent`` seconds."""
        self.added += spent
        self.usage(body.get("usage") if isinstance(body, dict) else None)
        self.repaired(sorted(ctx.repairs))
        if self.trace is not None:
            self.trace.answered(body)
        self.violated(ctx)
        self.headers_out += violation_headers(ctx)  # the response head is not sent yet: the client sees them

    def violated(self, ctx: ResponseContext) -> None:
        """What the answer violated and the gateway passed on (never a silent pass), once per request:
        a log line each naming the request id; a broken response_format counted by the format
        counter, invalid tool-call arguments with the repairs. Every relay path (one upstream, n
        fanned out, the Responses API; plain or streamed; an answer or the violation's error) ends here."""
        if not ctx.violations or self.violations_seen:
            return
        self.violations_seen = True
        for index, kind, detail in ctx.violations:
            what = "response_format" if kind in FORMAT_KINDS else "tool call"
            log.warning(
                "request %s (%s, model %s): %s %s violated, choice %d: %s; passed on as the backend gave it",
                self.request_id, ctx.response_id, self.model or ctx.model, what, kind, index, detail,
            )  # fmt: skip
        self.format_violations = sum(1 for _, kind, _ in ctx.violations if kind in FORMAT_KINDS)
        self.repaired(sorted({kind for _, kind, _ in ctx.violations if kind not in FORMAT_KINDS}))

    def enter(self) -> contextvars.Token[Exchange | None]:
        return _current.set(self)

    @staticmethod
    def leave(token: contextvars.Token[Exchange | None]) -> None:
        _current.reset(token)


def violation_headers(ctx: ResponseContext) -> Headers:
    """A plain answer's report of what it violated: ``x-oaishim-format-violation`` (the response_format
    kinds) and ``x-oaishim-violations`` (the others); a stream's head has gone before they are known."""
    out: Headers = []
    if not ctx.violations:
        return out
    kinds = sorted({kind for _, kind, _ in ctx.violations})
    broken = [kind for kind in kinds if kind in FORMAT_KINDS]
    if broken:
        out.append((b"x-oaishim-format-violation", ",".join(broken).encode()))
    other = [kind for kind in kinds if kind not in FORMAT_KINDS]
    if other:
        out.append((b"x-oaishim-violations", ",".join(other).encode()))
    return out


class Trace(Protocol):
    """What the request's span hears of it (``server.spans.RequestSpan``)."""

    def inject(self, headers: dict[str, str]) -> None: ...
    def prepared(self, prepared: PreparedRequest) -> None: ...
    def answered(self, body: object) -> None: ...
    def streamed(self, pipe: StreamPipe | FanIn) -> None: ...
    def end(self, ex: Exchange, ended: float) -> None: ...


class StreamCount:
    """The streams open now (the relay counts them; the metrics' gauge reads the number)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


_CAUSES: Final = {
    "upstream_unreachable": "unreachable",
    "upstream_timeout": "timeout",
    "upstream_disconnected": "disconnected",
    "upstream_response_too_large": "too_large",
}


def fault_cause(error: OpenAIError) -> str:
    """A bounded label for what went wrong upstream."""
    return _CAUSES.get(error.code or "", "bad_response")


def note(route: str, profile: str, prepared: PreparedRequest) -> None:
    """What the access line and the metrics say of a generating request, once it is prepared:
    the route's name (never the client's model string), the profile, and the request's repairs."""
    ex = _current.get()
    if ex is not None:
        ex.model, ex.profile, ex.stream = route, profile, prepared.stream
        ex.repaired(prepared.repairs)
        if prepared.dropped:
            ex.repaired(("fields_dropped",))
        if ex.trace is not None:
            ex.trace.prepared(prepared)


# The exchange of the request this task serves (None outside one): the context variable's own
# getter, so the seven calls a request makes are not seven Python frames.
current: Final[Callable[[], Exchange | None]] = _current.get


# The loggers of the request path: their warnings and errors name the request
REQUEST_LOGGERS: Final = (
    "oaishim.gateway", "oaishim.relay", "oaishim.response", "oaishim.responses", "oaishim.stream",
    "oaishim.upstream", "oaishim.state", "oaishim.limits",
)  # fmt: skip


def name_requests() -> None:
    """Put a :class:`RequestIdFilter` on each request-path logger (once)."""
    for name in REQUEST_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RequestIdFilter) for f in logger.filters):
            logger.addFilter(RequestIdFilter())


class RequestIdFilter(logging.Filter):
    """Puts the current request's id on every log record (``record.request_id``, ``-`` outside a
    request) and, for warnings and errors, at the head of the message, so an error log names the
    request a client can quote."""

    def filter(self, record: logging.LogRecord) -> bool:
        exchange = _current.get()
        rid = exchange.request_id if exchange is not None else "-"
        record.request_id = rid
        if exchange is not None and record.levelno >= logging.WARNING and not getattr(record, "_rid_added", False):
            record.msg = f"[{rid.replace('%', '%%')}] {record.msg}"  # a client's id may hold a %
            record._rid_added = True
        return True
