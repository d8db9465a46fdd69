"""The frames a serving process hands the capture process (``server.capture_feed`` sends them,
``server.capture_process`` reads them), compiled with the core: they are made once per captured
exchange.

A frame is the payload's size and the worker's count of dropped exchanges so far (``FRAME``),
then the payload, which is one of:

* **a plain exchange** (``PLAIN_KIND``, its first byte): the common exchange, which the recorder
  notes as fields (``capture.raw.PlainExchange``) rather than parts, framed from them by
  :func:`plain_frame`: a fixed head (``PLAIN``: its flags, its start, its other times as offsets
  from the start, its statuses and the length of each part), the profile, the error and the
  upstream URL as UTF-8, a table of the upstream answer's reads (``READ``: each one's offset and
  length), then the parts' bytes (the client request's read, the answer written, the upstream
  request's head and body, the reads). Against the parts marshalled (below), a plain request's
  capture costs the serving process about 3 points of c32 latency less (bench/README.md, "The
  plain-frame round");
* **any other exchange**: its tuples (``capture.raw.to_tuple``) in ``marshal``'s format, or pickled
  where marshal refuses a value (a subclass of ``str`` or ``int`` in a header, say). A pickle
  starts with its PROTO opcode, 0x80; a marshalled tuple with 0x28, 0x29 or those with 0x80 added:
  none starts with ``PLAIN_KIND``.

:func:`frames` takes the complete frames off the start of a buffer; :func:`decode` turns a payload
back into the exchange.
"""

from __future__ import annotations

import marshal
import pickle
import struct
from typing import Any, Final

from librt.strings import BytesWriter, write_f64_le, write_i32_le, write_i64_le

from oaishim.capture.raw import PlainExchange, RawExchange, from_tuple, to_tuple

FRAME: Final = struct.Struct("<IQ")  # the payload's size, the worker's drops so far; then the payload
MARSHAL_VERSION: Final = 2  # see encode
PLAIN_KIND: Final = 1
PLAIN_HEAD: Final = bytes([PLAIN_KIND])
# A plain payload's head, as plain_frame writes it field by field and PLAIN reads it back: its
# kind; its flags (below); the start (perf_counter_ns) and the wall clock's; the end, the answer's
# and the upstream request's times, each from the start; the statuses; the count of upstream
# reads; the lengths of the profile, the error, the URL, the read, the answer written, the
# upstream head and body.
PLAIN_FORMAT: Final = "BBqdqqqiiIIIIIIII"
PLAIN: Final = struct.Struct("<" + PLAIN_FORMAT)
READ: Final = struct.Struct("<qI")  # one upstream read: its time from the start, its length
PLAIN_SIZE: Final[int] = PLAIN.size  # (as constants: an attribute of a Struct is looked up by name)
READ_SIZE: Final[int] = READ.size
MAX_PLAIN: Final = (1 << 31) - 1  # a plain payload's size at most (its lengths are written as i32)
# the flags
PROXY: Final = 1  # recorded by the capture proxy, not the gateway
ANSWERED: Final = 2
SENT: Final = 4  # an upstream request was sent
PROFILED: Final = 8  # a profile (else None)
FAILED: Final = 16  # an error (else None)


def plain_frame(p: PlainExchange, dropped: int, out: BytesWriter | None = None) -> bytes:
    """A plain exchange's frame: the frame's head and the payload's, the text, the reads' table,
    then the parts, written in order into ``out`` (emptied first: a writer kept for it, whose
    room stays allocated, as ``capture_feed.RemoteWriter``'s; else a new one). Each number goes
    in as a machine integer (librt's writes, native once compiled), where ``struct`` took each as
    a Python object, boxed for the call and parsed back: 3.3k instructions a frame against 11.4k
    (bench/README.md, "The frame-writer round"). ValueError for a frame too large for its lengths'
    fields (2 GiB), which the caller sends as parts."""
    t0 = p.t0_ns
    flags = PROXY if p.mode == "proxy" else 0
    profile, error = p.profile, p.error
    named = b""
    why = b""
    if profile is not None:
        flags |= PROFILED
        named = _utf8(profile)
    if error is not None:
        flags |= FAILED
        why = _utf8(error)
    if p.answer_ns:
        flags |= ANSWERED
    if p.sent_ns:
        flags |= SENT
    url = _utf8(p.url)
    read, written, head, body = p.read, p.written, p.head, p.body
    reads = p.reads if p.reads is not None else []
    size = PLAIN_SIZE + len(named) + len(why) + len(url) + len(read) + len(written) + len(head) + len(body)
    for each in reads:  # (not unpacked: its time would be made an object again, to be dropped)
        size += READ_SIZE + len(each[1])
    if size > MAX_PLAIN:
        raise ValueError(f"a plain exchange of {size} bytes is framed as parts")
    w = out if out is not None else BytesWriter()
    w.truncate(0)
    write_i32_le(w, size)  # FRAME: the payload's size, the drops so far
    write_i64_le(w, dropped)
    w.append(PLAIN_KIND)  # PLAIN, field by field
    w.append(flags)
    write_i64_le(w, t0)
    write_f64_le(w, p.started)
    write_i64_le(w, p.end_ns - t0)
    write_i64_le(w, p.answer_ns - t0)
    write_i64_le(w, p.sent_ns - t0)
    write_i32_le(w, p.status)
    write_i32_le(w, p.up_status)
    write_i32_le(w, len(reads))
    write_i32_le(w, len(named))
    write_i32_le(w, len(why))
    write_i32_le(w, len(url))
    write_i32_le(w, len(read))
    write_i32_le(w, len(written))
    write_i32_le(w, len(head))
    write_i32_le(w, len(body))
    w.write(named)
    w.write(why)
    w.write(url)
    for t, data in reads:  # READ
        write_i64_le(w, t - t0)
        write_i32_le(w, len(data))
    w.write(read)
    w.write(written)
    w.write(head)
    w.write(body)
    for each in reads:
        w.write(each[1])
    return w.getvalue()


def _utf8(text: str) -> bytes:
    """``text`` as UTF-8, a lone surrogate (a header decoded with surrogateescape) kept as its three
    bytes: the plain codec's fast path, the error handler only for the rare string that needs it."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def _plain(payload: bytes) -> RawExchange:
    """A plain exchange's payload back as the exchange (``PlainExchange.exchange``); ValueError for
    one cut short or whose lengths do not add up."""
    try:
        return _unpack(payload).exchange()
    except struct.error as exc:
        raise ValueError(f"a plain exchange's frame cut short ({exc})") from None


def _unpack(payload: bytes) -> PlainExchange:
    head = PLAIN.unpack_from(payload)
    flags, t0, started, end_d, answer_d, sent_d, status, up_status, count = head[1:10]
    named, why, urled = head[10:13]
    sizes: list[int] = list(head[13:])  # the read, the answer written, the upstream head and body
    at = PLAIN.size + named + why + urled
    encoded = payload[PLAIN.size : at]  # (the lengths are of the UTF-8)
    times: list[int] = []
    for _ in range(count):
        t, size = READ.unpack_from(payload, at)
        times.append(t0 + t)
        sizes.append(size)
        at += READ.size
    pieces: list[bytes] = []
    for size in sizes:
        if size:
            pieces.append(payload[at : at + size])
            at += size
        else:
            pieces.append(b"")
    if at != len(payload):
        raise ValueError("a plain exchange's frame whose lengths do not add up")
    p = PlainExchange(t0, started, "proxy" if flags & PROXY else "gateway", pieces[0])
    p.profile = encoded[:named].decode("utf-8", "surrogatepass") if flags & PROFILED else None
    p.error = encoded[named : named + why].decode("utf-8", "surrogatepass") if flags & FAILED else None
    p.url = encoded[named + why :].decode("utf-8", "surrogatepass")
    if flags & ANSWERED:
        p.answer_ns, p.status, p.written = t0 + answer_d, status, pieces[1]
    if flags & SENT:
        p.sent_ns, p.up_status, p.head, p.body = t0 + sent_d, up_status, pieces[2], pieces[3]
        p.method = p.head[: p.head.find(b" ")].decode("latin-1")  # (the head's first word)
        p.reads = list(zip(times, pieces[4:], strict=True))
    p.end_ns = t0 + end_d
    return p


def frames(buffer: bytearray) -> list[tuple[int, bytes]]:
    """The complete frames at the buffer's start (taken out of it): (the drop count, the payload)."""
    out: list[tuple[int, bytes]] = []
    start = 0
    while len(buffer) - start >= FRAME.size:
        size, dropped = FRAME.unpack_from(buffer, start)
        if len(buffer) - start - FRAME.size < size:
            break
        out.append((dropped, bytes(buffer[start + FRAME.size : start + FRAME.size + size])))
        start += FRAME.size + size
    del buffer[:start]
    return out


def encode(exchange: RawExchange) -> bytes:
    """An exchange of any shape as a frame's payload: its tuples in ``marshal``'s format (the
    serving and the capture process are the same interpreter), or pickled where marshal refuses a
    value. Marshal's format 2, the last without back-references: the later ones keep a table of
    every object written, a third of the time for an exchange, to share what recurs, which in an
    exchange is little."""
    form: tuple[Any, ...] = to_tuple(exchange)  # builtins only (capture.raw)
    try:
        return marshal.dumps(form, MARSHAL_VERSION)
    except ValueError:
        return pickle.dumps(form, pickle.HIGHEST_PROTOCOL)


def decode(payload: bytes) -> RawExchange:
    """One frame's exchange (from this gateway's own workers, through a 0700 folder)."""
    kind = payload[:1]
    if kind == PLAIN_HEAD:
        return _plain(payload)
    form = pickle.loads(payload) if kind == b"\x80" else marshal.loads(payload)
    return from_tuple(form)
