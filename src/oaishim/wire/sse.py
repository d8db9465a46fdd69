"""Server-Sent Events: an incremental decoder and a small encoder.

The decoder follows the WHATWG HTML "Parsing an event stream" / "Interpreting an event stream"
algorithm (html.spec.whatwg.org/multipage/server-sent-events.html), because that is what browsers and
the official SDKs implement; a gateway that parses differently would see different events than its
clients do.

Rules, and why they are spelled out here:

* Bytes are decoded as UTF-8 with replacement characters (the spec's "UTF-8 decode"), incrementally,
  so a multi-byte character split across network reads still decodes to one character.
* One U+FEFF at the very start of the stream is dropped (the spec's optional BOM), including when its
  three bytes arrive in separate reads. A BOM anywhere else is content.
* Line ends are LF, CR and CRLF, and nothing else. ``str.splitlines`` is not used: it would also split
  on VT, FF, U+001C-U+001E, U+0085, U+2028 and U+2029, which may legitimately appear in data.
* A CR that ends one read and an LF that starts the next are one CRLF. The CR ends the line at once
  (waiting for the next read would delay a dispatch), and the LF is then skipped; treating it as a
  second line end would be an empty line, which dispatches.
* A line starting with ``:`` is a comment. Otherwise the field name runs to the first ``:`` and the
  value is the rest, minus one leading space; a line without ``:`` is a field with an empty value.
* ``event`` sets the event type, ``data`` appends its value plus LF to the data buffer, ``id`` sets
  the last event ID unless the value contains NUL, ``retry`` counts only if it is ASCII digits.
  Other fields are ignored.
* An empty line dispatches: with an empty data buffer nothing is emitted, otherwise the data (minus
  its final LF) is. Either way the event type and data buffers are reset; the last event ID is not
  (the spec keeps it across events, so every event carries the ID in force when it was dispatched).

A decoder made with ``max_event`` bounds what it holds for one event (the unfinished line plus the
data lines of an event not yet dispatched, counted in characters; JSON from backends is ASCII, so
that is bytes): past it, :meth:`SSEDecoder.feed` raises :class:`EventTooLarge` and drops what it
held. The count is kept as pieces arrive, so a long line in many reads is never rescanned.

One deliberate departure: the spec discards an event that is still open when the stream ends. A
gateway should not lose data silently, so :meth:`SSEDecoder.flush` returns such an event and sets
:attr:`SSEDecoder.incomplete_tail`, letting the caller decide whether a truncated stream is an error.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from typing import Final

_utf8_decode: Final = codecs.utf_8_decode

__all__ = ["DONE", "EventTooLarge", "SSEDecoder", "SSEEvent", "encode_data", "encode_event", "is_done"]

_LINE_END: Final = re.compile(r"\r\n|\r|\n")

DONE: bytes = b"data: [DONE]\n\n"
"""The sentinel OpenAI sends as the last event of a stream."""


class EventTooLarge(ValueError):
    """One event grew past the decoder's ``max_event``; ``limit`` is that bound."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"an SSE event longer than {limit} characters")
        self.limit = limit


# Not frozen: mypyc builds a frozen dataclass as a Python class (0.5 µs, not 0.17). Its own
# __init__: the one dataclasses generates is interpreted, compiled or not (1.8k instructions an
# event against 0.3k).
@dataclass(slots=True, init=False)
class SSEEvent:
    """One dispatched event.

    ``event`` is the raw ``event`` field ("" when absent; the dispatched type is then "message").
    ``id`` is the last event ID buffer at dispatch, which persists across events; ``None`` until an
    ``id`` field has been seen. ``retry`` is the value of a valid ``retry`` field in this event's own
    block of lines, else ``None`` (a ``retry`` in a block without data is not reported).
    """

    data: str
    event: str = ""
    id: str | None = None
    retry: int | None = None

    def __init__(self, data: str, event: str = "", id: str | None = None, retry: int | None = None) -> None:
        self.data, self.event, self.id, self.retry = data, event, id, retry


class SSEDecoder:
    """Turns a byte stream, fed in arbitrary pieces, into :class:`SSEEvent` objects.

    Events are returned by the :meth:`feed` call that completes them. Call :meth:`flush` once at end
    of stream; after that the decoder is finished and :meth:`feed` raises. With ``max_event``, an
    event that would make the decoder hold more than that raises :class:`EventTooLarge`.
    """

    __slots__ = (
        "_at_start",
        "_data",
        "_data_size",
        "_event",
        "_finished",
        "_last_id",
        "_partial",
        "_partial_size",
        "_retry",
        "_skip_lf",
        "_undecoded",
        "bytes_fed",
        "incomplete_tail",
        "max_event",
        "unknown_fields",
    )

    def __init__(self, max_event: int | None = None) -> None:
        self.max_event = max_event
        self._partial_size = 0  # characters in _partial
        self._data_size = 0  # characters in _data
        # the bytes of a character split across reads (what codecs' incremental decoder keeps, kept
        # here: its decode() is a Python frame on every read)
        self._undecoded = b""
        self._at_start = True  # no character decoded yet, so a BOM may still come
        self._skip_lf = False  # the last read ended with CR: an LF first in the next one completes CRLF
        # Pieces of the line not yet terminated; a list so a long line arriving in many small reads is
        # joined once rather than re-copied on every read.
        self._partial: list[str] = []
        self._data: list[str] = []  # data field values; the spec's buffer is these joined, each + LF
        self._event = ""
        self._last_id: str | None = None
        self._retry: int | None = None
        self._finished = False
        self.incomplete_tail = False
        self.bytes_fed = 0
        self.unknown_fields: list[tuple[str, str]] = []  # (name, value) of lines with an unknown field

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode ``chunk`` and return the events it completed (often none, often one)."""
        if self._finished:
            raise ValueError("SSEDecoder.feed() called after flush()")
        self.bytes_fed += len(chunk)
        data = self._undecoded + chunk if self._undecoded else chunk
        try:
            # the usual read: whole UTF-8, decoded by the one call (a primitive once compiled)
            text = data.decode("utf-8")
            self._undecoded = b""
        except UnicodeDecodeError:  # a character cut at the read's end, or bytes that are not UTF-8
            text, used = _utf8_decode(data, "replace", False)
            self._undecoded = data[used:] if used != len(data) else b""
        return self._text(text)

    @property
    def held(self) -> int:
        """Characters held for the event in progress: its unfinished line and its data lines so far."""
        return self._partial_size + self._data_size

    def _too_large(self) -> EventTooLarge:
        """Drop what is held (the memory is the point) and finish: the stream cannot go on."""
        assert self.max_event is not None
        self._partial.clear()
        self._data = []
        self._partial_size = self._data_size = 0
        self._finished = True
        return EventTooLarge(self.max_event)

    def flush(self) -> list[SSEEvent]:
        """End the stream: return the event left open by a missing blank line, if it has data.

        A last line without a line end is processed first. If an event is then pending it is returned
        and :attr:`incomplete_tail` is set. Calling it again returns ``[]``.
        """
        if self._finished:
            return []
        self._finished = True
        # A truncated multi-byte sequence at the very end becomes U+FFFD here, as the spec requires.
        events = self._text(_utf8_decode(self._undecoded, "replace", True)[0])
        self._undecoded = b""
        if self._partial:
            self._lines(["".join(self._partial)], events)
            self._partial.clear()
            self._partial_size = 0
        if self._data:
            events.append(SSEEvent("\n".join(self._data), self._event, self._last_id, self._retry))
            self._data = []
            self._data_size = 0
            self.incomplete_tail = True
        return events

    def _text(self, text: str) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        # Empty text (a read holding only part of a character) must leave the BOM and CRLF state alone.
        if not text:
            return events
        if self._at_start:
            self._at_start = False  # nothing can precede the BOM, so there is no CR to pair with
            if text[0] == "\ufeff":
                text = text[1:]
        elif self._skip_lf:
            self._skip_lf = False
            if text[0] == "\n":
                text = text[1:]
        if not text:
            return events
        limit = self.max_event
        if (
            text[-2:] == "\n\n"
            and text.startswith("data: ")
            and text.find("\n") == len(text) - 2
            and not (self._partial or self._data or self._event or self._retry is not None)
            and "\r" not in text
            and (limit is None or len(text) <= limit)
        ):
            # The usual read: exactly one "data: …" line and its blank line, nothing pending.
            # What the rules below give for it, without splitting into lines.
            self._skip_lf = False
            events.append(SSEEvent(text[6:-2], "", self._last_id, None))
            return events
        self._skip_lf = text[-1] == "\r"
        # Most streams use LF only, and str.split is much faster than the regex.
        lines = _LINE_END.split(text) if "\r" in text else text.split("\n")
        tail = lines.pop()  # after the last line end: "" when the text ended with one
        if lines:
            if self._partial:
                if limit is not None and self._partial_size + len(lines[0]) + self._data_size > limit:
                    raise self._too_large()
                self._partial.append(lines[0])
                lines[0] = "".join(self._partial)
                self._partial.clear()
                self._partial_size = 0
            self._lines(lines, events)
        if tail:
            # Counted before it is kept: what the decoder holds never passes the bound.
            if limit is not None and self._partial_size + len(tail) + self._data_size > limit:
                raise self._too_large()
            self._partial.append(tail)
            self._partial_size += len(tail)
        return events

    def _lines(self, lines: list[str], events: list[SSEEvent]) -> None:
        # One loop without per-line method calls: this runs for every line of every streamed token.
        limit = self.max_event
        for line in lines:
            if not line:
                if self._data:
                    events.append(SSEEvent("\n".join(self._data), self._event, self._last_id, self._retry))
                    self._data = []
                    self._data_size = 0
                self._event = ""
                self._retry = None
                continue
            name, _, value = line.partition(":")
            if not name:
                continue  # the line started with ":": a comment
            if value[:1] == " ":
                value = value[1:]
            if name == "data":
                self._data_size += len(value) + 1  # + the LF that joins it to the next line
                if limit is not None and self._data_size > limit:
                    raise self._too_large()
                self._data.append(value)
            elif name == "event":
                self._event = value
            elif name == "id" and "\0" not in value:
                self._last_id = value
            # isdigit() alone would accept "²" or Arabic-Indic digits; the spec says ASCII digits.
            elif name == "retry" and value.isascii() and value.isdigit():
                self._retry = int(value)
            elif name not in ("id", "retry"):
                # WHATWG ignores other fields, and so do clients; they are kept aside so a proxy can
                # still act on them (old llama.cpp sends errors as an `error:` line).
                self.unknown_fields.append((name, value))


def encode_event(data: str, *, event: str | None = None, id: str | None = None, retry: int | None = None) -> bytes:
    """Encode one event, ending with its blank line, using LF line ends.

    ``data`` is split at CRLF, CR and LF into one ``data:`` line each, because a line end inside a
    field value would end the field; a decoder therefore gives back the lines joined by LF. The
    other fields cannot be split that way and are rejected if they contain a line end.
    """
    parts: list[str] = []
    if event is not None:
        _check_single_line("event", event)
        parts.append(f"event: {event}\n")
    if id is not None:
        _check_single_line("id", id)
        if "\0" in id:
            raise ValueError("SSE id must not contain NUL: decoders ignore such an id")
        parts.append(f"id: {id}\n")
    if retry is not None:
        if retry < 0:
            raise ValueError(f"SSE retry must be a non-negative integer, got {retry}")
        parts.append(f"retry: {retry}\n")
    # The space after the colon is always written, so a value that itself starts with a space survives
    # the decoder's removal of one leading space.
    parts.extend(f"data: {line}\n" for line in _LINE_END.split(data))
    parts.append("\n")
    return "".join(parts).encode("utf-8")


def _check_single_line(field: str, value: str) -> None:
    if "\n" in value or "\r" in value:
        raise ValueError(f"SSE {field} must not contain a line end: {value!r}")


def encode_data(payload: bytes) -> bytes:
    """Frame one line of already-encoded data (for example orjson output) as an event.

    This is the per-token fast path: no decoding, no splitting. A line end in ``payload`` would break
    the framing, so it raises ``ValueError`` instead (compact JSON never contains a raw one).
    """
    if payload.find(b"\n") != -1 or payload.find(b"\r") != -1:  # (find: ``in`` builds an exception per test)
        raise ValueError("encode_data payload must be a single line; use encode_event for multi-line data")
    return b"data: " + payload + b"\n\n"


def is_done(event: SSEEvent) -> bool:
    """Whether ``event`` is OpenAI's ``[DONE]`` end-of-stream sentinel."""
    return event.data == "[DONE]"
