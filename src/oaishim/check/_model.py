"""What the checker takes (one exchange) and what it gives (findings)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from oaishim.check._rules import Severity
from oaishim.wire.sse import SSEEvent

Endpoint = Literal["chat", "completions", "embeddings", "models", "error", "responses"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One difference from the official API.

    ``path`` is a JSONPath into the body or chunk (``$.choices[0].delta.role``); ``chunk`` is the
    0-based index of the SSE event for streams and ``None`` for plain bodies and whole-stream rules.
    """

    rule: str
    severity: Severity
    path: str
    chunk: int | None
    message: str

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
