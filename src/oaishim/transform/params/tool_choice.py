"""``tool_choice`` and ``parallel_tool_calls`` as the backend must read them to do what the client meant.

The profile's :class:`~oaishim.profiles._tool_choice.ToolChoiceSupport` says how the backend takes a
forced choice; this module rewrites the upstream body for it and says what the gateway itself must
then check in the answer (``ToolPlan.check``). Decisions only, no I/O: the server asks again when
``satisfied`` says no (``server.app``).

* ``none`` where the profile says so (``none_hides_tools``): the tools are not sent at all, so no
  template can tempt the model into a call the client ruled out (and no backend parser makes one).
* A named choice on a backend with only ``required`` (llama.cpp reads an object as ``auto``, L-2):
  only that function is offered, under ``required``: the backend's grammar then forces exactly it.
* A forced choice on a backend that cannot force it (TensorRT-LLM has no ``required``, T-5; Ollama
  ignores ``tool_choice``, O-1): ``auto`` is sent (a named choice offers only that function) and the
  answer is checked: a call of the function, whose arguments fit its ``parameters`` schema.
* A backend meant to enforce it but seen not to (``verify``, llama.cpp): sent as above, and the answer
  checked all the same.
* A stream under ``auto`` on a backend whose template writes calls the gateway reads from text
  (``calls_as_text``, llama.cpp, L-34) is sent ``tool_choice: "none"`` with the tools: the backend
  streams every token as text, and the gateway's text parser makes the calls.
* ``parallel_tool_calls`` left out means ``true`` (the official default): a backend whose default is
  ``false`` (llama.cpp, L-3) is sent ``true``. ``false`` is sent as it is, and the response side keeps
  at most one call whatever the backend did (``ResponseContext.one_tool_call``).
* Under a named choice the response side lets only calls of that function through
  (``ResponseContext.forced_tool``), as OpenAI never answers another; so a backend that also called
  another function first still satisfies the check, with the named call the one kept.
* The fallback for a backend that refuses a forced choice outright (vLLM without a tool parser, V-5):
  ``guided_body`` resends with ``tool_choice: "none"`` and the JSON schema of one call in the
  backend's guided-decoding field; the model's JSON is then read back as that call (the Llama-3 JSON
  format of ``transform.toolcalls``, which is gated on the offered tool names).
* A backend whose own forcing may not hold (``verify``: llama.cpp's lazy ``required`` grammar, L-30):
  the choice is sent as the backend takes it and the answer checked; the second try is ``guided_body``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from oaishim.profiles._base import Profile

__all__ = ["ToolPlan", "forced_name", "guided_body", "plan_tools", "satisfied"]


# Not frozen: mypyc builds a frozen dataclass as a Python class (sse.SSEEvent); its own __init__,
# compiled (dataclasses' is interpreted).
@dataclass(slots=True, init=False)
class ToolPlan:
    """``check``: None when the backend enforces the choice; ``""``: the answer needs some call;
    a name: it needs a call of that function. ``parallel``: the client allows several calls.
    ``schemas``: each offered function's ``parameters``, which a checked call's arguments must fit."""

    check: str | None = None
    parallel: bool = True
    repairs: tuple[str, ...] = ()
    schemas: dict[str, Any] = field(default_factory=dict)

    def __init__(
        self,
        check: str | None = None,
        parallel: bool = True,
        repairs: tuple[str, ...] = (),
        schemas: dict[str, Any] | None = None,
    ) -> None:
        self.check, self.parallel, self.repairs = check, parallel, repairs
        self.schemas = {} if schemas is None else schemas


def forced_name(choice: Any) -> str | None:
    """The function a named choice forces (None for a string choice)."""
    if isinstance(choice, dict):
        function = choice.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return str(function["name"])
    return None


def _only(tools: Any, name: str) -> list[Any]:
    return [t for t in tools if isinstance(t, dict) and forced_name(t) == name]


def plan_tools(out: dict[str, Any], client: dict[str, Any], profile: Profile) -> ToolPlan:
    """Rewrite ``out`` (the upstream body, already a copy at the top level) for ``profile``."""
    support = profile.tool_choice
    parallel = client.get("parallel_tool_calls") is not False
    tools = client.get("tools")
    if not tools:
        return ToolPlan(parallel=parallel)
    choice = client.get("tool_choice")
    if choice == "none":
        if not support.none_hides_tools:
            return ToolPlan(parallel=parallel)
        for key in ("tools", "tool_choice", "parallel_tool_calls"):
            out.pop(key, None)
        return ToolPlan(parallel=parallel, repairs=("tools_hidden_for_none",))
    repairs: list[str] = []
    unsaid = client.get("parallel_tool_calls") is None
    if unsaid and not support.parallel_default and "parallel_tool_calls" not in profile.rejects:
        out["parallel_tool_calls"] = True  # what leaving it out means at OpenAI
    streamed_auto = choice in (None, "auto") and client.get("stream") is True
    if support.calls_as_text and streamed_auto:
        # L-34: the backend's partial parse may go silent at markup it cannot read and drop the rest;
        # its template still lists the tools, and the gateway reads the calls from the text
        out["tool_choice"] = "none"
        repairs.append("calls_read_as_text")
    elif support.counts and support.unparsed and streamed_auto:
        # L-32: a refused parse ends such a stream without its usage; the counts on each chunk stand in
        out[support.counts] = True
    check: str | None = None
    name = forced_name(choice)
    if name is not None and support.named != "native":
        out["tools"] = _only(tools, name)
        if support.named == "required":
            out["tool_choice"] = "required"
            repairs.append("named_choice_as_required")
        else:
            out["tool_choice"] = "auto"
            check = name
    elif choice == "required" and support.required == "retry":
        out["tool_choice"] = "auto"
        check = ""
    if check is None and support.verify and (choice == "required" or name is not None):
        check = name or ""  # sent its native way, and the answer still checked
    if check is None:
        return ToolPlan(check, parallel, tuple(repairs))
    repairs.append("tool_choice_checked")
    schemas = {
        str(t["function"]["name"]): t["function"].get("parameters")
        for t in out.get("tools") or ()
        if forced_name(t) is not None and isinstance(t["function"].get("parameters"), dict)
    }
    return ToolPlan(check, parallel, tuple(repairs), schemas)


def satisfied(check: str | None, names: Collection[str]) -> bool:
    """Does an answer whose calls have ``names`` give what the forced choice asks?"""
    if check is None:
        return True
    return bool(names) if check == "" else check in names


def _call_schema(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool["function"]
    parameters = function.get("parameters")
    return {
        "type": "object",
        "properties": {
            "name": {"type": "string", "enum": [function["name"]]},
            "arguments": parameters if isinstance(parameters, dict) else {"type": "object"},
        },
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def guided_body(body: dict[str, Any], choice: Any, profile: Profile) -> dict[str, Any] | None:
    """The request to resend after the backend refused ``choice`` (a forced one) or ignored it
    (``verify``), or None when the profile has no guided decoding to force it with."""
    field = profile.tool_choice.guided
    tools = body.get("tools")
    if field is None or not isinstance(tools, list):
        return None
    name = forced_name(choice)
    offered = [t for t in tools if isinstance(t, dict) and forced_name(t) is not None]
    if name is not None:
        offered = _only(offered, name)
    if not offered:
        return None
    schemas = [_call_schema(t) for t in offered]
    schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    key = profile.tool_choice.guided_key
    # the forced answer is a call, not text: a response format's grammar (the same field on some
    # backends) gives way to the call's
    out = {k: v for k, v in body.items() if k != "response_format"}
    out.update({"tool_choice": "none", field: {key: schema} if key else schema})
    switch = profile.reasoning_effort_in.switch
    if profile.structured_output.after_reasoning and switch:
        # the grammar waits for the reasoning to end, which a model may never do (measured: the tiny
        # model opens <think> in a third of the answers); the client's own entries win
        given = body.get("chat_template_kwargs")
        out["chat_template_kwargs"] = {**dict.fromkeys(switch, False), **(given if isinstance(given, dict) else {})}
    return out
