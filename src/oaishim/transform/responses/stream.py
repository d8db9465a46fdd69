"""The Responses event stream, generated from the official chat completion chunks of one answer.

The caller feeds each normalised ``chat.completion.chunk`` (``transform.stream`` output, decoded) to
:meth:`ResponsesStreamEncoder.feed` and gets the Responses events to send, framed
``event: <type>\\ndata: <json>\\n\\n`` (no ``[DONE]``: the API has none). The lifecycle:

* ``response.created`` then ``response.in_progress`` first (:meth:`start`, or the first feed);
* the items, from ``items.OutputBuilder``, every event numbered by ``sequence_number`` 0, 1, 2, ...;
* at the end exactly one terminal event carrying the whole response, with the same items as the
  ``response.output_item.done`` events (Codex pairs them by id): ``response.completed``;
  ``response.incomplete`` when the answer was cut (finish ``length`` -> ``max_output_tokens``,
  ``content_filter``); ``response.failed`` after an ``error`` event when the upstream failed
  (:meth:`fail`) or ended without finishing (:meth:`end` before a finish). A broken-off stream never
  ends in ``response.completed``: a client would keep a truncated answer as whole.

The chat finish chunk closes the open item; usage, which comes after it, goes into the terminal event.
Only choice 0 is read: the Responses API has no ``n``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

import orjson

from oaishim.transform.responses._info import (
    ResponsesRequestInfo,
    failure_code,
    new_id,
    response_object,
    responses_usage,
)
from oaishim.transform.responses._seal import seal_reasoning
from oaishim.transform.responses.items import Event, OutputBuilder
from oaishim.wire.errors import OpenAIError, upstream_error

__all__ = ["HeldTerminal", "ResponsesStreamEncoder", "frame"]

_CUT: Final = {"length": "max_output_tokens", "content_filter": "content_filter"}


# A text delta's frame up to its sequence number, as frame() writes it: then the place, the
# delta and the empty logprobs (the key order of OutputBuilder.text's event after _emit's two).
_DELTA_HEAD: Final = b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":'
_DELTA_TAIL: Final = b',"logprobs":[]}\n\n'


def frame(event: dict[str, Any]) -> bytes:
    return b"event: " + str(event["type"]).encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def _logprobs(value: Any) -> list[dict[str, Any]]:
    """Chat ``logprobs.content`` entries as Responses logprobs (same fields, nothing else)."""
    entries = value.get("content") if isinstance(value, dict) else None
    out: list[dict[str, Any]] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        tops = entry.get("top_logprobs")
        out.append(
            {
                "token": entry.get("token", ""),
                "logprob": entry.get("logprob", 0.0),
                "bytes": entry.get("bytes") or [],
                "top_logprobs": [
                    {"token": t.get("token", ""), "logprob": t.get("logprob", 0.0), "bytes": t.get("bytes") or []}
                    for t in (tops if isinstance(tops, list) else [])
                    if isinstance(t, dict)
                ],
            }
        )
    return out


class ResponsesStreamEncoder:
    """Chat chunks in, Responses SSE frames out; :attr:`response` is the final ``Response`` for storage."""

    def __init__(
        self,
        info: ResponsesRequestInfo,
        *,
        response_id: str | None = None,
        created_at: int | None = None,
        id_factory: Callable[[str], str] = new_id,
        key: bytes | None = None,
        clock: Callable[[], float] = time.time,
        framed: bool = True,
    ) -> None:
        self.info = info
        self.clock = clock
        self.framed = framed
        seal = (lambda text: seal_reasoning(key, text)) if key is not None and info.encrypted_reasoning else None
        self.builder = OutputBuilder(id_factory, seal=seal, custom_tools=info.custom_tools, namespaced=info.namespaced)
        created = int(clock()) if created_at is None else created_at
        self._response = response_object(info, response_id or id_factory("resp"), created)
        self._seq = 0
        self._started = False
        self.ended = False
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        # text_token's frame: where its deltas go (builder.open_text), and their bytes after the number
        self._delta: tuple[tuple[str, int, int] | None, bytes] = (None, b"")

    # -- framing ---------------------------------------------------------------------------------
    def _emit(self, events: list[Event]) -> list[bytes]:
        if not self.framed:  # only numbered: nothing is sent (chat_to_response keeps the response alone)
            self._seq += len(events)
            return []
        out: list[bytes] = []
        for event in events:
            numbered = {"type": event["type"], "sequence_number": self._seq, **event}
            self._seq += 1
            out.append(frame(numbered))
        return out

    def _lifecycle(self, kind: str) -> Event:
        """A lifecycle event carrying the response as it stands, not a copy: ``_emit`` frames it at
        once, so later changes cannot reach it (unframed, it is dropped: none). Three copies of the
        whole response a request were a sixth of a plain answer's cost and most of a stream's first
        event's."""
        return {"type": kind, "response": self.result() if self.framed else None}

    @property
    def response(self) -> dict[str, Any]:
        """The ``Response`` as it stands (final once the stream ended), a fresh copy each time."""
        out: dict[str, Any] = orjson.loads(orjson.dumps(self.result()))
        return out

    def result(self) -> dict[str, Any]:
        """The ``Response`` as it stands, not copied: its parts are the encoder's and the request
        info's (for a caller done with both, as ``chat_to_response`` is: the copy was a third of
        a plain answer's conversion)."""
        return {**self._response, "output": self.builder.output}

    # -- the interface ---------------------------------------------------------------------------
    def start(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        return self._emit([self._lifecycle("response.created"), self._lifecycle("response.in_progress")])

    def feed(self, chunk: dict[str, Any]) -> list[bytes]:
        if self.ended:
            return []
        out = self.start()
        try:
            events = self._read(chunk)
        except OpenAIError as err:
            return out + self.fail(err)
        except (TypeError, AttributeError, KeyError, ValueError):
            return out + self.fail(upstream_error("the upstream sent a chunk the gateway cannot read"))
        return out + self._emit(events)

    def text_token(self, index: int, text: str) -> list[bytes]:
        """What :meth:`feed` gives for a chunk holding only content ``text`` for choice ``index``
        (the stream pipe's short way for the common token, ``transform.fastchunk``)."""
        usual = self._started and not self.ended and index == 0 and self._finish is None and text != ""
        where = self.builder.open_text() if usual and self.framed and not self.info.logprobs else None
        if where is None:  # a part to open, another choice, after the finish: what feed does with the chunk
            return self.feed({"choices": [{"index": index, "delta": {"content": text}}]})
        if self._delta[0] != where:  # the usual token: its frame written here, as _emit would
            self._delta = (where, b',"item_id":%s,"output_index":%d,"content_index":%d,"delta":' % (
                orjson.dumps(where[0]), where[1], where[2]))  # fmt: skip
        self.builder.add_text(text)
        seq = self._seq
        self._seq += 1
        # one join (not four concatenations), the number by str (bytes formatting parses its format)
        return [b"".join((_DELTA_HEAD, str(seq).encode(), self._delta[1], orjson.dumps(text), _DELTA_TAIL))]

    def _read(self, chunk: dict[str, Any]) -> list[Event]:
        if chunk.get("usage") is not None:
            self._usage = responses_usage(chunk["usage"])
        out: list[Event] = []
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0 or self._finish is not None:
                continue
            delta = choice.get("delta") or {}
            out += self.builder.reasoning(_text(delta.get("reasoning_content")) or _text(delta.get("reasoning")))
            out += self.builder.text(
                _text(delta.get("content")), _logprobs(choice.get("logprobs")) if self.info.logprobs else None
            )
            out += self.builder.refusal(_text(delta.get("refusal")))
            for position, call in enumerate(delta.get("tool_calls") or []):
                fn = call.get("function") or {}
                key = call.get("index", position)
                out += self.builder.call(key, call.get("id"), fn.get("name"), _text(fn.get("arguments")))
            finish = choice.get("finish_reason")
            if finish is not None:
                self._finish = str(finish)
                out += self.builder.close("incomplete" if self._finish in _CUT else "completed")
        return out

    def end(self) -> list[bytes]:
        """The upstream ended normally: the terminal event (a failure if the answer never finished)."""
        if self.ended:
            return []
        if self._finish is None:
            return self.fail(upstream_error("the upstream stream ended before the response finished"))
        out = self.start()
        self.ended = True
        self._response["usage"] = self._usage
        cut = _CUT.get(self._finish)
        if cut is None:
            self._response["status"] = "completed"
            self._response["completed_at"] = int(self.clock())
            return out + self._emit([self._lifecycle("response.completed")])
        self._response["status"] = "incomplete"
        self._response["incomplete_details"] = {"reason": cut}
        return out + self._emit([self._lifecycle("response.incomplete")])

    def fail(self, error: OpenAIError) -> list[bytes]:
        """The upstream failed: close what is open, then ``error`` and ``response.failed``."""
        if self.ended:
            return []
        out = self.start()
        self.ended = True
        code = failure_code(error)
        events = self.builder.close("incomplete")
        events.append({"type": "error", "code": code, "message": error.message, "param": error.param})
        self._response["status"] = "failed"
        self._response["error"] = {"code": code, "message": error.message}
        self._response["usage"] = self._usage
        events.append(self._lifecycle("response.failed"))
        return out + self._emit(events)


class HeldTerminal:
    """The Responses encoder with its terminal event held back: ``terminal`` keeps it until the
    record is stored (``server.responses``), everything before it passes at once. Here, compiled
    with the encoder, since each streamed token goes through it."""

    __slots__ = ("inner", "terminal")

    def __init__(self, inner: ResponsesStreamEncoder) -> None:
        self.inner = inner
        self.terminal = b""

    def _hold(self, frames: list[bytes]) -> list[bytes]:
        if self.inner.ended and frames and not self.terminal:
            self.terminal = frames[-1]  # once ended the encoder says nothing more: this is the last
            return frames[:-1]
        return frames

    def feed(self, chunk: Any) -> list[bytes]:
        return self._hold(self.inner.feed(chunk))  # a chunk it cannot read fails the stream in there

    def fail(self, error: OpenAIError) -> list[bytes]:
        return self._hold(self.inner.fail(error))

    def text_token(self, index: int, text: str) -> list[bytes]:
        return self._hold(self.inner.text_token(index, text))

    def end(self) -> list[bytes]:
        return self._hold(self.inner.end())


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
