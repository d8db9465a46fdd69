"""What the stream pipe's tests share: the upstream bytes at every split point, and the pipe driven as
the shell drives it."""

from __future__ import annotations

from typing import Any

from oaishim.transform.context import ResponseContext
from oaishim.transform.pipe import StreamPipe


def every_split(raw: bytes) -> list[list[bytes]]:
    """``raw`` whole, then in two reads at each split point."""
    return [[p for p in (raw[:i], raw[i:]) if p] for i in range(len(raw) + 1)]


def feed_until_closed(pipe: StreamPipe, pieces: list[bytes]) -> bytes:
    """What the shell does with each read: feed it, and stop reading when the pipe says so."""
    out = b""
    for piece in pieces:
        out += pipe.feed(piece)
        if pipe.close_upstream:
            break
    return out


def run(pieces: list[bytes], ctx: ResponseContext, **options: Any) -> tuple[bytes, StreamPipe]:
    """The shell's whole stream: the reads fed until the pipe closes the upstream, then the flush."""
    pipe = StreamPipe(ctx, **options)
    out = feed_until_closed(pipe, pieces)
    return out + pipe.flush(), pipe
