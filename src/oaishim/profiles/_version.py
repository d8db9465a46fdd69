"""Version strings as comparable tuples, for picking a backend's profile by the version it reports.

Backends report versions in several styles: ``0.32.0`` (vLLM ``/version``), ``1.3.0rc6`` (TensorRT-LLM),
``0.6.4.post1+cu124``, ``v0.12.6``, and llama.cpp build numbers ``b9174`` (``/props`` ``build_info``
``b9174-1a2b3c4``; ``system_fingerprint`` ``b0-unknown`` from builds that do not know their number).

:func:`version_key` turns one into a fixed-length tuple: four release numbers (missing ones are 0, extra
ones are cut), then a pre/post-release rank and number, so ``1.3.0rc6 < 1.3.0 < 1.3.0.post1 < 1.3.1``.
A llama.cpp build ``bN`` becomes the release ``N``. Anything after the version (``+local``, ``-hash``)
is ignored. A string that does not start with a version gives ``None``. No dependency on ``packaging``.
"""

from __future__ import annotations

import re

VersionKey = tuple[int, int, int, int, int, int]

_PATTERN = re.compile(
    r"\s*[vb]?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[.-]?(?P<tag>dev|alpha|beta|a|b|rc|c|pre|post)\.?(?P<num>\d*))?",
    re.IGNORECASE,
)
_RANK = {"dev": 0, "a": 1, "alpha": 1, "b": 2, "beta": 2, "rc": 3, "c": 3, "pre": 3, "post": 5}
_FINAL = 4


def version_key(text: str) -> VersionKey | None:
    """``text``'s version as a comparable tuple, or ``None`` when it does not start with one."""
    match = _PATTERN.match(text)
    if match is None:
        return None
    parts = [int(p) for p in match["release"].split(".")[:4]]
    parts += [0] * (4 - len(parts))
    tag = (match["tag"] or "").lower()
    rank = _RANK.get(tag, _FINAL)
    num = int(match["num"]) if match["num"] else 0
    return (parts[0], parts[1], parts[2], parts[3], rank, num)


def is_unknown(key: VersionKey) -> bool:
    """A release of all zeros (llama.cpp's ``b0-unknown``): the backend does not know its version."""
    return key[:4] == (0, 0, 0, 0)
