"""Request targets: the one canonical path the gateway routes on, and the upstream URL built from it.

The gateway decides on a path (which endpoint, whether the body is validated, whether it may pass
through) and the backend decides again on the bytes it receives. When the two read a path
differently, a request the gateway took for "some other path" reaches the backend as
``/v1/chat/completions`` without being validated. So the decision is made on one canonical form,
and that same form is what the backend gets (as nginx's ``merge_slashes`` and Envoy's
``normalize_path`` do):

* only origin-form targets (``/…``); ``*``, ``host:port`` and ``*@host/…`` are refused, since the
  upstream URL is the configured base followed by this path;
* percent-escapes of unreserved characters decoded (``%63`` -> ``c``, ``%2e`` -> ``.``), others kept
  with upper-case hex; a malformed escape refused;
* encoded delimiters refused — ``%2F`` (``/``), ``%5C`` (``\\``), ``%3F`` (``?``), ``%23`` (``#``),
  ``%3B`` (``;``) and encoded control characters (``%00``…): backends disagree on whether they
  split segments, so no reading of them is safe;
* a literal backslash, control character, space or non-ASCII byte refused;
* runs of ``/`` merged into one;
* dot segments (``.``, ``..``, also encoded) removed as RFC 3986 §5.2.4 says; a ``..`` above the
  root refused.

No I/O here: ``server/`` calls these on every request.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, unquote, urlsplit

__all__ = ["BadTarget", "PassRule", "allowed", "join_upstream", "normalize_path", "parse_rule", "quote_query"]

_HEX: Final = frozenset(b"0123456789abcdefABCDEF")
_UNRESERVED: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# Decoded, these would change how the path splits (or end it) somewhere along the way.
_REFUSED_ENCODED: Final = {ord("/"): "/", ord("\\"): "\\", ord("?"): "?", ord("#"): "#", ord(";"): ";"}
# A path already canonical, the common case: no escape, no backslash, no "//", no segment starting with "."
_PLAIN: Final = re.compile(rb"/[A-Za-z0-9\-._~!$&'()*+,;=:@/]*")
# Canonical paths already found for plain targets (the same few endpoints on every request): a dict
# lookup instead of the regex and two searches; bounded (256 paths of 128 bytes at most), as _PLAIN
# admits any number of paths.
_SEEN: Final[dict[bytes, str]] = {}
_SEEN_MAX: Final = 256
# Query bytes sent on as they are: RFC 3986 query characters, with "%" for escapes already there.
_QUERY_SAFE: Final = "-._~!$&'()*+,;=:@/?%"


class BadTarget(ValueError):
    """A request target the gateway refuses; ``reason`` is a sentence for the client."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _decode(raw: bytes) -> str:
    """Percent-escapes of unreserved characters decoded, the rest checked and upper-cased."""
    out: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        byte = raw[i]
        if byte == 0x25:  # "%"
            pair = raw[i + 1 : i + 3]
            if len(pair) < 2 or not all(b in _HEX for b in pair):
                raise BadTarget("the path holds a malformed percent-escape.")
            value = int(pair, 16)
            if value in _REFUSED_ENCODED:
                raise BadTarget(
                    f"the path holds an encoded {_REFUSED_ENCODED[value]!r} (%{value:02X}), which is refused."
                )
            if value < 0x20 or value == 0x7F:
                raise BadTarget(f"the path holds an encoded control character (%{value:02X}), which is refused.")
            out.append(chr(value) if value in _UNRESERVED else f"%{value:02X}")
            i += 3
            continue
        if byte == 0x5C:
            raise BadTarget("the path holds a backslash, which is refused.")
        if byte <= 0x20 or byte >= 0x7F:
            raise BadTarget("the path holds a space, a control character or a byte that is not ASCII.")
        out.append(chr(byte))
        i += 1
    return "".join(out)


def normalize_path(raw: bytes) -> str:
    """The canonical form of a request target's path (the query already split off, as ASGI's
    ``raw_path`` is); raises :class:`BadTarget` for a target the gateway refuses."""
    seen = _SEEN.get(raw)
    if seen is not None:
        return seen
    if _PLAIN.fullmatch(raw) and raw.find(b"//") == -1 and raw.find(b"/.") == -1:
        path = raw.decode("ascii")
        if len(raw) <= 128 and len(_SEEN) < _SEEN_MAX:
            _SEEN[raw] = path
        return path
    if not raw.startswith(b"/"):
        raise BadTarget("the request target must be a path that starts with '/'.")
    segments = _decode(raw).split("/")[1:]
    kept: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "..":
            if not kept:
                raise BadTarget("the path climbs above the root with '..'.")
            kept.pop()
            if last:
                kept.append("")  # "/a/b/.." is "/a/": the final segment is the empty one
        elif segment == ".":
            if last:
                kept.append("")
        elif segment or last:  # an empty segment inside is a doubled "/", merged; at the end, a trailing "/"
            kept.append(segment)
    path = "/" + "/".join(kept)
    return "/" if path == "//" else path


def quote_query(query: bytes) -> str:
    """A client's query string as it will be sent on: the bytes as they came, minus any fragment,
    with whatever a query may not hold percent-encoded (so the request line cannot be changed)."""
    return quote(query.partition(b"#")[0], safe=_QUERY_SAFE)


def join_upstream(base: str, target: str) -> str:
    """The upstream URL for an origin-form ``target`` (path, and query if any) under ``base``; raises
    :class:`BadTarget` unless the result is on the base's scheme, host and port, under its path."""
    if not target.startswith("/"):
        raise BadTarget("the request target must be a path that starts with '/'.")
    path = target.partition("?")[0]
    if any(unquote(segment) in (".", "..") for segment in path.split("/")):
        # sent encoded and as it is, a dot segment would leave the base path on the backend's side
        raise BadTarget("the request target may not hold '.' or '..' segments.")
    url = base.rstrip("/") + target
    want, got = urlsplit(base), urlsplit(url)
    if (got.scheme, got.netloc) != (want.scheme, want.netloc) or not got.path.startswith(want.path.rstrip("/") + "/"):
        raise BadTarget("the request target does not name a path on the configured upstream.")
    return url


# ---------------------------------------------------------------------------------------------------
# Which other paths may pass through to the backend


@dataclass(frozen=True, slots=True)
class PassRule:
    """One pass-through entry: ``/version`` (any method), ``POST /tokenize``, or ``/props/*`` (a prefix)."""

    method: str | None
    path: str
    prefix: bool = False

    def matches_path(self, path: str) -> bool:
        """A prefix matches at a segment boundary: ``/props*`` is ``/props`` and ``/props/…``, not ``/propsecret``."""
        if not self.prefix:
            return path == self.path
        return path == self.path or path.startswith(self.path.rstrip("/") + "/")


def parse_rule(text: str) -> PassRule:
    """``[METHOD] PATH[*]``; raises ValueError for anything else."""
    parts = text.split()
    if not 1 <= len(parts) <= 2:
        raise ValueError(f"not a pass-through entry: {text!r} (expected e.g. /version or 'POST /tokenize')")
    method = parts[0].upper() if len(parts) == 2 else None
    if method is not None and not method.isalpha():
        raise ValueError(f"not an HTTP method: {parts[0]!r} in {text!r}")
    path = parts[-1]
    prefix = path.endswith("*")
    path = path.removesuffix("*")
    try:
        canonical = normalize_path(path.encode())
    except BadTarget as exc:
        raise ValueError(f"not a path: {parts[-1]!r} ({exc.reason})") from None
    if canonical != path:
        raise ValueError(f"{parts[-1]!r} is not in canonical form (that is {canonical!r})")
    return PassRule(method, path, prefix)


def allowed(rules: Iterable[PassRule], method: str, path: str) -> bool | None:
    """True when a rule lets ``method path`` through; False when the path is listed only for other
    methods (a 405); None when it is not listed at all (a 404)."""
    listed = False
    for rule in rules:
        if rule.matches_path(path):
            if rule.method is None or rule.method == method:
                return True
            listed = True
    return False if listed else None
