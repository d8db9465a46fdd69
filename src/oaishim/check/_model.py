"""What the checker takes (one exchange) and what it gives (findings)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from oaishim.check._rules import Severity
from oaishim.wire.sse import SSEEvent

Endpoint = Literal["chat", "completions", "embeddings", "models", "error", "responses"]


class Finding:
    """One difference from the official API.

    ``path`` is a JSONPath into the body or chunk (``$.choices[0].delta.role``); ``chunk`` is the
    0-based index of the SSE event for streams and ``None`` for plain bodies and whole-stream rules.
    A value: compared and hashed by its fields, never changed (mypy holds every field ``Final``).
    A plain class rather than a frozen dataclass: compiled with the checker, a dataclass's
    generated ``__init__``, ``__eq__`` and ``__hash__`` stay interpreted, and a stream of a vendor's
    chunks makes one finding a chunk (each cost the capture process ~7,500 instructions to create
    and ~6,000 to fold; now a few hundred).
    """

    __slots__ = ("chunk", "message", "path", "rule", "severity")

    def __init__(self, rule: str, severity: Severity, path: str, chunk: int | None, message: str) -> None:
        self.rule: Final = rule
        self.severity: Final = severity
        self.path: Final = path
        self.chunk: Final = chunk
        self.message: Final = message

    def _fields(self) -> tuple[str, str, str, int | None, str]:
        return (self.rule, self.severity, self.path, self.chunk, self.message)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Finding):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"Finding(rule={self.rule!r}, severity={self.severity!r}, path={self.path!r}, "
            f"chunk={self.chunk!r}, message={self.message!r})"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "path": self.path,
            "chunk": self.chunk,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request/response pair.

    Exactly one of ``body`` (the decoded JSON of a plain response, or its raw text when it is not
    JSON) and ``events`` (a stream, as decoded SSE events) is set. ``request`` is the JSON request body, or ``None`` when it
    is unknown, in which case request-aware rules are skipped; ``status`` is None when unknown. ``endpoint`` is inferred from the
    request and the response when not given; ``path`` (the request's URL path, when known) helps.
    JSON values are as a parser gives them: the rules take an object for one only when it is a
    ``dict`` (another ``Mapping`` is judged as not an object).
    """

    request: Mapping[str, Any] | None = None
    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    events: Sequence[SSEEvent] | None = None
    endpoint: Endpoint | None = None
    incomplete_tail: bool = False
    unknown_fields: Sequence[tuple[str, str]] = ()  # SSE lines with a field other than data/event/id/retry
    path: str | None = None


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """Knobs of the checker.

    ``extensions_as_notes`` lowers well-known vendor extension fields (``reasoning_content``,
    ``stop_reason``, …) from ``unknown-field`` errors to notes; ``intended_fields`` does the same for
    the fields a gateway was configured to send (``--reasoning-field``), judged with that setting. ``special_tokens`` is the model's
    protected set (from its tokenizer) and ``eot_tokens`` the subset that ends a turn; the
    end-of-turn rules need them.
    """

    extensions_as_notes: bool = False
    intended_fields: frozenset[str] = frozenset()  # fields sent on purpose (a gateway's settings): notes
    special_tokens: frozenset[str] = frozenset()
    eot_tokens: frozenset[str] = frozenset()
