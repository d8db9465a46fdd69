"""Fan-in: the answers of n upstream requests (``n`` fanned out, ``transform.params.n``) as one
official answer with choices 0 … n-1. No I/O: the shell feeds each copy's bytes as they arrive.

Plain: :func:`merge_plain` joins the copies' bodies into one upstream-shaped body (the first one's
envelope, every copy's choices in copy order, the usage summed) for the usual normaliser.

Stream: :class:`FanIn` is :class:`~oaishim.transform.pipe.StreamPipe` for n upstream bodies. Each
copy has its own SSE decoder; their events go into one :class:`StreamNormalizer` with each choice
index made unique (copy ``k``'s choice ``i`` is upstream choice ``k + i * n``), so the normaliser does
what it does for a backend's own n: one id, created and model; output indices given in the order
choices open (0, 1, 2 … as the official SDK's stream helper needs); per choice its role chunk first
and its finish last, held until the whole answer ends. A copy's ``[DONE]`` ends that copy only;
the usage chunk (summed) and the one ``[DONE]`` come when every copy has ended. One copy that fails
(an error event, a broken body, a choice that never finishes) fails the whole stream with one error
event, and ``close_upstream`` asks the shell to close every copy; a copy whose choices all ended at
the gateway (a stop string) is listed in ``closable`` so that its backend stops generating.

Usage as the official API counts it for n > 1 (its recorded n=3 stream: 79 prompt, 42 completion,
121 total tokens): the prompt once, the completions of all choices summed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final

import orjson

from oaishim.transform import _parts
from oaishim.transform.context import ResponseContext
from oaishim.transform.encode import ChatSSEEncoder, Encoder
from oaishim.transform.pipe import (
    DEFAULT_MAX_EVENT,
    fail_on_error_lines,
    plain_as_chunk,
    refused_before_any_chunk,
    upstream_too_large,
)
from oaishim.transform.stream import Chunk, StreamNormalizer
from oaishim.transform.upstream_errors import is_error_body
from oaishim.wire.errors import OpenAIError, upstream_error
from oaishim.wire.sse import EventTooLarge, SSEDecoder

log: Final = logging.getLogger("oaishim.relay")


def merge_usage(usages: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """One usage for n copies of one prompt: the prompt counted once (the first copy's, with its
    details), the completion tokens and their details summed. None unless every copy counted."""
    read = [_parts.usage(u) for u in usages]
    if not read or any(u is None for u in read):
        return None
    counted = [u for u in read if u is not None]
    first = counted[0]
    completion = sum(u["completion_tokens"] for u in counted)
    out: dict[str, Any] = {
        "prompt_tokens": first["prompt_tokens"],
        "completion_tokens": completion,
        "total_tokens": first["prompt_tokens"] + completion,
    }
    if "prompt_tokens_details" in first:
        out["prompt_tokens_details"] = first["prompt_tokens_details"]
    details: dict[str, int] = {}
    for u in counted:
        for key, value in u.get("completion_tokens_details", {}).items():
            details[key] = details.get(key, 0) + value
    if details:
        out["completion_tokens_details"] = details
    return out


def merge_plain(bodies: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The copies' plain bodies (each already read as an answer, not an error) as one body."""
    for body in bodies:
        if not isinstance(body.get("choices"), list):
            return dict(body)  # for the normaliser to refuse, naming what it found
    merged = {**bodies[0], "choices": [choice for body in bodies for choice in body["choices"]]}
    usage = merge_usage([b.get("usage") for b in bodies])
    if usage is None:
        merged.pop("usage", None)
    else:
        merged["usage"] = usage
    return merged


class FanIn:
    """One client stream from ``copies`` upstream bodies. ``feed(copy, piece)`` and ``end(copy)`` (that
    copy's body ended) return the client's bytes; ``fail(error)`` ends the stream when a copy broke.
    ``ended`` once the client's stream has its end; never raises for what an upstream sends."""

    def __init__(
        self,
        ctx: ResponseContext,
        copies: int,
        *,
        sse: Sequence[bool] | None = None,
        max_event: int = DEFAULT_MAX_EVENT,
        encoder: Encoder | None = None,
    ) -> None:
        self.normalizer = StreamNormalizer(ctx)
        self.encoder: Encoder = encoder if encoder is not None else ChatSSEEncoder()
        self.copies = copies
        self._max = max_event
        # A copy whose backend ignored stream: true sends one JSON body, held (bounded) until its end.
        self._decoders = [SSEDecoder(max_event) if sse is None or sse[k] else None for k in range(copies)]
        self._bodies: list[list[bytes]] = [[] for _ in range(copies)]
        self._sizes = [0] * copies
        self._usage: list[dict[str, Any] | None] = [None] * copies
        self._over = [False] * copies  # nothing more of this copy is read
        self.closable: list[int] = []  # copies ended at the gateway: the shell closes them (then clears this)
        self.close_upstream = False
        self.ended = False
        self.chunks = 0  # chunks given to the encoder: none yet means the client has seen no answer
        for copy in range(copies):
            self.normalizer.expect(copy)  # each copy brings (at least) its choice 0

    @property
    def refused(self) -> OpenAIError | None:
        """The error a copy sent in its stream before the client had any chunk (any copy's), else
        None: as for one upstream (``StreamPipe.refused``), the shell can still answer it as the
        HTTP status, the one answer to the whole request."""
        return refused_before_any_chunk(self.normalizer, self.ended, self.chunks)

    # -- input -----------------------------------------------------------------------------
    def feed(self, copy: int, piece: bytes) -> bytes:
        if self.ended or self._over[copy]:
            return b""
        decoder = self._decoders[copy]
        if decoder is None:
            self._sizes[copy] += len(piece)
            if self._sizes[copy] > self._max:
                return self.fail(upstream_too_large(self._max, "a body"))
            self._bodies[copy].append(piece)
            return b""
        try:
            events = decoder.feed(piece)
        except EventTooLarge as exc:
            log.warning("stream %s: the upstream sent an SSE event over %d bytes; closed it", self._id(), exc.limit)
            return self.fail(upstream_too_large(exc.limit, "one SSE event"))
        chunks: list[Chunk] = []
        for event in events:
            chunks += self._event(copy, event.data)
        self._field_errors(decoder)
        return self._after(copy, chunks)

    def end(self, copy: int) -> bytes:
        """Copy ``copy``'s body ended (with or without its ``[DONE]``)."""
        if self.ended or self._over[copy]:
            return b""
        chunks: list[Chunk] = []
        decoder = self._decoders[copy]
        if decoder is None:
            try:
                body = orjson.loads(b"".join(self._bodies[copy]))
            except orjson.JSONDecodeError:
                body = None
            self._bodies[copy] = []
            if is_error_body(body):  # a 200 whose one body is an error (as StreamPipe reads it)
                self.normalizer.upstream_failed(body)
            elif isinstance(body, dict):
                chunks += self._chunk(copy, plain_as_chunk(body))
        else:
            for event in decoder.flush():
                chunks += self._event(copy, event.data)
            self._field_errors(decoder)
        if not self.normalizer.ended:
            self._copy_over(copy)
        return self._after(copy, chunks)

    def fail(self, error: OpenAIError) -> bytes:
        """End the stream with ``error`` (a copy broke, went silent, or the shell failed)."""
        if self.ended:
            return b""
        self.normalizer.fail(error)
        return self._end([])

    # -- internals -------------------------------------------------------------------------
    def _event(self, copy: int, data: str) -> list[Chunk]:
        if self._over[copy]:
            return []
        if data[:1] != "{" and data.strip() == "[DONE]":
            self._copy_over(copy)
            return []
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return self.normalizer.feed(data)  # which fails the stream, naming the event
        return self._chunk(copy, chunk)

    def _chunk(self, copy: int, chunk: Any) -> list[Chunk]:
        if isinstance(chunk, dict):
            choices = chunk.get("choices")
            if isinstance(choices, list):
                n = self.copies
                chunk = {
                    **chunk,
                    "choices": [
                        {**c, "index": copy + c["index"] * n}
                        if isinstance(c, dict) and type(c.get("index")) is int
                        else c
                        for c in choices
                    ],
                }
            if chunk.get("usage") is not None:  # each copy's own; the client gets their sum at the end
                self._usage[copy] = _parts.usage(chunk["usage"])
                chunk = {**chunk, "usage": None}
        return self.normalizer.feed("", chunk)

    def _mine(self, copy: int) -> list[Any]:
        return [state for key, state in self.normalizer.choices.items() if key % self.copies == copy]

    def _copy_over(self, copy: int) -> None:
        """Copy ``copy`` sent its end: every choice of it must have its finish by now."""
        self._over[copy] = True
        if any(state.state != "finished" and state.held is None for state in self._mine(copy)):
            self.normalizer.fail(upstream_error(f"the upstream stream of choice {copy} ended before it finished"))

    def _after(self, copy: int, chunks: list[Chunk]) -> bytes:
        normalizer = self.normalizer
        mine = self._mine(copy) if normalizer.stop_seen and not normalizer.ended and not self._over[copy] else []
        if mine and all(state.state == "finished" for state in mine):
            self._over[copy] = True  # a stop at the gateway ended it: its backend may stop now
            self.closable.append(copy)
        if normalizer.ended or all(self._over):
            return self._end(chunks)
        return self._encode(chunks)

    def _end(self, chunks: list[Chunk]) -> bytes:
        normalizer = self.normalizer
        if not normalizer.ended:
            normalizer.usage = merge_usage(self._usage)
            chunks = [*chunks, *normalizer.flush()]
        self.ended = self.close_upstream = True
        out = [self._encode(chunks)]
        error = normalizer.error
        out += self.encoder.end() if error is None else self.encoder.fail(error)
        return b"".join(out)

    def _encode(self, chunks: list[Chunk]) -> bytes:
        self.chunks += len(chunks)
        out: list[bytes] = []
        for chunk in chunks:
            out += self.encoder.feed(chunk)
        return b"".join(out)

    def _field_errors(self, decoder: SSEDecoder) -> None:
        fail_on_error_lines(decoder, self.normalizer)

    def _id(self) -> str:
        return self.normalizer.ctx.response_id
