"""Detection: which profile fits a backend, from what it answered at startup. Pure; no I/O.

``--profile`` takes three kinds of name (:func:`probe_paths` says which paths each needs fetched,
:func:`resolve` picks the profile from the answers):
  * ``auto``: the backend and its version are detected (:func:`detect`);
  * a family, ``vllm``: only the version is detected, through that family's own version endpoint
    (:func:`detect_version`); when it cannot be told, the family's conservative profile is used, never
    its newest one: a newer profile trusts fixes (vLLM mapping ``developer`` to ``system``) that an older
    server lacks, and a client's message would be lost without an error;
  * a pinned key, ``vllm@0.32`` or ``generic``: no request at all.

The shell (``server/``) fetches the paths and hands the answers over as received:
  * the ``Server`` response header (of any answer, e.g. ``/v1/models``);
  * a version body: vLLM and TensorRT-LLM ``/version``, SGLang ``/get_server_info`` (or ``/version``),
    Ollama ``/api/version`` — all ``{"version": "..."}`` —, llama.cpp ``/props`` (``build_info``);
    auto-detection reads ``/version`` only, since it does not know the backend yet;
  * the ``/v1/models`` body.

Rules, in order (data in each backend module's :class:`~oaishim.profiles._family.Family`):
  1. the backend: the first family whose ``Server`` substring is in the header; else whose
     ``owned_by`` appears on a model card; else whose own keys appear in the models list or a card.
     A version body alone names no backend (vLLM, TensorRT-LLM and Ollama all answer
     ``{"version": ...}``).
  2. the version: the first of the family's version keys with a string value (or a bare string body),
     parsed by :func:`~oaishim.profiles._version.version_key`; the profile whose range holds it.
  3. a recognised backend without a readable version (or llama.cpp's ``b0-unknown``) gets the
     family's ``unknown_version`` profile; an unrecognised one gets ``generic``.
Malformed bodies are treated as absent, never raised on.

After the profile, the chat template (:func:`template_paths`, :func:`with_template`): where the
family's version answer holds the template the backend renders (``Family.template_key``) and it writes
calls in a format the gateway reads from text (``ToolChoiceSupport.text_calls``), the profile
gets ``calls_as_text`` (L-34). Under ``auto`` the version answer was not asked for, so it is fetched
then; a pinned key asks nothing and keeps its profile as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from oaishim.profiles._base import Profile
from oaishim.profiles._family import Family
from oaishim.profiles._registry import FAMILIES, family_of, get_profile
from oaishim.profiles._version import VersionKey, is_unknown, version_key
from oaishim.profiles.generic import GENERIC

AUTO_PATHS = ("/version", "/v1/models")
MODELS_PATH = "/v1/models"


def probe_paths(name: str) -> tuple[str, ...]:
    """The paths to GET before :func:`resolve` can choose the profile for ``--profile name``.

    Empty for a pinned key, and for a family with one profile: no answer could change the choice.
    """
    if name == "auto":
        return AUTO_PATHS
    family = family_of(name)
    if family is None or len(family.releases) == 1:
        return ()
    return (*family.version_paths, MODELS_PATH)


def resolve(name: str, server_header: str | None, answers: Mapping[str, Any]) -> tuple[Profile, str]:
    """The profile for ``--profile name`` and a one-line reason, from the answers to :func:`probe_paths`.

    ``answers`` maps each fetched path to its parsed body, ``None`` where it gave no usable answer.
    """
    models = answers.get(MODELS_PATH)
    if name == "auto":
        return detect(server_header, answers.get("/version"), models)
    family = family_of(name)
    if family is None:
        return get_profile(name), f"pinned by --profile {name}"
    if len(family.releases) == 1:
        return family.current, f"{family.name} has one profile: profile {_key_of(family, family.current)}"
    version_body = next((answers[p] for p in family.version_paths if answers.get(p) is not None), None)
    return detect_version(family, server_header, version_body, models)


def _template_family(profile: Profile) -> Family | None:
    """``profile``'s family, where its version answer holds a template and the profile has call patterns."""
    family = family_of(profile.name)
    if family is None or family.template_key is None or not profile.tool_choice.text_calls:
        return None
    return family


def template_paths(profile: Profile, answers: Mapping[str, Any]) -> tuple[str, ...]:
    """The paths still to GET before :func:`with_template` can read ``profile``'s backend's template."""
    family = _template_family(profile)
    if family is None or any(path in answers for path in family.version_paths):
        return ()
    return family.version_paths


def with_template(profile: Profile, reason: str, answers: Mapping[str, Any]) -> tuple[Profile, str]:
    """``profile`` with ``calls_as_text`` where the template in ``answers`` writes calls the gateway reads."""
    family = _template_family(profile)
    if family is None or family.template_key is None:
        return profile, reason
    for path in family.version_paths:
        body = answers.get(path)
        template = body.get(family.template_key) if isinstance(body, Mapping) else None
        if not isinstance(template, str):
            continue
        found = next((m for m in (re.search(p, template) for p in profile.tool_choice.text_calls) if m), None)
        if found is None:
            return profile, f"{reason}; its chat template writes calls the gateway does not read from text"
        tool_choice = replace(profile.tool_choice, calls_as_text=True)
        return replace(profile, tool_choice=tool_choice), (
            f"{reason}; its chat template writes calls as {found.group()!r}: streams under tool_choice auto are read as text"
        )
    return profile, reason


def detect_version(
    family: Family, server_header: str | None, version_body: Any | None, models_body: Any | None
) -> tuple[Profile, str]:
    """The profile of ``family`` (named by the user) for the version the backend reports.

    The backend is not identified, only checked: where its header or cards name another family, its
    version is that family's numbering, so it is not read and the conservative profile is used.
    """
    other, evidence = _identify(server_header, models_body)
    if other is not None and other is not family:
        profile = family.unknown_version
        return profile, (
            f"--profile {family.name}, but the backend looks like {other.name} ({evidence}); its version is "
            f"not read: profile {_key_of(family, profile)}"
        )
    return _by_version(family, version_body, f"--profile {family.name}")


def detect(server_header: str | None, version_body: Any | None, models_body: Any | None) -> tuple[Profile, str]:
    """The profile for a backend, and a one-line reason for the log."""
    family, evidence = _identify(server_header, models_body)
    if family is None:
        version = _version_text(version_body, ("version",))
        alone = f"; version {version!r} alone names no backend" if version else ""
        return GENERIC, f"unrecognised backend ({evidence}){alone}: profile generic"
    return _by_version(family, version_body, evidence)


def _by_version(family: Family, version_body: Any | None, evidence: str) -> tuple[Profile, str]:
    version = _version_text(version_body, family.version_keys)
    key = version_key(version) if version else None
    if key is None or is_unknown(key):
        profile = family.unknown_version
        why = _no_version(version, key)
        return profile, f"{family.name} ({evidence}), {why}: profile {_key_of(family, profile)}"
    profile = family.for_version(key)
    return profile, f"{family.name} {version} ({evidence}): profile {_key_of(family, profile)}"


def _identify(server_header: str | None, models_body: Any) -> tuple[Family | None, str]:
    header = server_header.strip() if isinstance(server_header, str) else ""
    for family in FAMILIES:
        mark = family.server_header
        if mark and mark.lower() in header.lower():
            return family, f"Server header {header!r}"
    cards = _cards(models_body)
    owners = {card["owned_by"] for card in cards if isinstance(card.get("owned_by"), str)}
    for family in FAMILIES:
        if owned := sorted(family.owned_by & owners):
            return family, f"/v1/models owned_by {owned[0]!r}"
    top_keys = set(models_body) if isinstance(models_body, Mapping) else set()
    card_keys = {key for card in cards for key in card}
    for family in FAMILIES:
        if listed := sorted(family.list_keys & top_keys):
            return family, f"/v1/models has a top-level {listed[0]!r}"
        if carded := sorted(family.card_keys & card_keys):
            return family, f"/v1/models cards have {carded[0]!r}"
    seen = f"Server header {header!r}" if header else "no Server header"
    owners_text = f"owned_by {sorted(owners)!r}" if owners else "no owned_by"
    return None, f"{seen}, {owners_text}"


def _cards(models_body: Any) -> list[Mapping[str, Any]]:
    data = models_body.get("data") if isinstance(models_body, Mapping) else None
    if not isinstance(data, list):
        return []
    return [card for card in data if isinstance(card, Mapping)]


def _version_text(body: Any, keys: tuple[str, ...]) -> str | None:
    if isinstance(body, str):
        return body.strip() or None
    if isinstance(body, Mapping):
        for key in keys:
            value = body.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return None


def _no_version(version: str | None, key: VersionKey | None) -> str:
    if version is None:
        return "version unknown"
    if key is None:
        return f"version {version!r} unreadable"
    return f"version {version!r} names no release"


def _key_of(family: Family, profile: Profile) -> str:
    return next(f"{family.name}@{first}" for first, p in family.releases if p is profile)
