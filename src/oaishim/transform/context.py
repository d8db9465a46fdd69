"""What the response side needs to know about one exchange (decided once, when the request arrives)."""

from __future__ import annotations

import secrets
import string
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from oaishim.transform.repair import RepairPlan

ReasoningField = Literal["reasoning_content", "reasoning", "both", "drop"]
ToolChoiceMode = Literal["none", "auto", "required", "named"]
_ALPHABET = string.ascii_letters + string.digits


def random_id(prefix: str, size: int = 29) -> str:
    """An id in the official style: ``chatcmpl-`` / ``cmpl-`` / ``call_`` and random letters and digits.

    One ``os.urandom`` call per id, not per character (that was a tenth of a plain request's CPU);
    the slight modulo bias does not matter for an id that only has to be unique."""
    return prefix + "".join(_ALPHABET[b % 62] for b in secrets.token_bytes(size))


@dataclass(slots=True)
class ResponseContext:
    """The client's side of one exchange: the ids and names it must see, and what it asked for."""

    model: str
    chat: bool = True
    include_usage: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    tool_mode: ToolChoiceMode = "none"
    reasoning_field: ReasoningField = "reasoning_content"
    keep_extensions: bool = False
    repair: RepairPlan | None = None
    context_param: str = "messages"  # what a context overflow blames: messages, prompt or input
    response_id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if not self.response_id:
            self.response_id = random_id("chatcmpl-" if self.chat else "cmpl-")
