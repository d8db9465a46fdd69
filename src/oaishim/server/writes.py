"""One write, one syscall: a response's head goes out together with the body that follows it.

uvicorn writes a response's head (``http.response.start``) and then its body as two
``transport.write`` calls, which on a connection with ``TCP_NODELAY`` are two ``send`` syscalls and
two TCP segments: for a plain answer that was a third of the gateway's CPU per request (py-spy,
bench/README.md). :class:`JoiningTransport` holds a head back until the next write joins it, or
until the end of the current loop iteration if none comes (a stream's head then goes out at once,
before the first token, as before). Every other call on the transport sends what is held first, so
the order of bytes on the wire never changes.
"""

from __future__ import annotations

import asyncio
from typing import Any

_HEAD = b"HTTP/1.1 "


class JoiningTransport:
    """Wraps the client connection's transport (the server protocol's ``self.transport``)."""

    __slots__ = ("_held", "_loop", "_raw")

    def __init__(self, raw: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._raw, self._loop = raw, loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._raw.write(held + data)
        elif data[:9] == _HEAD:
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._raw.write(data)

    def flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._raw.is_closing():
                self._raw.write(held)

    def writelines(self, lines: Any) -> None:
        self.flush()
        self._raw.writelines(lines)

    def close(self) -> None:
        self.flush()
        self._raw.close()

    def write_eof(self) -> None:
        self.flush()
        self._raw.write_eof()

    def is_closing(self) -> bool:
        return self._raw.is_closing()

    def __getattr__(self, name: str) -> Any:
        self.flush()
        return getattr(self._raw, name)
