"""Refuse bodies the gateway could read but not pass on: too deep, numbers or strings JSON cannot carry.

orjson decodes 1,024 levels of nesting but encodes only 254, so a body nested 255-1,024 levels deep
passed validation and failed when the gateway re-encoded it for the backend: a 500. The same happens,
for a body built in Python, with integers beyond 64 bits, NaN and infinities, and strings holding lone
surrogates (``"\\ud800"``, not UTF-8). One walk over the body finds all of these first and answers 400.
"""

from __future__ import annotations

import math
from typing import Any, Final

from oaishim.transform.validate._errors import out_of_range, param_path
from oaishim.wire.errors import bad_request

# How many levels of arrays and objects a body may nest. Real requests are shallow: messages with
# content parts reach 5 levels, and a tool's JSON Schema adds about 2 per level of object nesting
# (the official structured outputs allow 10 such levels, ~30 in all). 128 leaves four times that,
# and stays half of orjson's encoding limit (254), so an accepted body can always be re-encoded, also
# inside the few levels a capture record or an error envelope wraps around it.
MAX_DEPTH: Final = 128
# The official API reads integers as int64 (``seed`` is the widest it documents), and a backend that
# decodes into 64-bit integers fails on wider ones.
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

_Fault = tuple[str, list[str | int], Any]  # (what, path from the body's root, the value)


def _walk(value: Any, depth: int, strings: bool) -> _Fault | None:
    """The first fault under ``value``, its path collected while the recursion unwinds; its strings
    (keys too) searched for lone surrogates only with ``strings``."""
    if isinstance(value, dict):
        if depth >= MAX_DEPTH:
            return "depth", [], value
        for key, item in value.items():
            if not isinstance(key, str):
                return "key", [], key
            if strings and not key.isascii() and not _utf8(key):
                return "surrogate", [key], key
            if item is not None:
                fault = _walk(item, depth + 1, strings)
                if fault is not None:
                    fault[1].insert(0, key)
                    return fault
        return None
    if isinstance(value, list):
        if depth >= MAX_DEPTH:
            return "depth", [], value
        for i, item in enumerate(value):
            if item is not None:
                fault = _walk(item, depth + 1, strings)
                if fault is not None:
                    fault[1].insert(0, i)
                    return fault
        return None
    if isinstance(value, str):
        return None if not strings or value.isascii() or _utf8(value) else ("surrogate", [], value)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return None if INT64_MIN <= value <= INT64_MAX else ("integer", [], value)
    if isinstance(value, float):
        return None if math.isfinite(value) else ("nonfinite", [], value)
    return "type", [], value  # a tuple, a set, bytes: not JSON at all (only a Python caller can send one)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_limits(body: dict[str, Any], *, from_json: bool = False) -> None:
    """Raise a 400 :class:`OpenAIError` for the first part of ``body`` JSON or the backend cannot take.
    ``from_json``: ``body`` is what ``orjson.loads`` returned, which refuses a lone surrogate, so
    its strings are not searched for one (a method call on each key and string)."""
    fault = _walk(body, 0, not from_json)
    if fault is None:
        return
    what, parts, value = fault
    # A lone surrogate in a key would make the error itself unencodable: it is shown escaped.
    param = param_path(parts).encode("utf-8", "backslashreplace").decode() or None
    if what == "depth":
        field = param_path(parts[:1]) or None  # the field: the full path of a deep body is hundreds of characters
        raise bad_request(
            f"Invalid '{field}': too deeply nested. Expected at most {MAX_DEPTH} levels of nested arrays and objects "
            "in the request body.",
            field,
            "invalid_value",
        )
    if what == "integer":
        below = value < INT64_MIN
        raise out_of_range(param or "", value, INT64_MIN if below else INT64_MAX, below=below, integer=True)
    if what == "nonfinite":
        raise bad_request(f"Invalid '{param}': {value} is not a JSON number.", param, "invalid_value")
    if what == "key":
        raise bad_request(f"Invalid key {value!r} in '{param}': JSON object keys are strings.", param, "invalid_type")
    if what == "type":
        name = type(value).__name__
        raise bad_request(
            f"Invalid type for '{param}': expected a JSON value, but got {name} instead.", param, "invalid_type"
        )
    raise bad_request(
        f"Invalid '{param}': the string is not valid Unicode (it holds a lone surrogate).", param, "invalid_value"
    )
