"""The answer to a ``response_format`` request, checked by the gateway: JSON, an object, the schema.

A backend's grammar may not hold (it ignores ``strict``, applies the grammar only after the reasoning
ends, or was started without guided decoding), so the final content of every choice is checked
against what the client asked (:class:`~oaishim.transform.params.response_format.OutputFormat`):
``json_object`` wants a JSON object, ``json_schema`` a JSON value the schema accepts (jsonschema-rs).
An answer cut by the token limit is not checked (its ``finish_reason: "length"`` says so, as the
official API's does), nor one that made tool calls.

Two things happen to a choice:

* **JSON filed as reasoning** (a reasoning parser that never saw ``</think>`` files the whole output as
  reasoning while the content stays empty): when the reasoning is JSON it becomes the content
  (repair kind ``json_from_reasoning``). In a stream, reasoning that starts like JSON (``{`` or ``[``)
  is held back while no content has come (:class:`Held`); content, a call or a refusal releases it
  as reasoning; at the finish it is moved when it parses, else sent as reasoning.
* **A violation** (not JSON, not an object, or rejected by the schema) is noted in
  ``ctx.violations`` (kinds :data:`KINDS`) — the server turns that into the ``x-oaishim-format-violation`` header
  (plain answers), a log line with the request id and the ``oaishim_response_format_violations``
  counter. With the profile's ``violation: "error"`` a strict format's violation is an OpenAI-shaped
  502 ``response_format_violation`` instead (a stream: that error event in place of the finish).
"""

from __future__ import annotations

import json
from typing import Any, Final

import orjson

from oaishim.transform.context import ResponseContext
from oaishim.transform.params.response_format import OutputFormat
from oaishim.wire.errors import OpenAIError

MOVED: Final = "json_from_reasoning"
KINDS = frozenset({"not_json", "not_object", "schema"})  # the violations of a response_format
_NOT_JSON: Final = object()


def _parse(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:  # orjson refuses integers beyond 64 bits, which are JSON; NaN and Infinity are not
        return json.loads(text, parse_constant=_refuse)
    except ValueError:
        return _NOT_JSON


def _refuse(name: str) -> Any:
    raise ValueError(name)


def is_json(text: str) -> bool:
    return bool(text.strip()) and _parse(text) is not _NOT_JSON


def violation(fmt: OutputFormat, text: str) -> tuple[str, str] | None:
    """``(kind, detail)`` where ``text`` breaks ``fmt``, or ``None``."""
    value = _parse(text)
    if value is _NOT_JSON:
        return "not_json", f"the content is not JSON ({text[:60]!r})"
    if fmt.kind == "json_object":
        return (
            None
            if isinstance(value, dict)
            else ("not_object", f"the content is JSON but not an object ({text[:60]!r})")
        )
    if fmt.validator is None:
        return None
    for error in fmt.validator.iter_errors(value):
        where = "/".join(str(p) for p in error.instance_path) or "(root)"
        return "schema", f"the content breaks the schema {fmt.name!r} at {where}: {error.message}"
    return None


def violation_error(index: int, detail: str) -> OpenAIError:
    return OpenAIError(
        502,
        f"The model's answer (choice {index}) does not match the requested response_format: {detail}",
        "server_error",
        param="response_format",
        code="response_format_violation",
    )


def judge(index: int, text: str, finish: str | None, ctx: ResponseContext) -> OpenAIError | None:
    """Check a choice's final content; note a violation; the error to answer with instead, if any."""
    fmt = ctx.output_format
    if fmt is None or finish == "length":
        return None
    found = violation(fmt, text)
    if found is None:
        return None
    kind, detail = found
    ctx.violations.append((index, kind, detail))
    return violation_error(index, detail) if fmt.policy == "error" and fmt.strict else None


def settle(
    index: int, content: str | None, reasoning: str, calls: bool, finish: str | None, ctx: ResponseContext
) -> tuple[str | None, str]:
    """A plain choice's (content, reasoning) after the checks; raises the violation error (policy)."""
    if ctx.output_format is None or calls:
        return content, reasoning
    if not (content or "").strip() and is_json(reasoning):
        content, reasoning = reasoning.strip(), ""
        ctx.repairs.add(MOVED)
    error = judge(index, content or "", finish, ctx)
    if error is not None:
        raise error
    return content, reasoning


class Held:
    """One streamed choice of a ``response_format`` request: the content so far (to check at the end)
    and the reasoning held back while it may be the answer."""

    __slots__ = ("content", "holding", "reasoning", "spaces")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning = ""  # held back
        self.spaces = ""  # whitespace-only content that came while reasoning was held
        self.holding = True  # no content yet, and the reasoning so far may be JSON

    def feed_reasoning(self, text: str) -> tuple[str, str]:
        """(reasoning, content) to send now for a piece of reasoning."""
        if not self.holding:
            return text, ""
        self.reasoning += text
        head = self.reasoning.lstrip()
        if not head or head[0] in "{[":
            return "", ""
        return self.release()

    def feed_content(self, text: str) -> tuple[str, str]:
        """(held reasoning to send first, content to send now)."""
        self.content.append(text)
        if not self.holding:
            return "", text
        if not text.strip():  # whitespace decides nothing: held with the reasoning, in its order
            self.spaces += text
            return "", ""
        reasoning, spaces = self.release()
        return reasoning, spaces + text

    def release(self) -> tuple[str, str]:
        """Something else came (content, a call, a refusal): (held reasoning, held whitespace content)."""
        self.holding = False
        reasoning, self.reasoning = self.reasoning, ""
        spaces, self.spaces = self.spaces, ""
        return reasoning, spaces

    def end(self, calls: bool, ctx: ResponseContext) -> tuple[str, str]:
        """At the finish: (reasoning to send, content to send); the held JSON moves to the content."""
        if self.holding and not calls and is_json(self.reasoning):
            moved = self.reasoning.strip()
            self.holding, self.reasoning, self.spaces = False, "", ""
            self.content = [moved]
            ctx.repairs.add(MOVED)
            return "", moved
        return self.release()

    def text(self) -> str:
        return "".join(self.content)
