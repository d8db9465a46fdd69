"""Named sets of official Chat Completions request fields, for the ``rejects`` of several profiles.

Every name here is a property of ``CreateChatCompletionRequest`` in the official OpenAPI spec
(``spec/openapi.yaml``, vendored from commit f85dbe22 of 2026-08-21, see ``spec/SOURCE.md``); the tests check that.

``PLATFORM_ONLY``: fields about services of the OpenAI platform itself (stored completions,
billing tier, prompt caching, moderation, built-in web search, audio output, predicted outputs,
verbosity of its reasoning models). No self-hosted server acts on them; strict servers
(TensorRT-LLM, vLLM before 0.6.5) answer 400 ``extra_forbidden`` for each.

``LEGACY_FUNCTIONS``: the deprecated ``functions`` / ``function_call`` pair (superseded by ``tools``
/ ``tool_choice``). The servers in the notes never implemented them; the strict ones reject them.
"""

from __future__ import annotations

PLATFORM_ONLY: frozenset[str] = frozenset(
    {
        "audio",
        "metadata",
        "modalities",
        "moderation",
        "prediction",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "safety_identifier",
        "service_tier",
        "store",
        "verbosity",
        "web_search_options",
    }
)

LEGACY_FUNCTIONS: frozenset[str] = frozenset({"function_call", "functions"})
