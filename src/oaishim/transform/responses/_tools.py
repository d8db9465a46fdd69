"""Responses tools, ``tool_choice`` and ``text.format`` as the chat request says them.

* Flat function tools ``{type: "function", name, description, parameters, strict}`` become chat's
  nested ``{type: "function", function: {...}}``.
* ``custom`` (free-form) tools have no chat equivalent a backend runs, so the backend sees a function
  taking one string, ``input``; the generator turns its calls back into ``custom_tool_call`` items
  (``ResponsesRequestInfo.custom_tools``). The tool's grammar cannot be enforced upstream.
* Hosted tools (web search, file search, code interpreter, computer use, MCP, image generation,
  local shell) run on OpenAI's side; a chat backend has none of them, so they are refused with a
  400 naming ``tools[i].type`` rather than dropped (the model would answer without the tool).
* ``allowed_tools`` choices narrow the tools sent upstream to the ones allowed, with the choice's
  mode, which is what the official API does with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oaishim.transform.validate._errors import invalid_type, invalid_value, missing
from oaishim.wire.errors import bad_request

__all__ = ["HOSTED_TOOLS", "map_text_format", "map_tool_choice", "map_tools"]

HOSTED_TOOLS = (
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
_CUSTOM_PARAMETERS = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The tool's free-form input."}},
    "required": ["input"],
    "additionalProperties": False,
}


def _hosted(param: str, kind: str) -> Exception:
    return bad_request(
        f"The tool type '{kind}' is not supported by this server: it runs on the model provider's side, and this "
        "model's server has no such tool. Only 'function' and 'custom' tools, which the client runs, are available.",
        param,
        "unsupported_value",
    )


def _name(tool: Mapping[str, Any], param: str) -> str:
    name = tool.get("name")
    if name is None:
        raise missing(f"{param}.name")
    if not isinstance(name, str):
        raise invalid_type(f"{param}.name", "a string", name)
    return name


def map_tools(tools: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]], frozenset[str]]:
    """-> (chat tools, tools as the response echoes them, names of custom tools)."""
    if tools is None:
        return [], [], frozenset()
    if not isinstance(tools, list):
        raise invalid_type("tools", "an array", tools)
    chat: list[dict[str, Any]] = []
    echo: list[dict[str, Any]] = []
    custom: set[str] = set()
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        if not isinstance(tool, Mapping):
            raise invalid_type(param, "an object", tool)
        kind = tool.get("type")
        if kind is None:
            raise missing(f"{param}.type")
        if kind in HOSTED_TOOLS or (isinstance(kind, str) and kind.startswith(("web_search", "computer_use"))):
            raise _hosted(f"{param}.type", kind)
        if kind not in ("function", "custom"):
            raise invalid_value(f"{param}.type", kind, ("function", "custom", *HOSTED_TOOLS))
        name = _name(tool, param)
        if name in seen:
            raise bad_request(
                f"Invalid 'tools': duplicate tool name '{name}'. Tool names must be unique.", "tools", "invalid_value"
            )
        seen.add(name)
        description = tool.get("description")
        if description is not None and not isinstance(description, str):
            raise invalid_type(f"{param}.description", "a string", description)
        if kind == "function":
            parameters = tool.get("parameters")
            if parameters is not None and not isinstance(parameters, Mapping):
                raise invalid_type(f"{param}.parameters", "an object", parameters)
            strict = tool.get("strict")
            if strict is not None and not isinstance(strict, bool):
                raise invalid_type(f"{param}.strict", "a boolean", strict)
            function: dict[str, Any] = {"name": name}
            if description is not None:
                function["description"] = description
            if parameters is not None:
                function["parameters"] = parameters
            if strict is not None:
                function["strict"] = strict
            chat.append({"type": "function", "function": function})
            echo.append(
                {
                    "type": "function",
                    "description": description,
                    "name": name,
                    "parameters": parameters,
                    "strict": strict,
                }
            )
        else:
            custom.add(name)
            function = {"name": name, "parameters": _CUSTOM_PARAMETERS}
            if description is not None:
                function["description"] = description
            chat.append({"type": "function", "function": function})
            echo.append(dict(tool))
    return chat, echo, frozenset(custom)


def _named(choice: Mapping[str, Any], param: str, names: set[str]) -> str:
    name = _name(choice, param)
    if name not in names:
        raise bad_request(
            f"Tool choice '{name}' not found in 'tools' parameter.", f"{param}.name", "tool_choice_not_found"
        )
    return name


def map_tool_choice(choice: Any, chat_tools: list[dict[str, Any]]) -> tuple[Any, list[dict[str, Any]]]:
    """-> (chat ``tool_choice`` or None for the default, the chat tools to send)."""
    if choice is None:
        return None, chat_tools
    names = {t["function"]["name"] for t in chat_tools}
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise invalid_value("tool_choice", choice, ("auto", "none", "required"))
        return choice, chat_tools
    if not isinstance(choice, Mapping):
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
        for i, entry in enumerate(allowed):
            if not isinstance(entry, Mapping):
                raise invalid_type(f"tool_choice.tools[{i}]", "an object", entry)
            if entry.get("type") in HOSTED_TOOLS:
                raise _hosted(f"tool_choice.tools[{i}].type", str(entry.get("type")))
            keep.add(_named(entry, f"tool_choice.tools[{i}]", names))
        return mode, [t for t in chat_tools if t["function"]["name"] in keep]
    if isinstance(kind, str) and (kind in HOSTED_TOOLS or kind.startswith(("web_search", "computer_use"))):
        raise _hosted("tool_choice.type", kind)
    raise invalid_value("tool_choice.type", kind, ("function", "custom", "allowed_tools"))


def map_text_format(text: Any) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """-> (chat ``response_format`` or None, ``text`` as the response echoes it)."""
    text = text if isinstance(text, Mapping) else {}
    fmt = text.get("format")
    echo = {"format": {"type": "text"}, "verbosity": text.get("verbosity") or "medium"}
    if fmt is None:
        return None, echo
    if not isinstance(fmt, Mapping):
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
    if not isinstance(schema, Mapping):
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
