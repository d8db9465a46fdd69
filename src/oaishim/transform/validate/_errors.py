"""The official API's refusal messages, codes and ``param`` paths, in one place.

Wording and codes as the official API writes them where we know them ("Invalid type for 'n': expected
an integer, but got a string instead.", ``invalid_type``, ``integer_above_max_value``,
``missing_required_parameter``, ``empty_array``, ``unknown_parameter``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from oaishim.wire.errors import OpenAIError, bad_request


def param_path(parts: Iterable[str | int]) -> str:
    """``["messages", 0, "content"]`` -> ``messages[0].content``, the official ``param`` form."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def json_type(value: Any) -> str:
    """How the official messages name a JSON value's type ("but got a string instead")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else type(value).__name__


def one_of(phrases: list[str]) -> str:
    """``["a string", "array of objects"]`` -> ``one of a string or array of objects``."""
    if len(phrases) == 1:
        return phrases[0]
    head = ", ".join(phrases[:-1])
    return f"one of {head}{',' if len(phrases) > 2 else ''} or {phrases[-1]}"


def listing(values: Iterable[Any]) -> str:
    """``'a', 'b', and 'c'``; ``'a' and 'b'``; ``'a'`` (a single value has no stray comma)."""
    quoted = [f"'{v}'" for v in values]
    if len(quoted) <= 1:
        return "".join(quoted)
    if len(quoted) == 2:
        return f"{quoted[0]} and {quoted[1]}"
    return ", ".join(quoted[:-1]) + f", and {quoted[-1]}"


def invalid_type(param: str, expected: str, value: Any) -> OpenAIError:
    got = json_type(value)
    return bad_request(
        f"Invalid type for '{param}': expected {expected}, but got {got} instead.", param, "invalid_type"
    )


def missing(param: str) -> OpenAIError:
    return bad_request(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")


def empty_array(param: str) -> OpenAIError:
    return bad_request(
        f"Invalid '{param}': empty array. Expected an array with minimum length 1, but got an empty array instead.",
        param,
        "empty_array",
    )


def invalid_value(param: str, value: Any, allowed: Iterable[Any]) -> OpenAIError:
    return bad_request(f"Invalid value: '{value}'. Supported values are: {listing(allowed)}.", param, "invalid_value")


def unknown_parameter(param: str) -> OpenAIError:
    return bad_request(f"Unknown parameter: '{param}'.", param, "unknown_parameter")


def _number(bound: int | float) -> str:
    if isinstance(bound, int):
        return str(bound)
    return str(int(bound)) if bound.is_integer() else str(bound)


def out_of_range(param: str, value: int | float, bound: int | float, *, below: bool, integer: bool) -> OpenAIError:
    word = "integer" if integer else "decimal"
    where, sign, code = ("below minimum", ">=", "below_min") if below else ("above maximum", "<=", "above_max")
    return bad_request(
        f"Invalid '{param}': {word} {where} value. Expected a value {sign} {_number(bound)}, but got {value} instead.",
        param,
        f"{word}_{code}_value",
    )


def bad_length(param: str, what: str, length: int, limit: int, *, below: bool) -> OpenAIError:
    """An array or string shorter or longer than the schema allows."""
    if below and what == "array" and limit == 1 and length == 0:
        return empty_array(param)
    word, kind, code = ("too short", "minimum", "below_min") if below else ("too long", "maximum", "above_max")
    return bad_request(
        f"Invalid '{param}': {what} {word}. Expected {'an' if what == 'array' else 'a'} {what} with {kind} length "
        f"{limit}, but got {'an' if what == 'array' else 'a'} {what} with length {length} instead.",
        param,
        f"{what}_{code}_length",
    )


def no_match(param: str, pattern: str) -> OpenAIError:
    return bad_request(
        f"Invalid '{param}': string does not match pattern. Expected a string that matches the pattern '{pattern}'.",
        param,
        "invalid_value",
    )
