"""Responses tools, ``tool_choice`` and ``text.format`` as the chat request says them.

* Flat function tools ``{type: "function", name, description, parameters, strict}`` become chat's
  nested ``{type: "function", function: {...}}``.
* ``custom`` (free-form) tools have no chat equivalent a backend runs, so the backend sees a function
  taking one string, ``input``; the generator turns its calls back into ``custom_tool_call`` items
  (``ResponsesRequestInfo.custom_tools``). The tool's grammar cannot be enforced upstream.
* ``namespace`` tools group function and custom tools under a name; the backend sees each member as a
  tool of its own (named as it is; ``namespace__name`` only where two members or a top-level tool
  share the name), and its calls come back as items with ``namespace`` and the member's name
  (``ResponsesRequestInfo.namespaced``).
* Hosted tools (web search, file search, code interpreter, computer use, MCP, image generation, and
  the shell/patch tools whose calls are items of their own) have no chat form a backend could call.
  They are accepted, echoed, and not offered upstream: under ``tool_choice: "auto"`` a model may
  always answer without calling a tool, so the answer is one the official API could give too, and
  agents that always send one (Codex CLI sends ``web_search`` on every turn) keep working. A request
  that forces one (``tool_choice`` naming it, or ``required`` with no other tool) is refused with a
  400 naming it: that answer cannot be given.
* ``allowed_tools`` choices narrow the tools sent upstream to the ones allowed, with the choice's
  mode, which is what the official API does with them.
"""

from __future__ import annotations

from typing import Any, Final

from oaishim.transform.validate._errors import empty_array, invalid_type, invalid_value, missing
from oaishim.wire.errors import bad_request

__all__ = ["HOSTED_TOOLS", "MappedTools", "map_text_format", "map_tool_choice", "map_tools"]

HOSTED_TOOLS: Final = (
    "web_search",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "web_search_2025_08_26",
    "file_search",
    "code_interpreter",
    "computer_use_preview",
    "computer_use",
    "mcp",
    "image_generation",
    "local_shell",
    "shell",
    "apply_patch",
)
_CUSTOM_PARAMETERS: Final = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The tool's free-form input."}},
    "required": ["input"],
    "additionalProperties": False,
}


def _is_hosted(kind: Any) -> bool:
    return isinstance(kind, str) and (kind in HOSTED_TOOLS or kind.startswith(("web_search", "computer_use")))


def _forced_hosted(param: str, kind: str) -> Exception:
    return bad_request(
        f"The tool type '{kind}' cannot be required on this server: it runs on the model provider's side, and this "
        "model's server has no such tool. Only 'function' and 'custom' tools, which the client runs, can be called.",
        param,
        "unsupported_value",
    )


def _name(tool: dict[str, Any], param: str) -> str:
    name = tool.get("name")
    if name is None:
        raise missing(f"{param}.name")
    if not isinstance(name, str):
        raise invalid_type(f"{param}.name", "a string", name)
    return name


class MappedTools:
    """(A plain class: a dataclass's generated ``__init__`` is Python, compiled or not.)"""

    __slots__ = ("chat", "custom", "echo", "hosted", "namespaced")

    def __init__(self) -> None:
        self.chat: list[dict[str, Any]] = []  # the chat tools sent upstream
        self.echo: list[dict[str, Any]] = []  # the tools as the response echoes them
        self.custom: frozenset[str] = frozenset()  # chat names of custom tools
        self.namespaced: dict[str, tuple[str, str]] = {}  # chat name -> (namespace, name)
        self.hosted: tuple[str, ...] = ()  # the hosted tool types accepted but not offered upstream

    def chat_name(self, namespace: str | None, name: str) -> str:
        """The upstream name of a call the client sends back (``namespace`` from its item)."""
        if namespace is None:
            return name
        for chat, where in self.namespaced.items():
            if where == (namespace, name):
                return chat
        return name


def _member(tool: dict[str, Any], param: str, kind: str, name: str) -> dict[str, Any]:
    """One function or custom tool as chat's function (checked as the official API checks it)."""
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise invalid_type(f"{param}.description", "a string", description)
    function: dict[str, Any] = {"name": name}
    if description is not None:
        function["description"] = description
    if kind == "custom":
        function["parameters"] = _CUSTOM_PARAMETERS
        return function
    parameters = tool.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise invalid_type(f"{param}.parameters", "an object", parameters)
    strict = tool.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise invalid_type(f"{param}.strict", "a boolean", strict)
    if parameters is not None:
        function["parameters"] = parameters
    if strict is not None:
        function["strict"] = strict
    return function


def _members(tool: dict[str, Any], param: str) -> list[tuple[str, dict[str, Any], str]]:
    """A namespace's tools as (param, tool, kind); the namespace's own fields checked."""
    members = tool.get("tools")
    if members is None:
        raise missing(f"{param}.tools")
    if not isinstance(members, list):
        raise invalid_type(f"{param}.tools", "an array", members)
    if not members:
        raise empty_array(f"{param}.tools")
    out = []
    for j, member in enumerate(members):
        where = f"{param}.tools[{j}]"
        if not isinstance(member, dict):
            raise invalid_type(where, "an object", member)
        kind = member.get("type")
        if kind is None:
            raise missing(f"{where}.type")
        if kind not in ("function", "custom"):
            raise invalid_value(f"{where}.type", kind, ("function", "custom"))
        out.append((where, member, str(kind)))
    return out


def map_tools(tools: Any) -> MappedTools:
    """The request's ``tools``: checked, echoed, and the ones a chat backend can call as chat tools."""
    mapped = MappedTools()
    if tools is None:
        return mapped
    if not isinstance(tools, list):
        raise invalid_type("tools", "an array", tools)
    # (namespace or None, param, tool, kind) for every tool the backend will see
    flat: list[tuple[str | None, str, dict[str, Any], str]] = []
    hosted: list[str] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise invalid_type(param, "an object", tool)
        kind = tool.get("type")
        if kind is None:
            raise missing(f"{param}.type")
        if _is_hosted(kind):
            hosted.append(kind)
            mapped.echo.append(dict(tool))
            continue
        if kind not in ("function", "custom", "namespace"):
            raise invalid_value(f"{param}.type", kind, ("function", "custom", "namespace", *HOSTED_TOOLS))
        name = _name(tool, param)
        if name in seen:
            raise bad_request(
                f"Invalid 'tools': duplicate tool name '{name}'. Tool names must be unique.", "tools", "invalid_value"
            )
        seen.add(name)
        if kind == "namespace":
            flat += [(name, where, member, member_kind) for where, member, member_kind in _members(tool, param)]
            mapped.echo.append(dict(tool))
            continue
        flat.append((None, param, tool, kind))
        if kind == "function":
            function = _member(tool, param, kind, name)
            mapped.echo.append(
                {
                    "type": "function",
                    "description": function.get("description"),
                    "name": name,
                    "parameters": function.get("parameters"),
                    "strict": function.get("strict"),
                }
            )
        else:
            mapped.echo.append(dict(tool))
    counts: dict[str, int] = {}
    for _, param, tool, _ in flat:
        counts[_name(tool, param)] = counts.get(_name(tool, param), 0) + 1
    custom: set[str] = set()
    for namespace, param, tool, kind in flat:
        name = _name(tool, param)
        chat_name = name if namespace is None or counts[name] == 1 else f"{namespace}__{name}"
        if namespace is not None:
            mapped.namespaced[chat_name] = (namespace, name)
        if kind == "custom":
            custom.add(chat_name)
        function = _member(tool, param, kind, name)
        function["name"] = chat_name
        mapped.chat.append({"type": "function", "function": function})
    mapped.custom = frozenset(custom)
    mapped.hosted = tuple(hosted)
    return mapped


def _named(choice: dict[str, Any], param: str, names: set[str]) -> str:
    name = _name(choice, param)
    if name not in names:
        raise bad_request(
            f"Tool choice '{name}' not found in 'tools' parameter.", f"{param}.name", "tool_choice_not_found"
        )
    return name


def map_tool_choice(choice: Any, tools: MappedTools) -> tuple[Any, list[dict[str, Any]]]:
    """-> (chat ``tool_choice`` or None for the default, the chat tools to send)."""
    chat_tools = tools.chat
    if choice is None:
        return None, chat_tools
    names = {t["function"]["name"] for t in chat_tools}
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise invalid_value("tool_choice", choice, ("auto", "none", "required"))
        if choice == "required" and not chat_tools and tools.hosted:
            raise _forced_hosted("tool_choice", tools.hosted[0])
        return choice, chat_tools
    if not isinstance(choice, dict):
        raise invalid_type("tool_choice", "one of a string or object", choice)
    kind = choice.get("type")
    if kind in ("function", "custom"):
        return {"type": "function", "function": {"name": _named(choice, "tool_choice", names)}}, chat_tools
    if kind == "allowed_tools":
        mode = choice.get("mode")
        if mode not in ("auto", "required"):
            raise invalid_value("tool_choice.mode", mode, ("auto", "required"))
        allowed = choice.get("tools")
        if not isinstance(allowed, list):
            raise invalid_type("tool_choice.tools", "an array", allowed)
        keep: set[str] = set()
        skipped: list[str] = []
        for i, entry in enumerate(allowed):
            if not isinstance(entry, dict):
                raise invalid_type(f"tool_choice.tools[{i}]", "an object", entry)
            if _is_hosted(entry.get("type")):
                skipped.append(str(entry["type"]))
                continue
            keep.add(_named(entry, f"tool_choice.tools[{i}]", names))
        if mode == "required" and not keep and skipped:
            raise _forced_hosted("tool_choice.tools[0].type", skipped[0])
        return mode, [t for t in chat_tools if t["function"]["name"] in keep]
    if _is_hosted(kind):
        raise _forced_hosted("tool_choice.type", str(kind))
    raise invalid_value("tool_choice.type", kind, ("function", "custom", "allowed_tools"))


def map_text_format(text: Any) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """-> (chat ``response_format`` or None, ``text`` as the response echoes it)."""
    text = text if isinstance(text, dict) else {}
    fmt = text.get("format")
    echo = {"format": {"type": "text"}, "verbosity": text.get("verbosity") or "medium"}
    if fmt is None:
        return None, echo
    if not isinstance(fmt, dict):
        raise invalid_type("text.format", "an object", fmt)
    kind = fmt.get("type")
    if kind == "text":
        return None, echo
    if kind == "json_object":
        echo["format"] = {"type": "json_object"}
        return {"type": "json_object"}, echo
    if kind != "json_schema":
        raise invalid_value("text.format.type", kind, ("text", "json_schema", "json_object"))
    name = fmt.get("name")
    if name is None:
        raise missing("text.format.name")
    if not isinstance(name, str):
        raise invalid_type("text.format.name", "a string", name)
    schema = fmt.get("schema")
    if schema is None:
        raise missing("text.format.schema")
    if not isinstance(schema, dict):
        raise invalid_type("text.format.schema", "an object", schema)
    strict = fmt.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise invalid_type("text.format.strict", "a boolean", strict)
    json_schema: dict[str, Any] = {"name": name, "schema": schema}
    description = fmt.get("description")
    if isinstance(description, str):
        json_schema["description"] = description
    if strict is not None:
        json_schema["strict"] = strict
    # The echo's description is a string or absent: the official schema has no null there.
    described = {"description": description} if isinstance(description, str) else {}
    echo["format"] = {"type": "json_schema", **described, "name": name, "schema": schema, "strict": strict}
    return {"type": "json_schema", "json_schema": json_schema}, echo
