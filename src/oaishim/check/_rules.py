"""The rule catalogue: every finding the checker can report, by id.

Ids are stable (captures, probe baselines and CI gates refer to them). A rule's default severity is
what the official API's behaviour implies: something a client can break on is an ``error``; a
difference a client can only notice (an extra field the SDK ignores, an odd id prefix) is a
``warning``; information is a ``note``.

Specific rules *supersede* generic ones: when a specific rule fires at a JSON path, ``schema`` and
``unknown-field`` findings at or below that path in the same chunk are folded into it, so one
mistake gives one finding.
"""

from __future__ import annotations

from typing import Final, Literal

Severity = Literal["error", "warning", "note"]

RULES: Final[dict[str, tuple[Severity, str]]] = {
    # a. the official schema
    "schema": ("error", "body or chunk does not validate against the official OpenAPI schema"),
    "json": ("error", "body or SSE data is not valid JSON"),
    # b. keys the spec does not define
    "unknown-field": ("error", "a key the official schema does not define"),
    # c. stream rules
    "stream.framing": (
        "error",
        "SSE framing differs from the official API (event:/id: fields, incomplete event)",
    ),
    "stream.content-type": ("warning", "a stream not served as text/event-stream"),
    "stream.id": ("error", "chunk id differs from the first chunk's id"),
    "stream.created": ("error", "chunk created differs from the first chunk's created"),
    "stream.object": ("error", "chunk object is not chat.completion.chunk / text_completion"),
    "stream.choice-count": ("warning", "a chunk carries more than one choice"),
    "stream.choice-index": ("error", "choice indices do not start at 0 or appear out of order / with gaps"),
    "stream.first-delta": ("error", "first chunk of a choice is not the official role chunk"),
    "stream.role-repeat": ("error", "role sent again after the first chunk of a choice"),
    "stream.finish-once": ("error", "finish_reason not sent exactly once for a choice"),
    "stream.finish-delta": ("error", "the finish_reason chunk carries a non-empty delta"),
    "stream.after-finish": ("error", "a chunk for a choice after its finish_reason"),
    "stream.usage": ("error", "usage chunk missing, unrequested, not last, or with choices"),
    "stream.done": ("error", "the stream does not end with data: [DONE] (or has events after it)"),
    "stream.tool-call-delta": ("error", "a tool-call delta in the wrong shape for its position"),
    "stream.error-event": ("warning", "an error delivered inside the stream (the official way to fail a stream)"),
    "tool-call.id": ("error", "a tool-call id is empty or repeated within the response"),
    "id.prefix": ("warning", "an id without the official prefix (chatcmpl-, cmpl-, call_)"),
    "tool-call.index": ("error", "tool-call indices are not 0-based and contiguous"),
    # d. message rules
    "message.tool-calls-empty": ("error", "tool_calls is [] or null instead of absent"),
    "message.content-null": ("error", "content is not null in a message holding only tool calls"),
    "message.finish-reason": ("error", "finish_reason does not match the tool calls made"),
    "logprobs.shape": ("error", "logprobs in the other endpoint's shape"),
    "logprobs.top-n": ("error", "top_logprobs longer (or missing) compared with what was requested"),
    "logprobs.unrequested": ("warning", "logprobs sent although the request did not ask for them"),
    # e. request-aware rules
    "request.max-tokens": ("error", "more completion tokens than max_tokens / max_completion_tokens allowed"),
    "request.n": ("error", "number of choices differs from n"),
    "request.stop": ("error", "a stop string appears in the text"),
    "request.stream": ("error", "a stream answered with a plain body, or the reverse"),
    "error.shape": ("error", 'error body is not {"error": {"message", "type", "param", "code"}}'),
    "error.status": ("error", "HTTP status does not fit the body or the error type"),
    # f. end of turn (never lost, never cut: see _eot.py)
    "eot.split-token": ("error", "a special token cut across two chunks"),
    "eot.stripped": ("error", "special tokens asked to be kept were removed or damaged"),
    "eot.truncated": ("error", "a stream ended with finish_reason stop but its text ends mid-tag"),
    # g. the Responses API (/v1/responses)
    "responses.framing": ("error", "an event without its event: line, or one that names another type than its data"),
    "responses.done-sentinel": ("error", "data: [DONE] in a Responses stream (the API never sends it)"),
    "responses.sequence": ("error", "sequence_number does not start at 0 and rise by exactly 1"),
    "responses.lifecycle": ("error", "the stream does not open with response.created then response.in_progress"),
    "responses.terminal": ("error", "not exactly one terminal event (completed/incomplete/failed), or not last"),
    "responses.concatenated": ("warning", "several complete responses back to back in one body"),
    "responses.item-open": ("error", "an event names an item or part that is not open (or not at its index)"),
    "responses.item-close": ("error", "an item or part not closed by its done events before the next opens or the end"),
    "responses.output-index": ("error", "output_index is not the item's position in the output"),
    "responses.done-text": ("error", "a done event's text or arguments differ from the deltas joined"),
    "responses.id": ("error", "the response or item id changes between the events that carry it"),
    "responses.output-mismatch": ("error", "the terminal event's output differs from the output_item.done items"),
    "responses.id-prefix": ("warning", "an id without the official prefix (resp_, msg_, rs_, fc_, call_)"),
    "responses.call-id": ("error", "a function call's call_id missing, equal to its item id, or repeated"),
    "responses.usage": ("error", "usage sent before the terminal event, or missing from a finished response"),
    "responses.status": ("error", "a status that does not fit its event, error or incomplete_details"),
    "responses.error-event": ("error", "an error event not followed by response.failed"),
}

GENERIC_RULES: Final = frozenset({"schema", "unknown-field"})


def default_severity(rule: str) -> Severity:
    return RULES[rule][0]
