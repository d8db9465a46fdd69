"""A backend family: its profiles by version, and what identifies it on the wire.

Each backend module (``vllm.py``, ``llamacpp.py``, ...) ends with one :class:`Family`. The registry
and :func:`oaishim.profiles.detect.detect` read only these tables; neither names a backend.

Rules:
  * ``releases`` is ordered oldest first; each entry is ``(first version, profile)`` and the profile
    holds from that version up to (not including) the next entry's. The first entry's version is
    ``"0"``: the oldest profile also covers every version older than anything the notes describe.
  * ``unknown_version`` is the profile used when the backend is recognised (or named by
    ``--profile <family>``) but its version is not (no version endpoint answered, or llama.cpp's
    ``b0-unknown``). It is the family's conservative profile: it repairs whatever any version in use
    needs repaired where a repair is harmless on the others (``developer`` merged into the system
    message, ``include_usage`` sent explicitly), not necessarily the oldest profile.
  * ``version_paths`` are what the gateway GETs to learn the version for ``--profile <family>``,
    first answer wins; ``version_keys`` name the field of that answer that holds it.
  * ``template_key`` names the field of a version answer that holds the chat template the backend
    renders (llama.cpp's ``/props``): detection reads from it whether the gateway can read the calls
    the template writes (``ToolChoiceSupport.text_calls``).
  * Identification signals are backend-written constants: the ``owned_by`` of ``/v1/models`` cards,
    keys only this backend adds to the models list or to a card, and the ``Server`` header substring
    kept on the profiles (:attr:`Profile.server_header`).
"""

from __future__ import annotations

from dataclasses import dataclass

from oaishim.profiles._base import Profile
from oaishim.profiles._version import VersionKey, version_key


@dataclass(frozen=True, slots=True)
class Family:
    """One backend: its profiles by first version, and the signals that identify it."""

    name: str
    releases: tuple[tuple[str, Profile], ...]
    unknown_version: Profile
    owned_by: frozenset[str] = frozenset()
    list_keys: frozenset[str] = frozenset()
    card_keys: frozenset[str] = frozenset()
    version_keys: tuple[str, ...] = ("version",)
    version_paths: tuple[str, ...] = ("/version",)
    template_key: str | None = None

    @property
    def current(self) -> Profile:
        """The profile of the newest version the notes describe."""
        return self.releases[-1][1]

    @property
    def server_header(self) -> str | None:
        """The ``Server`` header substring that identifies this backend, if it sends one."""
        return self.current.server_header

    def for_version(self, key: VersionKey) -> Profile:
        """The profile whose range holds ``key``."""
        chosen = self.releases[0][1]
        for first, profile in self.releases:
            first_key = version_key(first)
            if first_key is not None and first_key <= key:
                chosen = profile
        return chosen

    def range_of(self, profile: Profile) -> str:
        """The version range ``profile`` covers, as ``>=A,<B`` (``any`` for a single-profile family)."""
        firsts = [first for first, p in self.releases]
        index = next(i for i, (_, p) in enumerate(self.releases) if p is profile)
        low = "" if index == 0 else f">={firsts[index]}"
        high = "" if index == len(firsts) - 1 else f"<{firsts[index + 1]}"
        return ",".join(part for part in (low, high) if part) or "any"
