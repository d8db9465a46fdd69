"""The response pipe: one upstream answer's bytes in, the client's bytes out, with no I/O.

:class:`StreamPipe` owns the whole stream path: SSE decode (each event bounded), normalise and
repair (``transform.stream``), the stop decision, the llama.cpp ``error:`` line, a backend that
ignored ``stream: true`` (its one JSON body read as a single chunk), and the encoding
(``transform.encode``: the chat SSE encoder unless another is given). The I/O shell only moves bytes::

    pipe = StreamPipe(ctx, sse=is_sse, max_event=limit)
    async for piece in upstream_body:
        await send(pipe.feed(piece))
        if pipe.close_upstream:
            break  # an error or a stop at the gateway ended the stream: close the upstream now
    await send(pipe.flush())          # or pipe.fail(error) when the upstream broke

:func:`plain_answer` is the same for a plain body: the backend's status and bytes in, the official
dict out (or the :class:`OpenAIError` the client gets instead); the shell encodes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

import orjson

from oaishim.transform import response as normalize
from oaishim.transform.context import ResponseContext
from oaishim.transform.encode import ChatSSEEncoder, Encoder
from oaishim.transform.fastchunk import FastChunks
from oaishim.transform.stream import Chunk, StreamNormalizer
from oaishim.transform.upstream_errors import is_error_body, normalize_upstream_error
from oaishim.transform.validate import Endpoint
from oaishim.wire.errors import OpenAIError, upstream_error
from oaishim.wire.sse import EventTooLarge, SSEDecoder

log: Final = logging.getLogger("oaishim.relay")
DEFAULT_MAX_EVENT: Final = 16 << 20  # the gateway's default for max_upstream_event_bytes (16 MiB)
Normalize = Callable[[dict[str, Any], ResponseContext], dict[str, Any]]
NORMALIZERS: Final[dict[Endpoint, Normalize]] = {
    "chat": normalize.normalize_chat,
    "completions": normalize.normalize_completion,
    "embeddings": normalize.normalize_embeddings,
}


def upstream_too_large(limit: int, what: str) -> OpenAIError:
    return OpenAIError(
        502,
        f"the upstream sent {what} larger than the gateway's limit of {limit} bytes "
        "(--max-upstream-event-mb, OAISHIM_MAX_UPSTREAM_EVENT_MB)",
        "server_error",
        code="upstream_response_too_large",
    )


def plain_answer(endpoint: Endpoint, status: int, raw: bytes, ctx: ResponseContext) -> dict[str, Any]:
    """The client's body for the backend's, or the OpenAIError the client gets instead."""
    return normalize_body(endpoint, upstream_body(status, raw, ctx), ctx)


def upstream_body(status: int, raw: bytes, ctx: ResponseContext) -> dict[str, Any]:
    """The backend's answer as a JSON object, or the OpenAIError the client gets instead."""
    if status >= 400:
        raise normalize_upstream_error(status, raw, context_param=ctx.context_param)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise upstream_error("The upstream answered with a body that is not JSON.") from None
    if not isinstance(body, dict) or ("data" not in body and is_error_body(body)):  # a 200 carrying an error
        raise normalize_upstream_error(status, body, context_param=ctx.context_param)
    return body


def normalize_body(endpoint: Endpoint, body: dict[str, Any], ctx: ResponseContext) -> dict[str, Any]:
    """The official answer for a backend's answer (an OpenAIError 502 for one it cannot read)."""
    try:
        return NORMALIZERS[endpoint](body, ctx)  # a body it cannot read raises OpenAIError 502, as does its own fault
    except OpenAIError as error:
        log.warning("response %s: %s", ctx.response_id, error.message)
        raise


def plain_as_chunk(body: dict[str, Any]) -> dict[str, Any]:
    """A plain chat or completion body as one stream chunk (for a backend that ignored stream: true).
    What is not a list of objects stays as it is, for the stream normaliser to refuse."""
    choices = body.get("choices")
    if isinstance(choices, list):
        choices = [
            {**c, "delta": c.get("message") if isinstance(c.get("message"), dict) else {}} if isinstance(c, dict) else c
            for c in choices
        ]
    return {**body, "choices": choices, "usage": body.get("usage")}


def refused_before_any_chunk(normalizer: StreamNormalizer, ended: bool, chunks: int) -> OpenAIError | None:
    """The error the upstream sent in its stream before the client had any chunk (``chunks`` given to
    the encoder), once the stream has ended; else None."""
    if ended and chunks == 0 and normalizer.upstream_error:
        return normalizer.error
    return None


def fail_on_error_lines(decoder: SSEDecoder, normalizer: StreamNormalizer) -> None:
    """Old llama.cpp sends a failure as an ``error:`` line, which clients ignore: it fails the stream."""
    for name, value in decoder.unknown_fields:
        if name == "error":
            normalizer.upstream_failed(value)
    decoder.unknown_fields.clear()


class StreamPipe:
    """One client stream. ``feed(piece)`` takes each piece of the upstream body as read and returns
    the client's bytes for it; ``flush()`` ends it at the end of the body; ``fail(error)`` ends it
    when the upstream broke. ``close_upstream`` turns true once nothing more of the upstream is
    needed (the stream failed, or a stop at the gateway ended every choice): the shell closes the
    upstream then, and calls ``flush()`` (which then gives nothing). ``ended``: the client's stream
    has its end (``[DONE]`` or the one error event). Never raises for what the upstream sends."""

    __slots__ = (
        "_body",
        "_chat_sse",
        "_decoder",
        "_fast",
        "_max",
        "_size",
        "chunks",
        "close_upstream",
        "encoder",
        "ended",
        "normalizer",
    )

    def __init__(
        self,
        ctx: ResponseContext,
        *,
        sse: bool = True,
        max_event: int = DEFAULT_MAX_EVENT,
        encoder: Encoder | None = None,
    ) -> None:
        self.normalizer = StreamNormalizer(ctx)
        self.encoder: Encoder = encoder if encoder is not None else ChatSSEEncoder()
        self._chat_sse = type(self.encoder) is ChatSSEEncoder  # its feed() is one sse_chunk(): called inline
        # the common token's short way: the chat chunk's bytes, or an encoder's own (``text_token``)
        text_token = None if self._chat_sse else getattr(self.encoder, "text_token", None)
        if self._chat_sse:
            fast: FastChunks | None = FastChunks(self.normalizer)
        elif text_token is not None:
            fast = FastChunks(self.normalizer, lambda index, text: b"".join(text_token(index, text)))
        else:
            fast = None
        self._fast = fast if fast is not None and fast.usable else None  # the common token's short way
        # A backend that ignored stream: true sends one JSON body, held (bounded) until its end.
        self._decoder = SSEDecoder(max_event) if sse else None
        self._body: list[bytes] = []
        self._size = 0
        self._max = max_event
        self.close_upstream = False
        self.ended = False
        self.chunks = 0  # chunks given to the encoder: none yet means the client has seen no answer

    @property
    def refused(self) -> OpenAIError | None:
        """The error the upstream sent in its stream before it gave the client any chunk, else None.
        The shell holds the 200 until the first chunk, so such an error can still be the HTTP answer,
        as OpenAI's is (it refuses a request, a context overflow say, before it streams). The
        gateway's own failures (a cut or oversized stream, a deadline) stay the stream's last event."""
        return refused_before_any_chunk(self.normalizer, self.ended, self.chunks)

    def feed(self, piece: bytes) -> bytes:
        if self.ended:  # also once close_upstream is set
            return b""
        decoder = self._decoder
        if decoder is None:
            self._size += len(piece)
            if self._size > self._max:
                return self.fail(upstream_too_large(self._max, "a body"))
            self._body.append(piece)
            return b""
        normalizer = self.normalizer
        try:
            events = decoder.feed(piece)
        except EventTooLarge as exc:
            log.warning("stream %s: the upstream sent an SSE event over %d bytes; closed it", self._id(), exc.limit)
            return self.fail(upstream_too_large(exc.limit, "one SSE event"))
        out: list[bytes] = []
        fast = self._fast
        chat = self._chat_sse
        for event in events:  # this runs for every streamed token
            if fast is not None:
                quick = fast.event(event.data)
                if quick is not None:
                    if quick:  # (b"": nothing for the client yet, the text held as it may begin a secret)
                        self.chunks += 1
                        out.append(quick)
                    continue
            for chunk in normalizer.feed(event.data):
                self.chunks += 1
                if chat:  # ChatSSEEncoder.feed, inline
                    out.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
                else:
                    out += self.encoder.feed(chunk)
        if decoder.unknown_fields:
            self._field_errors(decoder)
        if normalizer.ended or (normalizer.stop_seen and normalizer.stopped):
            # an error, or a stop string at the gateway, ended it: the rest is not needed (and a
            # half-read event is not the client's)
            self.close_upstream = True
            self._end(out)
        return b"".join(out)

    def flush(self) -> bytes:
        if self.ended:
            return b""
        normalizer = self.normalizer
        chunks: list[Chunk] = []
        if self._decoder is None:
            try:
                body = orjson.loads(b"".join(self._body))
            except orjson.JSONDecodeError:
                body = None
            self._body = []
            if is_error_body(body):  # a 200 whose one body is an error
                normalizer.upstream_failed(body)
            elif isinstance(body, dict):
                chunks += normalizer.feed("", plain_as_chunk(body))
            chunks += normalizer.feed("[DONE]")
        else:
            for event in self._decoder.flush():
                chunks += normalizer.feed(event.data)
            if self._decoder.unknown_fields:
                self._field_errors(self._decoder)
        out: list[bytes] = []
        self.chunks += len(chunks)
        for chunk in chunks:
            out += self.encoder.feed(chunk)
        self._end(out)
        return b"".join(out)

    def fail(self, error: OpenAIError) -> bytes:
        """End the stream with ``error`` (the upstream broke, went silent, or the shell failed)."""
        if self.ended:
            return b""
        self.normalizer.fail(error)
        self.close_upstream = True
        out: list[bytes] = []
        self._end(out)
        return b"".join(out)

    def _end(self, out: list[bytes]) -> None:
        """The end of the client's stream, after the chunks already in ``out``: the normaliser's last
        chunks and the encoder's end, or the encoder's one failure."""
        normalizer = self.normalizer
        if not normalizer.ended:
            for chunk in normalizer.flush():
                self.chunks += 1
                out += self.encoder.feed(chunk)
        self.ended = True
        error = normalizer.error
        out += self.encoder.end() if error is None else self.encoder.fail(error)

    def _field_errors(self, decoder: SSEDecoder) -> None:
        fail_on_error_lines(decoder, self.normalizer)

    def _id(self) -> str:
        return self.normalizer.ctx.response_id
