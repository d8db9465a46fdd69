"""Backend profiles: data about each backend's quirks, a registry, and auto-detection.

One module per backend (``vllm``, ``sglang``, ``trtllm``, ``llamacpp``, ``ollama``, ``openai``), each with
its quirks and references in the docstring and its profiles by version in a
:class:`~oaishim.profiles._family.Family`; ``generic`` is the safe fallback. The key scheme is described
in :mod:`oaishim.profiles._registry`; detection in :mod:`oaishim.profiles.detect`.
"""

from oaishim.profiles._base import Profile
from oaishim.profiles._family import Family
from oaishim.profiles._registry import FAMILIES, PROFILES, family_of, get_profile
from oaishim.profiles._version import version_key
from oaishim.profiles.detect import detect, probe_paths, resolve

__all__ = [
    "FAMILIES",
    "PROFILES",
    "Family",
    "Profile",
    "detect",
    "family_of",
    "get_profile",
    "probe_paths",
    "resolve",
    "version_key",
]
