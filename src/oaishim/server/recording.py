"""Recording exchanges as they pass (``oaishim serve --capture DIR``, ``oaishim capture``).

A :class:`~oaishim.server.recorder.Recorder` (compiled with the core: it runs for every message
and chunk) follows one exchange through its phases, fed by the wrapper around any
``server.seam.Upstream`` (:class:`~oaishim.server.recorder_upstream.RecordingUpstream`, compiled with it).
Here are the parts that stay Python: the writer thread's record build and its checker's budget
(:class:`CheckBudget`), and :class:`Recording`, where a gateway's or a proxy's exchanges go.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

from oaishim.capture.build import build_record, warm_up
from oaishim.capture.raw import Mode, RawExchange
from oaishim.capture.record import Record
from oaishim.capture.redact import Redactor
from oaishim.capture.store import CaptureWriter
from oaishim.check import CheckOptions
from oaishim.server.asgi import Scope
from oaishim.server.capture_wire import settle_wire
from oaishim.server.config import Settings
from oaishim.server.recorder import Recorder, Submit
from oaishim.server.recorder_upstream import RecordingUpstream

__all__ = ["CheckBudget", "Recorder", "Recording", "RecordingUpstream", "Submit", "recording_for"]


class CheckBudget:
    """The checker's share of the writer's time: ``share`` of wall time on average, with bursts up
    to ``burst`` seconds. The checker costs a few milliseconds per streamed answer (ten times what
    recording it does), so past the budget records are stored unchecked (``findings: null``) and
    ``oaishim inspect`` checks them when it shows them.

    With ``idle`` (a :class:`~oaishim.server.knobs.IdleCores`), the share also follows the CPU the
    machine leaves idle: at most ``IDLE_USE`` of the idle cores seen over the last ``window``
    seconds, so on a machine the gateway keeps busy the checker waits rather than take a core from
    the serving processes (the capture process's budget).

    ``free``, set by the capture process while its gateway is quiet (``server.capture_pace``):
    every record is checked, and what that costs is not taken from the share, which is left for
    the next busy spell. The capture process then runs in the idle scheduling class, on the time
    no one else wants, so the records of a burst are checked once it is over rather than left
    unchecked (under wrk at c32 on 2 cores, 70-80 % of them were)."""

    IDLE_USE = 0.5

    def __init__(
        self,
        share: float = 0.1,
        burst: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        idle: Callable[[], float | None] | None = None,
        window: float = 0.5,
    ) -> None:
        self.share, self.burst, self.clock = share, burst, clock
        self.idle, self.window = idle, window
        self.rate = share  # the share in force
        self.tokens = burst
        self.last = self._seen = clock()
        self.skipped = 0
        self.free = False
        self._freed = False  # the check allowed last was allowed free: not paid from the share

    def allow(self) -> bool:
        self._freed = self.free
        if self.free:
            return True
        now_s = self.clock()
        if self.idle is not None and now_s - self._seen >= self.window:
            self._seen = now_s
            idle = self.idle()
            self.rate = self.share if idle is None else max(0.0, min(self.share, self.IDLE_USE * idle))
        self.tokens = min(self.burst, self.tokens + (now_s - self.last) * self.rate)
        self.last = now_s
        if self.tokens > 0:
            return True
        self.skipped += 1
        return False

    def spend(self, seconds: float) -> None:
        if not self._freed:
            self.tokens -= seconds


class Recording:
    """Where a gateway's or a proxy's exchanges go: one writer (thread) for the process."""

    def __init__(
        self,
        directory: Path,
        *,
        mode: Mode,
        secrets: Iterable[str | None] = (),
        redact_paths: Iterable[str] = (),
        run_checker: bool = True,
        check_budget: CheckBudget | None = None,
        max_file_bytes: int = 64 << 20,
        queue_size: int = 1024,
        client_options: CheckOptions | None = None,
    ) -> None:
        self.redactor = Redactor.build(redact_paths, secrets)
        self.client_options = client_options
        self.mode: Mode = mode
        self.run_checker = run_checker
        self.budget = check_budget or CheckBudget()
        self.writer = CaptureWriter(
            directory,
            self._build,
            max_file_bytes=max_file_bytes,
            queue_size=queue_size,
            warm_up=warm_up if run_checker else None,
        )

    def _build(self, raw: RawExchange) -> tuple[Record, bytes]:
        """In the writer thread: the checker runs while its budget lasts. An upstream answer
        noted as its reads is read back first (``server.capture_wire``)."""
        settle_wire(raw)
        if not (self.run_checker and self.budget.allow()):
            return build_record(raw, self.redactor, run_checker=False)
        started = time.thread_time()
        built = build_record(raw, self.redactor, client_options=self.client_options)
        self.budget.spend(time.thread_time() - started)
        return built

    def start(self) -> None:
        self.writer.start()

    def close(self) -> None:
        self.writer.close()

    def begin(self, scope: Scope, wall: float = 0.0) -> Recorder:
        return Recorder(self.writer, scope, self.mode, wall)


def recording_for(settings: Settings, check_budget: CheckBudget | None = None) -> Recording | None:
    """The gateway's recording (``--capture DIR``), or None. The gateway's keys and the upstream
    keys are scrubbed from records wherever they appear, besides the redacted headers. The capture
    process passes its own ``check_budget``."""
    if settings.capture_dir is None:
        return None
    secrets = [*settings.client_keys, *(route.upstream_api_key for route in settings.models)]
    return Recording(
        settings.capture_dir,
        mode="gateway",
        secrets=secrets,
        redact_paths=settings.capture_redact,
        client_options=gateway_check_options(settings),
        check_budget=check_budget,
    )


REASONING_FIELDS_SENT = {
    "reasoning_content": frozenset({"reasoning_content"}),
    "reasoning": frozenset({"reasoning"}),
    "both": frozenset({"reasoning_content", "reasoning"}),
    "drop": frozenset(),
}


def gateway_check_options(settings: Settings) -> CheckOptions:
    """How to judge what the gateway itself sent: the reasoning field ``--reasoning-field`` names is
    sent on purpose (a note, not an unknown-field error), and so are the backend's extensions under
    ``--keep-extensions``; everything else is judged as strictly as any endpoint."""
    return CheckOptions(
        extensions_as_notes=settings.keep_extensions,
        intended_fields=REASONING_FIELDS_SENT[settings.reasoning_field],
    )
