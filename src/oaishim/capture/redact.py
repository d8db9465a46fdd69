"""Redaction: what must never reach the store, removed before a record is serialised.

Three layers, each a table or a list the user gives:

* **Headers** named in ``SECRET_HEADERS`` (``Authorization``, ``api-key``, ``x-api-key``, cookies…)
  have their value replaced by ``[REDACTED]``, on both sides and in both directions.
* **Query parameters** named in ``SECRET_QUERY`` (``?key=``, ``?api_key=``…) likewise.
* **JSON paths** the user configures (``--capture-redact '$.user'``, ``messages[*].content``) are
  replaced in request bodies, JSON response bodies and each SSE event's JSON.

Then, as a last net, every secret value known to the process (the gateway's keys, the upstream key)
and every value taken out of a secret header is scrubbed wherever it still appears in the serialised
record (a key pasted into a prompt, echoed in an error). Values shorter than ``MIN_SECRET``
characters are not scrubbed that way: "1" in a cookie is not a secret worth wrecking a record for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl, quote, urlencode

import orjson

MASK: Final = "[REDACTED]"
_MASK_BYTES: Final = MASK.encode()
MIN_SECRET: Final = 8
SECRET_HEADERS: Final = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "api-key",
        "x-api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
    }
)
# Query parameter names compared after normalising (lower case, "-" as "_"): access-token is access_token.
SECRET_QUERY: Final = frozenset(
    {
        "key",
        "api_key",
        "apikey",
        "access_token",
        "token",
        "auth",
        "secret",
        "password",
        "passwd",
        "signature",
        "sig",
        "client_secret",
        "refresh_token",
        "id_token",
        "session",
        "x_api_key",
    }
)


def secret_query(name: str) -> bool:
    return name.lower().replace("-", "_") in SECRET_QUERY


_SEGMENT: Final = re.compile(r"\.([^.\[\]]+)|\[(\*|\d+)\]")

PathPart = str | int  # a key, an index, or "*" for every key or item
JsonPath = tuple[PathPart, ...]


def parse_path(text: str) -> JsonPath:
    """``$.messages[*].content`` (the ``$`` is optional) as its parts."""
    source = text.strip()
    source = source[1:] if source.startswith("$") else source
    if source and not source.startswith((".", "[")):
        source = "." + source
    parts: list[PathPart] = []
    position = 0
    for match in _SEGMENT.finditer(source):
        if match.start() != position:
            break
        name, index = match.groups()
        parts.append(name if name is not None else ("*" if index == "*" else int(index)))
        position = match.end()
    if position != len(source) or not parts:
        raise ValueError(f"not a JSON path: {text!r} (expected e.g. $.user or messages[*].content)")
    return tuple(parts)


def _path_text(text: str) -> str:
    """A path as written, with its "$": ``user`` -> ``$.user``."""
    body = text.strip().removeprefix("$")
    return "$" + (body if body.startswith((".", "[")) else "." + body)


def _redact_at(node: Any, path: JsonPath) -> bool:
    head, rest = path[0], path[1:]
    keys: list[Any]
    if isinstance(node, dict):
        keys = list(node) if head == "*" else [head] if isinstance(head, str) and head in node else []
    elif isinstance(node, list):
        keys = list(range(len(node))) if head == "*" else [head] if isinstance(head, int) and head < len(node) else []
    else:
        return False
    changed = False
    for key in keys:
        if rest:
            changed |= _redact_at(node[key], rest)
        elif node[key] != MASK:
            node[key] = MASK
            changed = True
    return changed


def secret_values(value: str) -> list[str]:
    """The parts of a secret header's value worth scrubbing elsewhere: the whole, and the token
    after a scheme (``Bearer sk-…``) or each cookie's value."""
    values = [value.strip()]
    scheme, _, token = value.strip().partition(" ")
    if token and scheme.isalpha():
        values.append(token.strip())
    for cookie in value.split(";"):
        values.append(cookie.partition("=")[2].strip())
    return [v for v in values if len(v) >= MIN_SECRET]


@dataclass(frozen=True, slots=True)
class Redactor:
    json_paths: tuple[tuple[str, JsonPath], ...] = ()  # (as the user wrote it, with "$"; parsed)
    secrets: frozenset[str] = frozenset()  # known secret values: scrubbed wherever they appear

    @classmethod
    def build(cls, paths: Iterable[str] = (), secrets: Iterable[str | None] = ()) -> Redactor:
        parsed = tuple((_path_text(p), parse_path(p)) for p in paths)
        return cls(parsed, frozenset(s for s in secrets if s and len(s) >= MIN_SECRET))

    def headers(self, pairs: Iterable[tuple[str, str]], found: set[str], notes: set[str]) -> list[list[str]]:
        out = []
        for name, value in pairs:
            secret = name.lower() in SECRET_HEADERS
            if secret:
                found.update(secret_values(value))
                notes.add("header:" + name.lower())
            out.append([name, MASK if secret else value])
        return out

    def target(self, target: str, found: set[str], notes: set[str]) -> str:
        base, sep, query = target.partition("?")
        if not sep:
            return target
        pairs = parse_qsl(query, keep_blank_values=True)
        if not any(secret_query(k) for k, _ in pairs):
            return target
        cleaned = []
        for key, value in pairs:
            secret = secret_query(key)
            if secret:
                found.update(secret_values(value))
                notes.add("query:" + key.lower().replace("-", "_"))
            cleaned.append((key, MASK if secret else value))
        return base + "?" + urlencode(cleaned, quote_via=quote)

    def json(self, value: Any, notes: set[str]) -> bool:
        """Redact the configured paths in a decoded JSON value, in place; True when anything changed."""
        changed = False
        for text, path in self.json_paths:
            if _redact_at(value, path):
                notes.add("json:" + text)
                changed = True
        return changed

    def json_bytes(self, data: bytes, notes: set[str]) -> bytes | None:
        """The body with the configured paths redacted, or None when it is unchanged (or not JSON)."""
        if not self.json_paths or data.strip()[:1] not in (b"{", b"["):
            return None
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        return orjson.dumps(value) if self.json(value, notes) else None


def secret_needles(secrets: Iterable[str | None], *, raw: bool = True) -> tuple[bytes, ...]:
    """The byte strings that give a secret away, longest first ("Bearer k" before "k"): each secret
    of at least ``MIN_SECRET`` characters as it appears inside a JSON string and, with ``raw``, as
    its plain UTF-8 bytes too (a header, a text body)."""
    needles: set[bytes] = set()
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET:
            needles.add(orjson.dumps(secret)[1:-1])
            if raw:
                needles.add(secret.encode())
    return tuple(sorted(needles, key=len, reverse=True))


def scrub_bytes(data: bytes, needles: tuple[bytes, ...]) -> bytes:
    """``data`` with every needle replaced by the mask; the very same object when none occurs (the
    cost then is one search per needle, cheap enough for every piece a client is sent)."""
    if type(data) is bytes:
        # bytes.replace gives back the bytes themselves when the needle does not occur: one search,
        # and a call with no argument tuple, where ``find`` then ``replace`` parsed one (callgrind:
        # ~1,000 instructions a needle for a piece a client is sent, against ~400 this way). Not
        # ``in``: bytes.__contains__ first tries the needle as an int, and drops the TypeError.
        for needle in needles:
            data = data.replace(needle, _MASK_BYTES)
        return data
    for needle in needles:  # a subclass of bytes (or a bytearray, uncompiled): replace would always copy it
        if data.find(needle) != -1:
            data = data.replace(needle, _MASK_BYTES)
    return data


def scrub(line: bytes, secrets: Iterable[str], notes: set[str]) -> bytes:
    """Replace each secret, as it would appear inside a JSON string, in a serialised record."""
    scrubbed = scrub_bytes(line, secret_needles(secrets, raw=False))
    if scrubbed is not line:
        notes.add("literal")
    return scrubbed
