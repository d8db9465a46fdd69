"""The common streamed chunk, rewritten with one parse and one serialisation.

Nearly every event of a stream is one token of content for a choice that is already open: one
choice, a delta holding only ``content`` (other keys null), no finish, no usage. For it the stream
normaliser's general rules (``transform.stream``) come to one output chunk whose only variable part
is the text, so :class:`FastChunks` writes the official bytes directly: the envelope up to the
text rendered once per stream and choice, then the text as JSON, then the fixed end. It is taken
only when the general path would give exactly these bytes and change no other state (the text
repair lets the text through untouched, see ``TextRepair.passes``; the secret masks change as the
general path would change them, see ``FieldMasks.feed_alone``); anything else returns None and goes
the general way. tests/transform/test_fastchunk.py holds both paths to byte-identical output.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

import orjson

from oaishim.transform.stream import StreamNormalizer

_DUMPS: Final = orjson.dumps
# vLLM's token chunk, whole (fullmatch: no other key, no duplicate, valid JSON numbers, nothing
# after): a content string without escapes, quotes or control characters is then its value as
# written, so the event needs no parse; orjson writes such a string back as the same characters.
_STR = r'"[^"\\\x00-\x1f]*"'
_VLLM_TOKEN = re.compile(
    r'\{"id":'
    + _STR
    + r',"object":"chat\.completion\.chunk","created":(?:0|[1-9][0-9]{0,17}),"model":'
    + _STR
    + r',"choices":\[\{"index":(0|[1-9][0-9]{0,8}),"delta":\{"content":"([^"\\\x00-\x1f]+)"\},'
    r'"logprobs":null,"finish_reason":null(?:,"token_ids":null)?\}\]\}'
)
# What follows such a token's text: the pattern's two endings. Within one stream every token event
# begins with the same characters up to the text (the id, created and model do not change), so once
# the pattern has matched one, the next is checked against that beginning and these ends with two
# comparisons instead of the pattern (6.6k instructions an event, compiled, against ~1k).
_END_PLAIN: Final = '"},"logprobs":null,"finish_reason":null}]}'
_END_IDS: Final = '"},"logprobs":null,"finish_reason":null,"token_ids":null}]}'


# Another encoder's bytes for one content token: the client's choice index and the text (the
# Responses encoder's ``text_token``), where the chat chunk is not what the client reads.
TextWriter = Callable[[int, str], bytes]


class FastChunks:
    """For one stream's normaliser: the official chat SSE chunk, or with ``write`` another
    encoder's bytes for the same token (``TextWriter``)."""

    __slots__ = ("_heads", "_index", "_start", "_tail", "_write", "normalizer", "usable")

    def __init__(self, normalizer: StreamNormalizer, write: TextWriter | None = None) -> None:
        ctx = normalizer.ctx
        self.normalizer = normalizer
        self._write = write
        # (where a refused parse may end the stream, each chunk's token counts are read: the general rules)
        self.usable = ctx.chat and not ctx.logprobs and not ctx.keep_extensions and ctx.unparsed_call is None
        self._heads: dict[int, bytes] = {}  # by output index: the bytes up to the content text
        # the chat spec: usage null on every chunk but the last, when the client asked for usage
        usage = b',"usage":null' if ctx.include_usage else b""
        self._tail = b'},"logprobs":null,"finish_reason":null}]' + usage + b"}\n\n"
        # the last event the pattern matched: its characters up to the text, and its choice's index
        self._start = ""
        self._index = 0

    def event(self, data: str) -> bytes | None:
        """The client's bytes for one upstream event's data, or None: not the common shape."""
        norm = self.normalizer
        if data[:1] != "{" or norm.ended or norm.done or norm.stop_seen:
            return None
        start = self._start
        if start and data.startswith(start):
            known = _text_before_end(data, len(start))  # (not "text": compiled, a name keeps one type)
            if known is not None:
                return self._token(self._index, known)
        token = _VLLM_TOKEN.fullmatch(data)
        if token is not None:
            self._start, self._index = data[: token.start(2)], int(token[1])
            return self._token(self._index, token[2])
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None  # the general path gives the error
        choices = chunk.get("choices")
        if type(choices) is not list or len(choices) != 1 or chunk.get("usage") is not None:
            return None
        choice = choices[0]
        if type(choice) is not dict or choice.get("finish_reason") is not None:
            return None
        index = choice.get("index")
        delta = choice.get("delta")
        if type(index) is not int or type(delta) is not dict:
            return None
        text = delta.get("content")
        if type(text) is not str or not text:
            return None
        if len(delta) > 1 and any(v is not None for k, v in delta.items() if k != "content"):
            return None  # reasoning, a refusal or tool calls beside the text: the general rules
        return self._token(index, text)

    def _token(self, index: int, text: str) -> bytes | None:
        """One content token for upstream choice ``index``, or None if the general rules must see it."""
        norm = self.normalizer
        state = norm.choices.get(index)
        if state is None or state.state != "open" or state.fmt is not None:
            return None  # (a response_format's check reads every piece of content: the general rules)
        repair = state.repair
        if repair is not None and repair.passes(text) != "content":
            return None
        if state.masks is not None:  # the gateway's secrets masked, as the general rules would
            masked = state.masks.feed_alone("content", text)
            if masked is None:
                return None  # another field holds the beginning of a secret: it goes out first
            if not masked:
                return b""  # all of it may begin a secret: held for the next token
            text = masked
        if self._write is not None:
            return self._write(state.index, text)
        head = self._heads.get(state.index)
        if head is None:
            ctx = norm.ctx
            head = self._heads[state.index] = (
                b'data: {"id":%s,"object":"chat.completion.chunk","created":%s,"model":%s,"choices":[{"index":%d,'
                b'"delta":{"content":' % (_DUMPS(ctx.response_id), _DUMPS(ctx.created), _DUMPS(ctx.model), state.index)
            )
        return head + _DUMPS(text) + self._tail


def _text_before_end(data: str, start: int) -> str | None:
    """The token's text in ``data`` from ``start`` (where a matched event's text began) when one of
    the pattern's ends follows it and it is a string the pattern takes; None: the pattern decides.
    A text without a quote is the whole string (its closing quote is the end's first character);
    ``isprintable`` is stricter than the pattern (no control character, nor a separator but the
    space): what it refuses goes the pattern's way."""
    # the two ends by name: a loop over a tuple of them is a generic iteration, once compiled
    if data.endswith(_END_PLAIN):
        text = data[start : len(data) - len(_END_PLAIN)]
    elif data.endswith(_END_IDS):
        text = data[start : len(data) - len(_END_IDS)]
    else:
        return None
    if text and text.isprintable() and '"' not in text and "\\" not in text:
        return text
    return None
