"""Does the backend's answer hold the call a forced ``tool_choice`` asks for? (Decision only, no I/O.)

Where the backend cannot force a call (``transform.params.tool_choice``: ``ToolPlan.check``), the
gateway reads the answer before the client sees any of it, until this says yes or no; the server then
passes it on or asks once more (``server.forced``). A stream is decided as soon as a call of the
right function has begun: the rest then flows as it comes. The answer is read through the same
normaliser the client's answer goes through (on a copy of the context, so nothing is counted twice),
so a call written as text (a backend without a tool parser) counts as the call it becomes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from oaishim.transform.context import ResponseContext
from oaishim.transform.params.tool_choice import satisfied
from oaishim.transform.pipe import StreamPipe, plain_answer
from oaishim.wire.errors import OpenAIError

__all__ = ["ChoiceWatch", "Verdict", "plain_verdict", "unmet"]

Verdict = Literal["met", "unmet", "pass"]  # pass: not for this check to judge (an error, an unreadable answer)


def _scratch(ctx: ResponseContext) -> ResponseContext:
    return replace(ctx, repairs=set(), violations=[])  # what an answer never sent broke is not reported


def plain_verdict(check: str | None, status: int, raw: bytes, ctx: ResponseContext) -> Verdict:
    """The verdict on a whole plain chat answer."""
    if check is None or status >= 400:
        return "pass"
    try:
        body = plain_answer("chat", status, raw, _scratch(ctx))
    except OpenAIError:
        return "pass"  # the client gets that error from the relay
    names = [
        call["function"]["name"]
        for choice in body.get("choices") or ()
        for call in choice["message"].get("tool_calls") or ()
    ]
    return "met" if satisfied(check, names) else "unmet"


class ChoiceWatch:
    """A stream's verdict, piece by piece: ``feed`` gives None until it is decided."""

    def __init__(self, check: str, ctx: ResponseContext, *, sse: bool, max_event: int) -> None:
        self.check = check
        self.pipe = StreamPipe(_scratch(ctx), sse=sse, max_event=max_event)

    def feed(self, piece: bytes) -> Verdict | None:
        self.pipe.feed(piece)
        if satisfied(self.check, self.pipe.normalizer.call_names()):
            return "met"
        if self.pipe.normalizer.error is not None:
            return "pass"
        return "unmet" if self.pipe.ended else None

    def end(self) -> Verdict:
        """The upstream body ended before a verdict."""
        self.pipe.flush()
        if satisfied(self.check, self.pipe.normalizer.call_names()):
            return "met"
        return "pass" if self.pipe.normalizer.error is not None else "unmet"


def unmet(check: str) -> OpenAIError:
    """What the client gets when the backend, asked twice, still did not make the forced call."""
    what = "a tool call" if check == "" else f"a call of the function '{check}'"
    return OpenAIError(
        502,
        f"The model's answer did not contain {what}, which tool_choice requires; this backend cannot enforce "
        "tool_choice, and a second attempt did not contain it either.",
        "server_error",
        "tool_choice",
        "tool_choice_not_honoured",
    )
