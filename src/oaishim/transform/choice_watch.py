"""Does the backend's answer hold the call a forced ``tool_choice`` asks for? (Decision only, no I/O.)

Where the backend cannot force a call (``transform.params.tool_choice``: ``ToolPlan.check``), the
gateway reads the answer before the client sees any of it, until this says yes or no; the server then
passes it on or asks once more (``server.forced``). A stream is decided as soon as a call of the
right function has begun (with the offered functions' schemas: once its arguments are whole JSON the
schema accepts — a call whose arguments break it is no better than none, and is asked again): the rest
then flows as it comes. The answer is read through the same
normaliser the client's answer goes through (on a copy of the context, so nothing is counted twice),
so a call written as text (a backend without a tool parser) counts as the call it becomes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

import orjson

from oaishim.transform.context import ResponseContext
from oaishim.transform.params.response_format import local_validator
from oaishim.transform.pipe import StreamPipe, plain_answer
from oaishim.wire.errors import OpenAIError

__all__ = ["ArgumentCheck", "ChoiceWatch", "Verdict", "plain_verdict", "unmet"]

Verdict = Literal["met", "unmet", "pass"]  # pass: not for this check to judge (an error, an unreadable answer)


class ArgumentCheck:
    """The offered functions' ``parameters`` schemas, compiled once (jsonschema-rs): do a call's
    arguments fit? A function without a usable schema is checked by its name only."""

    def __init__(self, schemas: Mapping[str, Any] | None = None) -> None:
        self.validators: dict[str, Any] = {}
        for name, schema in (schemas or {}).items():
            try:
                self.validators[name] = local_validator(schema)
            except (ValueError, TypeError):  # not a valid JSON Schema: the backend judged it already
                continue

    def fits(self, name: str, arguments: str) -> bool | None:
        """True: nothing to check, or JSON the schema accepts; False: JSON it rejects; None: not
        (yet) whole JSON — not for this check (a stream still sending them; the relay reports
        arguments that never become JSON)."""
        validator = self.validators.get(name)
        if validator is None:
            return True
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return None
        return bool(validator.is_valid(value))

    def verdict(self, check: str, calls: Sequence[tuple[str, str]], ended: bool) -> Verdict | None:
        """``met`` when a call of the forced function (any, for ``""``) fits; ``unmet`` when one
        breaks its schema and none fits, or when the answer ended without a fitting call."""
        fits = [self.fits(name, arguments) for name, arguments in calls if check in ("", name)]
        if any(f is True for f in fits):
            return "met"
        if any(f is False for f in fits):
            return "unmet"
        if ended:
            return "met" if fits else "unmet"  # the call is there; its arguments never became JSON
        return None


def _scratch(ctx: ResponseContext) -> ResponseContext:
    return replace(ctx, repairs=set(), violations=[])  # what an answer never sent broke is not reported


def plain_verdict(
    check: str | None, status: int, raw: bytes, ctx: ResponseContext, arguments: ArgumentCheck | None = None
) -> Verdict:
    """The verdict on a whole plain chat answer."""
    if check is None or status >= 400:
        return "pass"
    try:
        body = plain_answer("chat", status, raw, _scratch(ctx))
    except OpenAIError:
        return "pass"  # the client gets that error from the relay
    calls = [
        (call["function"]["name"], call["function"].get("arguments") or "")
        for choice in body.get("choices") or ()
        for call in choice["message"].get("tool_calls") or ()
    ]
    return (arguments or ArgumentCheck()).verdict(check, calls, ended=True) or "unmet"


class ChoiceWatch:
    """A stream's verdict, piece by piece: ``feed`` gives None until it is decided."""

    def __init__(
        self,
        check: str,
        ctx: ResponseContext,
        *,
        sse: bool,
        max_event: int,
        arguments: ArgumentCheck | None = None,
        unparsed: str | None = None,
    ) -> None:
        self.check = check
        self.arguments = arguments or ArgumentCheck()
        self.unparsed = unparsed
        self.pipe = StreamPipe(_scratch(ctx), sse=sse, max_event=max_event)

    def _failed(self) -> Verdict:
        """The stream ended in an error: the backend's own failure to parse the call the model began
        (``unparsed``, llama.cpp L-31 streamed) is an answer without the call; any other is the
        client's to see."""
        error = self.pipe.normalizer.error
        if error is not None and self.unparsed and self.unparsed in error.message:
            return "unmet"
        return "pass"

    def feed(self, piece: bytes) -> Verdict | None:
        self.pipe.feed(piece)
        verdict = self.arguments.verdict(self.check, self.pipe.normalizer.calls(), self.pipe.ended)
        if verdict == "met":
            return "met"
        if self.pipe.normalizer.error is not None:
            return self._failed()
        return verdict

    def end(self) -> Verdict:
        """The upstream body ended before a verdict."""
        self.pipe.flush()
        verdict = self.arguments.verdict(self.check, self.pipe.normalizer.calls(), ended=True)
        if verdict == "met":
            return "met"
        return self._failed() if self.pipe.normalizer.error is not None else "unmet"


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
