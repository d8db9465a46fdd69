"""The checker: one exchange in, findings out. Pure: no I/O, no clock.

Order of work for a stream: framing (event:/id: fields, [DONE]), then each chunk (JSON, schema,
unknown keys, stream order, logprobs), then the accumulated result as a client would hold it
(message rules, request-aware rules, end of turn). A plain body goes straight to the last two. A Responses API exchange (``/v1/responses``) has a
grammar of its own: see ``_resp_check``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from oaishim.check import _eot, _errors, _logprobs, _message, _request, _resp_check, _schema, _shapes
from oaishim.check._findings import Sink, jpath
from oaishim.check._model import CheckOptions, Endpoint, Exchange, Finding
from oaishim.check._stream import StreamRules, check_id_prefix
from oaishim.wire.accumulate import accumulate_chat, accumulate_completion
from oaishim.wire.sse import SSEEvent, is_done

_KINDS: Final[dict[Endpoint, tuple[str, str]]] = {
    "chat": ("chat.completion", "chat.completion.chunk"),
    "completions": ("text_completion", "text_completion.chunk"),
    "embeddings": ("embeddings", "embeddings"),
    "models": ("models", "models"),
    "error": ("error", "error"),
    "responses": ("response", "response.event"),
}


def infer_endpoint(request: Mapping[str, Any] | None, sample: Any, path: str | None = None) -> Endpoint:
    """Which endpoint an exchange belongs to, from the response's ``object``, else the path or the request."""
    if _errors.is_error_body(sample):
        return "error"
    if isinstance(sample, dict):
        obj = sample.get("object")
        if obj == "response":
            return "responses"
        if isinstance(obj, str) and obj.startswith("chat.completion"):
            return "chat"
        if obj == "text_completion":
            return "completions"
        if obj == "list":
            data = sample.get("data")
            first = data[0] if isinstance(data, list) and data else None
            if isinstance(first, dict) and first.get("object") == "embedding":
                return "embeddings"
            return "models"
    if _resp_check.is_responses_path(path) or _resp_check.is_responses_request(request):
        return "responses"
    if request is not None:
        if "messages" in request:
            return "chat"
        if "prompt" in request:
            return "completions"
        if "input" in request:
            return "embeddings"
    return "chat"


def check(exchange: Exchange, options: CheckOptions | None = None) -> list[Finding]:
    """Check one exchange against the official API. See the rule catalogue in ``_rules``."""
    opts = options or CheckOptions()
    sink = Sink()
    if exchange.events is not None:
        _check_stream(exchange, opts, sink)
    else:
        _check_body(exchange, opts, sink)
    return sink.result()


def _validate(kind: str, instance: Any, opts: CheckOptions, sink: Sink, chunk: int | None = None) -> None:
    _shapes.MEMO.validate_def(
        _schema.root_name(kind),
        instance,
        sink,
        chunk=chunk,
        extensions_as_notes=opts.extensions_as_notes,
        intended=opts.intended_fields,
    )


def _check_body(ex: Exchange, opts: CheckOptions, sink: Sink) -> None:
    body = ex.body
    if isinstance(body, (str, bytes)):
        sink.add("json", "$", "the body is not JSON")
        if ex.status is not None and ex.status >= 400:
            sink.add("error.shape", "$", "an error answered with a non-JSON body")
        return
    endpoint = ex.endpoint or infer_endpoint(ex.request, body, ex.path)
    if endpoint == "error" or (ex.status or 0) >= 400 or _errors.is_error_body(body):
        _errors.check_error_body(body, ex.status, sink)
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            _validate("error", body, opts, sink)
        return
    if ex.request is not None and ex.request.get("stream") is True and endpoint in ("chat", "completions", "responses"):
        sink.add("request.stream", "$", "the request asked for a stream; a plain body came back")
    if endpoint == "responses":
        _resp_check.check_body(body, opts, sink)
        return
    kind = _KINDS[endpoint][0]
    _validate(kind, body, opts, sink)
    if not isinstance(body, dict) or endpoint not in ("chat", "completions"):
        return
    check_id_prefix(body, endpoint == "chat", sink)
    _final_rules(body, ex.request, opts, sink, chat=endpoint == "chat", streamed=False)
    for i, choice in enumerate(body.get("choices") or []):
        if isinstance(choice, dict):
            _logprobs.check_choice_logprobs(choice, i, ex.request, sink, chat=endpoint == "chat")


def _final_rules(
    result: Mapping[str, Any],
    request: Mapping[str, Any] | None,
    opts: CheckOptions,
    sink: Sink,
    *,
    chat: bool,
    streamed: bool,
) -> None:
    if chat:
        _message.check_chat_choices(result, request, sink, check_ids=not streamed)
    if request is not None:
        _request.check_against_request(result, request, sink, chat=chat)
    for choice in result.get("choices") or []:
        if not isinstance(choice, dict) or not isinstance(choice.get("index"), int):
            continue
        message = choice.get("message")
        text = message.get("content") if chat and isinstance(message, dict) else choice.get("text")
        _eot.check_final_text(
            text if isinstance(text, str) else None,
            choice.get("finish_reason"),
            choice["index"],
            request,
            opts,
            sink,
        )


def _ends_with_error(events: list[SSEEvent]) -> bool:
    """An error event is a terminal signal of its own: the SDK raises on it and reads no further."""
    for event in reversed(events):
        if event.data.strip():
            try:
                return _errors.is_error_body(orjson.loads(event.data))
            except orjson.JSONDecodeError:
                return False
    return False


def _include_usage(request: Mapping[str, Any] | None) -> bool | None:
    if request is None:
        return None
    options = request.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _is_responses(ex: Exchange, events: list[SSEEvent]) -> bool:
    if ex.endpoint is not None:
        return ex.endpoint == "responses"
    if _resp_check.is_responses_path(ex.path) or _resp_check.is_responses_stream(events):
        return True
    return ex.request is not None and "input" in ex.request  # embeddings never stream


def _check_stream(ex: Exchange, opts: CheckOptions, sink: Sink) -> None:
    events = list(ex.events or ())
    content_type = ex.headers.get("content-type") or ex.headers.get("Content-Type")
    if content_type is not None and not content_type.startswith("text/event-stream"):
        sink.add("stream.content-type", "$", f"a stream served as {content_type!r}")
    if ex.request is not None and ex.request.get("stream") is not True:
        sink.add("request.stream", "$", "a stream came back although the request did not ask for one")
    for name, value in ex.unknown_fields:
        sink.add(
            "stream.framing", "$", f"an SSE {name}: line ({value[:60]!r}); clients ignore it, so what it says is lost"
        )
    if ex.incomplete_tail:
        sink.add("stream.framing", "$", "the stream ends in the middle of an event (no closing blank line)")
    if _is_responses(ex, events):
        _resp_check.check_stream(events, opts, sink)
        return
    done_at = next((n for n, e in enumerate(events) if is_done(e)), None)
    if done_at is None:
        if not _ends_with_error(events):
            sink.add("stream.done", "$", "the stream does not end with data: [DONE]")
    elif done_at != len(events) - 1:
        sink.add("stream.done", "$", f"{len(events) - 1 - done_at} event(s) after data: [DONE]", chunk=done_at + 1)
    chunks: list[tuple[int, dict[str, Any]]] = []
    errored = False
    for n, event in enumerate(events[:done_at]):
        if event.event or event.id is not None:
            field = "event" if event.event else "id"
            sink.add(
                "stream.framing",
                "$",
                f"an SSE {field}: field; the official API sends data: lines only",
                chunk=n,
            )
        try:
            data = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            sink.add("json", "$", f"event data is not JSON: {event.data[:60]!r}", chunk=n)
            continue
        if _errors.is_error_body(data):
            sink.add("stream.error-event", "$.error", "an error event ends the stream", chunk=n)
            errored = True
            _errors.check_error_body(data, None, sink, chunk=n)
            _validate("error", data, opts, sink, chunk=n)
            continue
        chunks.append((n, data))
    if not chunks:
        return
    endpoint = ex.endpoint or infer_endpoint(ex.request, chunks[0][1], ex.path)
    chat = endpoint != "completions"
    kind = _KINDS["chat" if chat else "completions"][1]
    rules = StreamRules(sink, chat, _include_usage(ex.request))
    pieces: dict[int, list[tuple[int, str, str]]] = {}
    for n, chunk in chunks:
        _validate(kind, chunk, opts, sink, chunk=n)
        if not isinstance(chunk, dict):
            continue
        rules.feed(n, chunk)
        for i, choice in enumerate(chunk.get("choices") or []):
            if not isinstance(choice, dict):
                continue
            _logprobs.check_choice_logprobs(choice, i, ex.request, sink, chat=chat, chunk=n)
            delta = choice.get("delta") if chat else choice
            text = delta.get("content" if chat else "text") if isinstance(delta, dict) else None
            if isinstance(text, str) and text and isinstance(choice.get("index"), int):
                pieces.setdefault(choice["index"], []).append((n, jpath("choices", i), text))
    rules.finish(errored=errored)
    for index, parts in pieces.items():
        _eot.check_split_tokens(parts, index, opts, sink)
    dicts = [c for _, c in chunks if isinstance(c, dict)]
    try:
        result = accumulate_chat(dicts) if chat else accumulate_completion(dicts)
    except ValueError:
        return  # no chunk of this endpoint at all (rules a and c said why): no final message to judge
    _final_rules(result, ex.request, opts, sink, chat=chat, streamed=True)
