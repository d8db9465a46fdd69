"""Rules no schema states: one field's value constrained by another's.

They run after the schema, so every value they read has the documented shape.
"""

from __future__ import annotations

from typing import Any

from oaishim.wire.errors import bad_request


def _tool_names(body: dict[str, Any]) -> dict[tuple[str, str], int]:
    """``(type, name)`` -> index of each offered tool, refusing a name offered twice."""
    names: dict[tuple[str, str], int] = {}
    for i, tool in enumerate(body.get("tools") or ()):
        kind = tool["type"]
        named = tool.get(kind)
        if not isinstance(named, dict) or not isinstance(named.get("name"), str):
            continue
        name = named["name"]
        # Function and custom tools share one namespace: a call names only the tool.
        first = next((j for (_, n), j in names.items() if n == name), None)
        if first is not None:
            param = f"tools[{i}].{kind}.name"
            raise bad_request(
                f"Invalid '{param}': duplicate tool name '{name}', already used by 'tools[{first}]'. "
                "Tool names must be unique.",
                param,
                "invalid_value",
            )
        names[kind, name] = i
    return names


def check_tools_offered(body: dict[str, Any]) -> None:
    """Tool names are unique, and a named ``tool_choice`` names a tool offered in ``tools``."""
    names = _tool_names(body)
    choice = body.get("tool_choice")
    if not isinstance(choice, dict) or choice.get("type") not in ("function", "custom"):
        return
    kind = choice["type"]
    name = choice[kind]["name"]
    if (kind, name) not in names:
        param = f"tool_choice.{kind}.name"
        raise bad_request(
            f"Invalid value for '{param}': no {kind} tool named '{name}' is offered in 'tools'.",
            param,
            "invalid_value",
        )
