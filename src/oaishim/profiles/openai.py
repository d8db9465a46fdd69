"""The official OpenAI API itself: the profile that rewrites nothing.

It is the reference the other profiles are measured against (``docs/backend-quirks.md`` §0.1,
``docs/wire-format.md``), useful for running the gateway, the probe or the checker
against ``api.openai.com`` or a faithful proxy of it.

Every request field is passed on as the client sent it:
  * ``developer`` is a first-class role → no merging.
  * ``max_tokens_in = "both"``: o-series and gpt-5 models reject ``max_tokens`` and want
    ``max_completion_tokens``, so the gateway must not rename either.
  * ``rejects`` is empty; unknown top-level fields get OpenAI's own 400 "Unrecognized request argument"
    (§0.1), which is the official behaviour to pass through.
  * ``stream_options: {}`` does not turn usage on; tool calls in history already carry ``type``.
  * ``reasoning_in = "drop"``: Chat Completions has no reasoning field on messages (§0.1, "Reasoning text
    is not part of the official Chat Completions schema"), so reasoning a client kept from another
    backend is not sent.
Response side: no ``<think>`` repair (``splits_reasoning = True``: there are no tags to split) and no
reasoning field to read (``reasoning_out = ()``).

Detection: ``/v1/models`` cards ``owned_by`` ``"openai"``, ``"system"`` or ``"openai-internal"``;
``Server: cloudflare`` (not distinctive); no version endpoint.
"""

from __future__ import annotations

from oaishim.profiles._base import Profile
from oaishim.profiles._family import Family

OPENAI = Profile(
    name="openai",
    version="any",
    doc="The official OpenAI API: the reference format; nothing is renamed, merged or dropped except history reasoning.",
    developer_to_system=False,
    reasoning_in="drop",
    max_tokens_in="both",
    usage_on_empty_stream_options=False,
    tool_call_type_required=False,
    splits_reasoning=True,
    reasoning_out=(),
)

FAMILY = Family(
    name="openai",
    releases=(("0", OPENAI),),
    unknown_version=OPENAI,
    owned_by=frozenset({"openai", "system", "openai-internal"}),
)
