"""The profile registry: every backend family, and lookup by name.

Key scheme (the names a user gives with ``--profile`` and the logs show):
  * ``<family>`` — ``vllm``, ``sglang``, ``trtllm``, ``llamacpp``, ``ollama``, ``openai``: the gateway
    detects the version and uses the profile of its range (:func:`oaishim.profiles.detect.resolve`);
    in this table, and whenever the version cannot be told, it is the family's conservative profile
    (:attr:`Family.unknown_version`), never the newest: a newer profile leaves to the backend repairs
    an older one needs. Plus ``generic``, the fallback for a backend of no known family.
  * ``<family>@<first version>`` — one key per profile, named by the first version it holds for; it
    holds up to the next key's version. The oldest is ``@0`` and covers everything before the next:
    ``vllm@0`` (< 0.6.5), ``vllm@0.6.5`` (0.6.5 to < 0.32), ``vllm@0.32``; ``trtllm@0``, ``trtllm@1.4``;
    ``llamacpp@0``, ``llamacpp@b9174`` (llama.cpp build numbers); ``sglang@0``, ``ollama@0``,
    ``openai@0``.
  * :func:`get_profile` also takes ``<family>@<any version>`` and returns the profile whose range
    holds it: ``vllm@0.10.2`` → ``vllm@0.6.5``, ``trtllm@1.3.0rc6`` → ``trtllm@0``.
Versions compare as in :mod:`oaishim.profiles._version` (``1.3.0rc6 < 1.3.0``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from oaishim.profiles import llamacpp, ollama, openai, sglang, trtllm, vllm
from oaishim.profiles._base import Profile
from oaishim.profiles._family import Family
from oaishim.profiles._version import version_key
from oaishim.profiles.generic import GENERIC

FAMILIES: tuple[Family, ...] = (
    vllm.FAMILY,
    sglang.FAMILY,
    trtllm.FAMILY,
    llamacpp.FAMILY,
    ollama.FAMILY,
    openai.FAMILY,
)
_BY_NAME: Mapping[str, Family] = MappingProxyType({family.name: family for family in FAMILIES})


def _build() -> dict[str, Profile]:
    table: dict[str, Profile] = {}
    for family in FAMILIES:
        table[family.name] = family.unknown_version
        for first, profile in family.releases:
            table[f"{family.name}@{first}"] = profile
    table[GENERIC.name] = GENERIC
    return table


PROFILES: Mapping[str, Profile] = MappingProxyType(_build())


def family_of(name: str) -> Family | None:
    """The family called ``name`` (``vllm``, ...), or ``None``."""
    return _BY_NAME.get(name)


def get_profile(name: str) -> Profile:
    """The profile called ``name``: a registry key, or ``<family>@<version>`` resolved by range."""
    if name in PROFILES:
        return PROFILES[name]
    family_name, _, version = name.partition("@")
    family = _BY_NAME.get(family_name)
    key = version_key(version) if version else None
    if family is not None and key is not None:
        return family.for_version(key)
    known = ", ".join(PROFILES)
    raise KeyError(
        f"unknown profile {name!r}; known profiles: {known}; "
        f"or <family>@<version> for a family in: {', '.join(_BY_NAME)}"
    )
