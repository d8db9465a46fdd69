"""The gateway's secrets masked in the text a model writes, across the pieces of a stream.

The server masks every secret it knows in the bytes it writes (``server.asgi.Scrubbing``): a key
in a header, an error body, a plain answer or one streamed token. A model that writes a key over
several tokens of a stream puts its characters in separate JSON events, never side by side in
those bytes; here the text itself is masked, as the choice's text repair hands it out:

* an occurrence of a secret becomes ``[REDACTED]``, the mask the server writes;
* only a possible beginning of a secret is held back: the longest tail of the text that is a
  proper prefix of one (fewer characters than the longest secret), so a stream waits a few
  characters at most, and only when its text could be starting a key;
* ``flush`` gives back what was held: a beginning that never completed was ordinary text.

Any split of a text into pieces gives the same output as the whole text at once (tested at every
offset), so a plain answer and a stream of it are masked alike.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Final

MASK: Final = "[REDACTED]"  # as the server's byte masking writes it (capture.redact)


class SecretMask:
    """``feed(text)`` returns the text safe to emit now; ``flush()`` what was held at the end."""

    __slots__ = ("held", "masked", "secrets")

    def __init__(self, secrets: Iterable[str]) -> None:
        # longest first, so a secret that contains another is masked whole
        self.secrets: tuple[str, ...] = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))
        self.held = ""
        self.masked = 0  # occurrences masked so far

    def passes(self, text: str) -> bool:
        """Whether ``feed(text)`` would return ``text`` itself and hold nothing (no state touched)."""
        if self.held:
            return False
        for secret in self.secrets:
            if secret in text:
                return False
        return self._partial_tail(text) == 0

    def feed(self, text: str) -> str:
        buf = self.held + text if self.held else text
        for secret in self.secrets:
            if secret in buf:
                self.masked += buf.count(secret)
                buf = buf.replace(secret, MASK)
        keep = self._partial_tail(buf)
        if keep:
            self.held = buf[len(buf) - keep :]
            return buf[: len(buf) - keep]
        self.held = ""
        return buf

    def flush(self) -> str:
        held, self.held = self.held, ""
        return held

    def _partial_tail(self, text: str) -> int:
        """The length of the longest tail of ``text`` that is a proper prefix of some secret."""
        best = 0
        size = len(text)
        for secret in self.secrets:
            reach = min(len(secret) - 1, size)
            if reach <= best:
                continue
            first = secret[0]
            at = text.find(first, size - reach)
            while at != -1 and size - at > best:
                if secret.startswith(text[at:]):
                    best = size - at  # the earliest start found is the longest tail for this secret
                    break
                at = text.find(first, at + 1)
        return best


class FieldMasks:
    """A :class:`SecretMask` per text field of one choice (its content, reasoning, refusal, and each
    tool call's arguments, by a key the caller chooses). What one field holds back is given back
    before any other field's text goes out, so the fields' pieces keep the order they came in."""

    __slots__ = ("_masks", "secrets")

    def __init__(self, secrets: tuple[str, ...]) -> None:
        self.secrets = secrets
        self._masks: dict[Hashable, SecretMask] = {}

    def feed(self, key: Hashable, text: str) -> tuple[list[tuple[Hashable, str]], str]:
        """(what other fields held, to send first; ``text`` masked, less what this field holds)."""
        released = self.release(but=key) if self._masks else []
        mask = self._masks.get(key)
        if mask is None:
            mask = self._masks[key] = SecretMask(self.secrets)
        return released, mask.feed(text)

    def release(self, but: Hashable = None) -> list[tuple[Hashable, str]]:
        """What each field (but ``but``) holds, taken out of it: a beginning that did not complete."""
        return [(key, mask.flush()) for key, mask in self._masks.items() if key != but and mask.held]

    def feed_alone(self, key: Hashable, text: str) -> str | None:
        """``feed(key, text)``'s text when no other field holds anything (it would release
        nothing), else None with nothing changed."""
        mask = None
        for other, held in self._masks.items():
            if other == key:
                mask = held
            elif held.held:
                return None
        if mask is None:
            mask = self._masks[key] = SecretMask(self.secrets)
        return mask.feed(text)

    @property
    def masked(self) -> int:
        return sum(mask.masked for mask in self._masks.values())


__all__ = ["MASK", "FieldMasks", "SecretMask"]
