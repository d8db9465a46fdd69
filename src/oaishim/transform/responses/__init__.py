"""The Responses API (``/v1/responses``) generated from a backend's Chat Completions: the pure core.

* ``request``: a Responses request -> the chat request, plus :class:`ResponsesRequestInfo`;
* ``stream``: official chat chunks -> Responses events (:class:`ResponsesStreamEncoder`);
* ``plain``: a chat completion body -> the ``Response`` object;
* ``items``: the output items both build; ``listing``: the input items list endpoint;
* ``references``: ``item_reference`` inputs replaced by the stored items they name;
* ``_seal``: ``encrypted_content`` that only this server can have written.

No I/O here: the server owns the sockets, the state store owns earlier responses.
"""

from oaishim.transform.responses._info import (
    ResponsesRequestInfo,
    item_ids,
    new_id,
    response_object,
    responses_usage,
)
from oaishim.transform.responses._seal import open_reasoning, seal_reasoning
from oaishim.transform.responses.listing import page
from oaishim.transform.responses.plain import chat_to_response
from oaishim.transform.responses.references import referenced_responses, replace_references
from oaishim.transform.responses.request import responses_to_chat
from oaishim.transform.responses.stream import ResponsesStreamEncoder, frame

__all__ = [
    "ResponsesRequestInfo",
    "ResponsesStreamEncoder",
    "chat_to_response",
    "frame",
    "item_ids",
    "new_id",
    "open_reasoning",
    "page",
    "referenced_responses",
    "replace_references",
    "response_object",
    "responses_to_chat",
    "responses_usage",
    "seal_reasoning",
]
