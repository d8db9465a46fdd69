"""``encrypted_content`` for reasoning items: an opaque value the gateway can read back.

Clients that keep no server state (Codex sends ``store: false``) ask for
``include: ["reasoning.encrypted_content"]`` and send each reasoning item back on the next turn; the
model must then see its earlier reasoning again. The gateway has no secret format of the model's to
hand out, so it seals the reasoning text itself: ``rsn1.`` + base64url(JSON payload) + ``.`` +
base64url(HMAC-SHA256 over the first two parts) under a key the server holds.

The MAC is what matters: a value the gateway reads back must be one it wrote, or a client could put
arbitrary "reasoning" into the assistant's mouth under the model's name. The payload is not
encrypted (its text is the client's own reasoning output, already sent to it as ``reasoning_text``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Any, Final

import orjson

from oaishim.wire.errors import OpenAIError, bad_request

__all__ = ["open_reasoning", "seal_reasoning"]

_PREFIX: Final = "rsn1"
_VERSION: Final = 1


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, signed: str) -> bytes:
    return hmac.new(key, signed.encode("ascii"), hashlib.sha256).digest()


def seal_reasoning(key: bytes, text: str) -> str:
    payload = _b64(orjson.dumps({"v": _VERSION, "text": text}))
    signed = f"{_PREFIX}.{payload}"
    return f"{signed}.{_b64(_mac(key, signed))}"


def _invalid(param: str) -> OpenAIError:
    return bad_request(
        f"Invalid '{param}': the encrypted content could not be verified. Send back reasoning items exactly as "
        "this server returned them.",
        param,
        "invalid_encrypted_content",
    )


def open_reasoning(key: bytes | None, value: Any, param: str) -> str:
    """The reasoning text sealed in ``value``; 400 naming ``param`` for anything this server did not write."""
    if not isinstance(value, str) or key is None:
        raise _invalid(param)
    parts = value.split(".")
    if len(parts) != 3 or parts[0] != _PREFIX:
        raise _invalid(param)
    signed = f"{parts[0]}.{parts[1]}"
    try:
        mac = _unb64(parts[2])
        if not hmac.compare_digest(mac, _mac(key, signed)):
            raise _invalid(param)
        payload = orjson.loads(_unb64(parts[1]))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise _invalid(param) from None
    if not isinstance(payload, dict) or payload.get("v") != _VERSION or not isinstance(payload.get("text"), str):
        raise _invalid(param)
    text: str = payload["text"]
    return text
