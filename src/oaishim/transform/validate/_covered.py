"""The chat requests the hand checks (``_fields``) cover whole, which skip the schema.

The official schema is the judge of a request (``_schema``), and asking it costs: the validator
copies the body into its own values before it reads them, about a twentieth of a plain request's
handling. The common request is small and plain: a model, a few scalars, messages of a role and a
string. For these fields every constraint the schema has (a type, a range, ``null`` allowed) is one
``_fields`` checks too, with the same bounds, so a body made only of them that passed those checks
passes the schema. Anything else (another field, a message with parts, a name or tool calls) is
asked of the schema as before. tests/transform/test_validate_fuzz.py holds the claim against the
schema itself: every variation of each covered field, and random bodies of them, that the hand
checks pass, the schema passes.
"""

from __future__ import annotations

from typing import Any, Final

# The top-level fields whose schema is a type, a range and null: those _fields checks as such (not
# seed: the schema bounds it to int64, and an integer-valued float such as 1e19 passes the hand check).
COVERED_FIELDS: Final = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "n",
        "stream",
        "presence_penalty",
        "frequency_penalty",
        "logprobs",
        "top_logprobs",
        "user",
    }
)
# A message that is a role and a string (the roles whose content the schema lets be any string)
PLAIN_ROLES: Final = frozenset({"system", "user", "assistant", "developer"})


def covered(endpoint: str, body: dict[str, Any]) -> bool:
    """Whether the schema can refuse nothing in ``body`` that ``check_fields`` let through (ask after it)."""
    if endpoint != "chat":
        return False
    if not COVERED_FIELDS.issuperset(body):  # (one call over the keys: a lookup each, in C)
        return False
    messages = body.get("messages")
    if not isinstance(messages, list):
        return False
    for message in messages:
        if not isinstance(message, dict) or len(message) != 2:
            return False
        role = message.get("role")
        if not isinstance(role, str) or role not in PLAIN_ROLES or not isinstance(message.get("content"), str):
            return False
    return True
