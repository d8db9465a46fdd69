"""A real ``vllm serve`` (the CPU build of vLLM 0.32) on the tiny model, for the engine tests.

:func:`vllm_python` finds the venv that ``scripts/install-vllm`` made (``$OAISHIM_VLLM_PYTHON``, else
the default place); :class:`VllmServer` starts ``vllm serve`` on 127.0.0.1 with the flags of issue 7
(item 3), waits for ``/health`` and, at the end, stops the whole process group: vLLM runs its engine
core in a child process, which a plain ``terminate()`` of the API server would leave behind.

Starting takes ~50 s and ~3 GB, so the tests start one server at a time and keep it per phase.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

from oaishim.engine.llamacpp import EngineError, wait_healthy

DEFAULT_VENV = Path.home() / ".cache" / "oaishim" / "vllm-0.32-venv"
READY_MARK = ".oaishim-ready"  # written by scripts/install-vllm when an install finished

# The server variants the tests run (issue 7, item 3; the recordings' s1_ and s4_ servers).
NO_PARSERS: tuple[str, ...] = ()
PARSERS: tuple[str, ...] = (
    "--reasoning-parser",
    "qwen3",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    "--structured-outputs-config",
    '{"enable_in_reasoning": true}',
)
# JSON grammars without free whitespace. vLLM 0.32 reads ``disable_any_whitespace`` only from this
# server flag (a request's ``structured_outputs`` field of that name is not read by its xgrammar
# backend), and without it the random tiny model writes whitespace until the token limit under any
# JSON grammar (response_format, a forced tool call). The probe's issue-15 phases start with it.
COMPACT_JSON = '{"backend": "xgrammar", "disable_any_whitespace": true}'
NO_PARSERS_COMPACT_JSON: tuple[str, ...] = ("--structured-outputs-config", COMPACT_JSON)
PARSERS_COMPACT_JSON: tuple[str, ...] = (
    *PARSERS[:-1],
    '{"enable_in_reasoning": true, "backend": "xgrammar", "disable_any_whitespace": true}',
)


def vllm_python() -> Path | None:
    """The python of the vLLM venv: ``$OAISHIM_VLLM_PYTHON``, else the default install (if finished)."""
    if env := os.environ.get("OAISHIM_VLLM_PYTHON"):
        return Path(env)
    venv = Path(os.environ["OAISHIM_VLLM_VENV"]) if os.environ.get("OAISHIM_VLLM_VENV") else DEFAULT_VENV
    python = venv / "bin" / "python"
    return python if python.is_file() and (venv / READY_MARK).is_file() else None


def cache_root() -> Path:
    """vLLM's own cache (compiled kernels, usage stats): beside the venv, reused between runs."""
    return DEFAULT_VENV.parent / "vllm-cache"


class VllmServer:
    """``with VllmServer(python, hf_dir, flags, log) as server: server.url`` (stopped on exit)."""

    def __init__(
        self,
        python: Path,
        model_dir: Path,
        flags: tuple[str, ...],
        log_path: Path,
        *,
        port: int,
        startup_timeout: float = 180.0,
    ) -> None:
        self.python = python
        self.model_dir = model_dir
        self.flags = flags
        self.log_path = log_path
        self.port = port
        self.startup_timeout = startup_timeout
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_seconds = 0.0

    def command(self) -> list[str]:
        cli = self.python.parent / "vllm"
        launcher = [str(cli)] if cli.is_file() else [str(self.python), "-m", "vllm.entrypoints.cli.main"]
        return [
            *launcher,
            "serve",
            str(self.model_dir),
            "--served-model-name",
            "tiny",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            "2048",
            "--dtype",
            "bfloat16",
            "--enforce-eager",
            *self.flags,
        ]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        cache = cache_root()
        cache.mkdir(parents=True, exist_ok=True)
        env.update(
            VLLM_TARGET_DEVICE="cpu",
            VLLM_CPU_KVCACHE_SPACE="1",
            VLLM_CACHE_ROOT=str(cache),
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            HF_HUB_OFFLINE="1",  # the model is a local folder: nothing to fetch
            TRANSFORMERS_OFFLINE="1",
        )
        return env

    def log_tail(self, size: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def __enter__(self) -> VllmServer:
        started = time.monotonic()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.environment(),
                start_new_session=True,  # its own process group: the engine core child goes with it
            )
        try:
            self._wait_healthy(started)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _wait_healthy(self, started: float) -> None:
        assert self.process is not None
        remaining = self.startup_timeout - (time.monotonic() - started)
        try:
            wait_healthy(self.url, self.process, remaining, "vllm serve", poll=0.5)
        except EngineError as exc:
            raise RuntimeError(f"{exc}:\n{self.log_tail()}") from exc

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _group_alive(process.pid):
                process.poll()
                time.sleep(0.1)
            if not _group_alive(process.pid):
                break
        process.wait(timeout=5)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
