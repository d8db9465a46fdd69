"""The stream normaliser: any backend's chat or legacy completion stream in, the official one out.

Each upstream SSE event is rewritten and handed back at once as official chunk dicts (nothing is
buffered here; text repair, when a profile needs it, sits in front and holds back only what a tag
needs); an encoder (``transform.encode``) writes them, and ``transform.pipe`` joins the two. The output
follows the official order (docs/wire-format.md §3): one ``id``, ``created`` and ``model`` on
every chunk; per choice a role chunk first, then deltas, then ``finish_reason`` in its own chunk
with ``delta: {}``; a usage chunk with ``choices: []`` only when the client asked; ``[DONE]``.

The upstream's ``finish_reason`` is held until the stream really ends (its ``[DONE]``, the end of
the body, or a stop at the gateway): a backend may send text after its finish chunk (issue 19), and
that text goes to the client before the finish, which stays last. A choice the gateway itself ends
(a stop string, an end-of-turn token) finishes at once; nothing of it is read after that.

A stream that ends without its finish (a backend killed mid-stream, a TRT-LLM stream that just
stops) fails instead (``ended`` with an ``error``; the chat encoder writes one ``data: {"error": …}``
event), so the official SDKs raise rather than return a silently truncated answer. So does a chunk
the gateway cannot read (a field with the wrong JSON type) and any fault of the gateway's own while
rewriting: it is logged with the response id, and the client gets one error event and the end, never
a cut connection.

State is one :class:`_Choice` per upstream choice index. States: ``waiting`` (nothing sent yet),
``open`` (role chunk sent), ``finished`` (finish chunk sent); ``held`` is the upstream's finish
while it waits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Final, cast

import orjson

from oaishim.transform import _parts, output_format
from oaishim.transform.context import ResponseContext
from oaishim.transform.ids import call_id
from oaishim.transform.pieces import CallStart, Piece, Text, merge
from oaishim.transform.repair import TextRepair
from oaishim.transform.secrets import FieldMasks
from oaishim.transform.upstream_errors import is_error_body, normalize_upstream_error
from oaishim.wire.errors import OpenAIError, internal_error, upstream_error

Chunk = dict[str, Any]  # one normalised official chunk, for an encoder (transform.encode) to write
log: Final = logging.getLogger("oaishim.stream")


# _Call and _Choice have their own __init__: the one dataclasses generates is interpreted, compiled or not.
@dataclass(slots=True, init=False)
class _Call:
    id: str
    upstream_id: str | None = None
    index: int = -1  # the client's index, given once the name says the call is kept
    name: str | None = None
    opened: bool = False
    pending_args: str = ""
    arguments: list[str] = field(default_factory=list)  # every fragment, to check the whole is JSON
    serial: int = 0  # its place in the choice's calls (the key of its arguments' secret mask)
    # not for the client (another function than a named tool_choice, or a second call under
    # parallel_tool_calls false): nothing of it is sent
    dropped: bool = False

    def __init__(self, id: str, upstream_id: str | None = None, *, serial: int = 0) -> None:
        self.id, self.upstream_id, self.serial = id, upstream_id, serial
        self.index, self.name, self.opened, self.pending_args = -1, None, False, ""
        self.arguments, self.dropped = [], False


@dataclass(slots=True, init=False)
class _Choice:
    index: int
    repair: TextRepair | None = None
    state: str = "waiting"
    calls: dict[object, _Call] = field(default_factory=dict)  # upstream index, or ("text", i) for repaired calls
    made: list[_Call] = field(
        default_factory=list
    )  # every call, in the order they began (calls holds the latest per key)
    finish: str | None = None
    held: str | None = None  # the upstream's finish_reason, sent when the stream really ends
    text_offset: int = 0
    logprobs: list[dict[str, Any]] = field(default_factory=list)  # entries not yet sent with a content delta
    fmt: output_format.Held | None = None  # a response_format request: content to check, reasoning held
    masks: FieldMasks | None = None  # the gateway's secrets masked in each field's text (transform.secrets)

    def __init__(
        self,
        index: int,
        repair: TextRepair | None = None,
        *,
        fmt: output_format.Held | None = None,
        masks: FieldMasks | None = None,
    ) -> None:
        self.index, self.repair, self.fmt, self.masks = index, repair, fmt, masks
        self.state, self.calls, self.made, self.finish, self.held = "waiting", {}, [], None, None
        self.text_offset, self.logprobs = 0, []

    def __repr__(self) -> str:
        return f"<choice {self.index} {self.state}>"


class StreamNormalizer:
    """``feed(data)`` takes the data of one upstream SSE event; ``flush()`` ends the stream."""

    def __init__(self, ctx: ResponseContext) -> None:
        self.ctx = ctx
        self.choices: dict[int, _Choice] = {}
        self._held: list[_Choice] = []  # choices whose upstream finish came, in the order it came
        self._numbered = 0  # output indices given so far: in the order choices open, from 0
        self.usage: dict[str, Any] | None = None
        self.done = False  # upstream sent [DONE]
        self.ended = False  # the stream is over: it ended normally (flush) or failed (fail)
        self._extra: dict[str, Any] = {}  # --keep-extensions: the current upstream chunk's own keys
        self._choice_extra: dict[str, Any] = {}
        self.error: OpenAIError | None = None  # why the stream failed, once ended by fail()
        self.upstream_error = False  # that error is one the upstream sent in its stream (an error event)
        self._object = "chat.completion.chunk" if ctx.chat else "text_completion"
        self.stop_seen = False  # a stop at the gateway ended some choice (``stopped`` asks more only then)
        # the chat spec: usage null on every chunk but the last (legacy: not nullable)
        self._null_usage = ctx.include_usage and ctx.chat
        self._counts: Any = None  # the backend's last token counts (llama.cpp's timings), when read

    # -- framing ---------------------------------------------------------------------------
    def _chunk(self, choices: list[dict[str, Any]], usage: Any = ...) -> Chunk:
        ctx = self.ctx
        chunk = {
            "id": ctx.response_id,
            "object": self._object,
            "created": ctx.created,
            "model": ctx.model,
            "choices": choices,
        }
        if self._extra:
            chunk.update(self._extra)
        if usage is not ...:
            chunk["usage"] = usage
        elif self._null_usage:
            chunk["usage"] = None
        return chunk

    def _delta(self, index: int, delta: dict[str, Any], logprobs: Any = None, finish: str | None = None) -> Chunk:
        if self.ctx.chat:
            choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        else:
            choice = {"index": index, "text": delta.get("content", ""), "logprobs": logprobs, "finish_reason": finish}
        if self._choice_extra:
            choice.update(self._choice_extra)
        return self._chunk([choice])

    # -- input -----------------------------------------------------------------------------
    def feed(self, data: str, parsed: Any = None) -> list[Chunk]:
        """The official chunks for the data of one upstream event (``parsed``: that data already
        parsed, as for a plain body read as a stream); never raises (a fault ends the stream with an
        error: ``ended`` and ``error`` are set)."""
        if self.ended or self.done or (self.stop_seen and self.stopped):
            # After a stop at the gateway the rest of the upstream is not read: a later event, or
            # the cut-off one the pipe's decoder flushes, must not turn the answer into an error.
            return []
        try:  # one try around the whole event: free in Python 3.11 until something raises
            if parsed is not None:
                chunk = parsed
            elif data[:1] != "{" and data.strip() == "[DONE]":
                self.done = True
                return self._release()
            else:
                chunk = orjson.loads(data)
            if not isinstance(chunk, dict):  # orjson gives a dict for every JSON object
                return []
            if "choices" not in chunk and is_error_body(chunk):
                return self.upstream_failed(chunk)
            if self.ctx.keep_extensions:
                self._extra = {k: v for k, v in chunk.items() if k not in _TOP_KEYS}
            out: list[Chunk] = []
            choices = chunk.get("choices")
            if choices is not None and not isinstance(choices, list):
                raise _parts.unreadable("choices", choices, "an array")
            for choice in choices or ():
                if not isinstance(choice, dict) or type(choice.get("index")) is not int:  # not a bool either
                    where = f"choices[{(choices or []).index(choice)}]"
                    raise _parts.unreadable(where, choice, "an object with an integer index")
                if self.ctx.keep_extensions:
                    self._choice_extra = {k: v for k, v in choice.items() if k not in _CHOICE_KEYS}
                out.extend(self._choice(choice))
            self._extra, self._choice_extra = {}, {}
            if chunk.get("usage") is not None:
                self.usage = _parts.usage(chunk["usage"])
            elif self.ctx.unparsed_call is not None and chunk.get("timings") is not None:
                self._counts = chunk["timings"]  # llama.cpp's counts so far (ToolChoiceSupport.counts)
            return out
        except OpenAIError as error:  # a chunk that cannot be read
            return self.fail(error)
        except orjson.JSONDecodeError:
            return self.fail(upstream_error(f"the upstream sent an event that is not JSON: {data[:80]!r}"))
        except Exception:
            log.exception("stream %s (model %s): failed to rewrite the event %.300r", *self._where(), data or parsed)
            return self.fail(self._internal())

    def _where(self) -> tuple[str, str]:
        return self.ctx.response_id, self.ctx.model

    def _internal(self) -> OpenAIError:
        return OpenAIError(
            502, f"the gateway failed to rewrite the upstream's answer ({self.ctx.response_id})", "server_error"
        )

    def _state(self, upstream_index: int) -> _Choice:
        state = self.choices.get(upstream_index)
        if state is None:
            repair = TextRepair(self.ctx.repair) if self.ctx.repair is not None and self.ctx.repair.active else None
            fmt = output_format.Held() if self.ctx.output_format is not None and self.ctx.chat else None
            masks = FieldMasks(self.ctx.secrets) if self.ctx.secrets else None
            state = self.choices[upstream_index] = _Choice(-1, repair, fmt=fmt, masks=masks)
        return state

    def expect(self, upstream_index: int) -> None:
        """A choice that will come (n fanned out): until it finishes the stream is neither over nor
        stopped, and a stream that ends without it fails."""
        self._state(upstream_index)

    def _choice(self, choice: dict[str, Any]) -> list[Chunk]:
        state = self._state(choice["index"])
        if state.state == "finished":
            return []  # the official stream sends nothing for a choice after its finish
        out: list[Chunk] = []
        if self.ctx.chat:
            delta: object = choice.get("delta")
            if not isinstance(delta, dict):
                if delta is not None:
                    raise _parts.unreadable("a choice's delta", delta, "an object")
                delta = _parts.mapping(delta)
            out.extend(self._chat_delta(state, delta, choice.get("logprobs")))
        else:
            out.extend(self._text(state, choice))
        if state.state == "finished":
            return out  # a stop string ended the text at the gateway
        finish = choice.get("finish_reason")
        if finish is not None:
            if not isinstance(finish, str):
                raise _parts.unreadable("a finish_reason", finish, "a string or null")
            if finish in {"abort", "error"}:
                return [*out, *self.fail(internal_error("the upstream aborted the generation"))]
            if state.held is None:  # a second finish for the choice changes nothing
                # Held, not sent: text may still come for this choice (issue 19). It is numbered
                # now, so output indices follow the order choices opened or finished, as before.
                self._number(state)
                state.held = finish
                self._held.append(state)
        return out

    # -- emitting official deltas ------------------------------------------------------------
    def _number(self, state: _Choice) -> None:
        """Give a choice its output index when it opens: the official stream opens 0, 1, ... in order,
        while a backend may open choice 1 first (llama.cpp sends empty role chunks per slot, then the
        text of whichever slot runs first)."""
        if state.index < 0:
            state.index = self._numbered
            self._numbered += 1

    def _open(self, state: _Choice, kind: str) -> list[Chunk]:
        """The role chunk, shaped by what comes first: text, a refusal, or reasoning/a tool call."""
        self._number(state)
        if state.state != "waiting" or not self.ctx.chat:
            state.state = "open" if state.state == "waiting" else state.state
            return []
        state.state = "open"
        if kind == "content":
            first: dict[str, Any] = {"content": "", "refusal": None}
        elif kind == "refusal":
            first = {"content": None, "refusal": ""}
        else:
            # The role chunk cannot know yet whether text or a tool call follows; null is right
            # for a tool call and harmless before text (clients start from null).
            first = {"content": None, "refusal": None}
        logprobs: dict[str, Any] | None = {"content": [], "refusal": None} if self.ctx.logprobs else None
        return [self._delta(state.index, {"role": "assistant", **first}, logprobs)]

    def _content(self, state: _Choice, text: str) -> list[Chunk]:
        if not text:
            return []
        if state.fmt is not None:
            before, text = state.fmt.feed_content(text)
            return self._reasoning_now(state, before) + self._content_now(state, text)
        return self._content_now(state, text)

    def _content_now(self, state: _Choice, text: str) -> list[Chunk]:
        if not text:
            return []
        if state.masks is not None:
            released, text = state.masks.feed("content", text)
            return self._emit(state, released) + self._content_out(state, text)
        return self._content_out(state, text)

    def _content_out(self, state: _Choice, text: str) -> list[Chunk]:
        if not text:
            return []
        out = self._open(state, "content")
        lp = None
        if self.ctx.logprobs and self.ctx.chat:
            lp, state.logprobs = {"content": state.logprobs, "refusal": None}, []
        out.append(self._delta(state.index, {"content": text}, lp))
        return out

    def _reasoning(self, state: _Choice, text: str) -> list[Chunk]:
        if state.fmt is not None and text:
            text, content = state.fmt.feed_reasoning(text)
            return self._reasoning_now(state, text) + self._content_now(state, content)
        return self._reasoning_now(state, text)

    def _unhold(self, state: _Choice) -> list[Chunk]:
        """A call or a refusal came: reasoning held back (it might have been the answer) is reasoning."""
        if state.fmt is None or not state.fmt.holding:
            return []
        reasoning, content = state.fmt.release()
        return self._reasoning_now(state, reasoning) + self._content_now(state, content)

    def _reasoning_now(self, state: _Choice, text: str) -> list[Chunk]:
        if not text:
            return []
        if state.masks is not None:
            released, text = state.masks.feed("reasoning", text)
            return self._emit(state, released) + self._reasoning_out(state, text)
        return self._reasoning_out(state, text)

    def _reasoning_out(self, state: _Choice, text: str) -> list[Chunk]:
        if not text:
            return []
        fields = _parts.reasoning_fields(text, self.ctx)
        if not fields:
            return []
        return [*self._open(state, "reasoning"), self._delta(state.index, dict(fields))]

    def _pieces(self, state: _Choice, pieces: list[Piece]) -> list[Chunk]:
        out: list[Chunk] = []
        for piece in merge(pieces):
            if isinstance(piece, Text):
                out += (
                    self._content(state, piece.text) if piece.kind == "content" else self._reasoning(state, piece.text)
                )
            elif isinstance(piece, CallStart):
                out += self._tool_call(state, ("text", piece.index), None, piece.name, "")
            else:
                out += self._tool_call(state, ("text", piece.index), None, None, piece.text)
        return out

    def _chat_delta(self, state: _Choice, delta: dict[str, Any], logprobs: Any) -> list[Chunk]:
        out = self._reasoning(state, _parts.reasoning_text(delta))
        if self.ctx.logprobs:
            state.logprobs += _parts.chat_logprob_entries(logprobs, self.ctx)
        content = delta.get("content")
        if not isinstance(content, str):
            if content is not None:
                raise _parts.unreadable("a delta's content", content, "a string or null")
        elif content:
            if state.repair is None:
                out += self._content(state, content)
            else:
                out += self._pieces(state, state.repair.feed(content))
                if state.repair.stopped:
                    return out + self._finish(state, "stop")
        refusal = delta.get("refusal")
        if refusal is not None and _parts.text_or_none(refusal, "a delta's refusal"):
            if state.masks is not None:
                released, refusal = state.masks.feed("refusal", refusal)
                out += self._emit(state, released)
            out += self._refusal_out(state, refusal)
        calls = delta.get("tool_calls")
        if calls:
            if not isinstance(calls, list):
                raise _parts.unreadable("a delta's tool_calls", calls, "an array")
            for call in calls:
                fn: object = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict):
                    if fn is not None or not isinstance(call, dict):
                        raise _parts.unreadable("a tool-call delta", call, 'an object with a "function" object')
                    fn = _parts.mapping(fn)
                key = _parts.count(call.get("index"))
                name = _parts.text_or_none(fn.get("name"), "a tool call's name") or None
                out += self._tool_call(
                    state,
                    len(state.calls) if key is None else key,
                    call.get("id"),
                    name,
                    _parts.arguments_text(fn.get("arguments")),
                )
        return out

    def _tool_call(self, state: _Choice, key: object, upstream_id: Any, name: str | None, args: str) -> list[Chunk]:
        entry = state.calls.get(key)
        if entry is None or _starts_another(entry, upstream_id, name):
            entry = state.calls[key] = _Call(call_id(upstream_id), upstream_id or None, serial=len(state.made))
            state.made.append(entry)
        if entry.name is None and name:
            entry.name = name
            self._keep_or_drop(state, entry)
        out: list[Chunk] = []
        if state.masks is not None and (args or name):
            released, args = state.masks.feed(("call", entry.serial), args)
            out += self._emit(state, released)
        return out + self._call_out(state, entry, args)

    def _call_out(self, state: _Choice, entry: _Call, args: str) -> list[Chunk]:
        if args:
            entry.arguments.append(args)
        if entry.dropped:
            return []
        out: list[Chunk] = []
        if not entry.opened:
            if entry.name is None:
                entry.pending_args += args  # wait for the name: the opening delta must carry it
                return out
            entry.opened = True
            out += self._unhold(state)
            out += self._open(state, "tool")
            opening = {
                "index": entry.index,
                "id": entry.id,
                "type": "function",
                "function": {"name": entry.name, "arguments": ""},
            }
            out.append(self._delta(state.index, {"tool_calls": [opening]}))
            args, entry.pending_args = entry.pending_args + args, ""
        if args:
            out.append(
                self._delta(state.index, {"tool_calls": [{"index": entry.index, "function": {"arguments": args}}]})
            )
        return out

    def _refusal_out(self, state: _Choice, refusal: str) -> list[Chunk]:
        if not refusal:
            return []
        return [*self._unhold(state), *self._open(state, "refusal"), self._delta(state.index, {"refusal": refusal})]

    def _unmask(self, state: _Choice) -> list[Chunk]:
        """The choice ends: beginnings of a secret its masks held that never completed are text."""
        if state.masks is None:
            return []
        if state.masks.masked:
            self.ctx.repairs.add("secret_masked")
        return self._emit(state, state.masks.release())

    def _emit(self, state: _Choice, released: list[tuple[object, str]]) -> list[Chunk]:
        """The deltas of text a field's secret mask held back (``FieldMasks``), unmasked again."""
        out: list[Chunk] = []
        for key, text in released:
            if key == "content":
                out += self._content_out(state, text)
            elif key == "reasoning":
                out += self._reasoning_out(state, text)
            elif key == "refusal":
                out += self._refusal_out(state, text)
            else:
                _, serial = cast(tuple[str, int], key)
                out += self._call_out(state, state.made[serial], text)
        return out

    def _keep_or_drop(self, state: _Choice, entry: _Call) -> None:
        """Decided when the call's name is known (it may come after the first fragments, which wait):
        under a named tool_choice only calls of that function reach the client, under
        parallel_tool_calls false only the first kept one; the kept ones are numbered 0, 1, ... with
        no gap where one was dropped."""
        kept = sum(1 for c in state.made if c.index >= 0)
        if self.ctx.forced_tool is not None and entry.name != self.ctx.forced_tool:
            entry.dropped = True
            self.ctx.repairs.add("unnamed_calls_dropped")
        elif self.ctx.one_tool_call and kept:
            entry.dropped = True
            self.ctx.repairs.add("parallel_calls_dropped")
        else:
            entry.index = kept
        if entry.dropped:
            entry.pending_args = ""

    def _text(self, state: _Choice, choice: dict[str, Any]) -> list[Chunk]:
        text = choice.get("text")
        if not isinstance(text, str) or not text:
            if text is not None and not isinstance(text, str):
                raise _parts.unreadable("a choice's text", text, "a string or null")
            return []
        self._number(state)
        state.state = "open"
        lp = None
        if self.ctx.logprobs:
            lp = _parts.legacy_logprobs(choice.get("logprobs"), self.ctx.top_logprobs, state.text_offset)
        if state.repair is not None:
            text = "".join(p.text for p in state.repair.feed(text) if isinstance(p, Text))
        out: list[Chunk] = []
        if state.masks is not None and text:
            released, text = state.masks.feed("content", text)
            out += self._emit(state, released)
        state.text_offset += len(text)
        out += [self._delta(state.index, {"content": text}, lp)] if text else []
        if state.repair is not None and state.repair.stopped:
            out += self._finish(state, "stop")
        return out

    def _finish(self, state: _Choice, upstream: Any) -> list[Chunk]:
        out: list[Chunk] = []
        if state.repair is not None:
            tail = state.repair.flush()
            if any(c.opened for c in state.made):
                # whitespace held back before the backend's own tool calls (vLLM's hermes parser sends
                # the "\n\n" before <tool_call> as content) is framing, as in the text parser: not
                # content sent after the calls
                tail = [p for p in tail if not (isinstance(p, Text) and p.kind == "content" and not p.text.strip())]
            if self.ctx.chat:
                out += self._pieces(state, tail)
            else:
                out += self._content(state, "".join(p.text for p in tail if isinstance(p, Text)))
            if state.repair.stopped:
                upstream = "stop"
                self.stop_seen = True
            self.ctx.repairs.update(state.repair.applied())
        out += self._unmask(state)
        made_calls = any(c.opened for c in state.made)  # (the repair's flush may have opened a call)
        if state.fmt is not None:  # reasoning held back: the answer (moved to the content) or reasoning
            reasoning, content = state.fmt.end(made_calls, self.ctx)
            out += self._reasoning_now(state, reasoning) + self._content_now(state, content)
        if self.ctx.chat and state.state == "waiting":
            out += self._open(state, "content")
        for call in state.made:
            if not call.opened and call.pending_args and not call.dropped:  # never named: give its text back
                out += self._content(state, call.pending_args)
        out += self._unmask(state)  # (what the lines above sent through the masks)
        self._number(state)
        reason = _parts.finish_reason(upstream, made_calls, self.ctx) if self.ctx.chat else _legacy_finish(upstream)
        if reason != "length":  # arguments cut by the limit are short, as at OpenAI
            bad = [c.index for c in state.made if c.opened and not _parts.is_json("".join(c.arguments))]
            if bad:  # reported (server.exchange logs it with the request id), sent as they came
                detail = f"tool call(s) {bad}: arguments are not valid JSON"
                self.ctx.violations.append((state.index, _parts.ARGS_INVALID, detail))
        if state.fmt is not None and not made_calls:
            error = output_format.judge(state.index, state.fmt.text(), reason, self.ctx)
            if error is not None:  # the profile's policy: the violation ends the stream in place of the finish
                return [*out, *self.fail(error)]
        state.state = "finished"
        state.finish = reason
        empty: dict[str, Any] = {}
        out.append(self._delta(state.index, empty, None, reason))
        return out

    def _release(self) -> list[Chunk]:
        """The stream really ended: send the finishes held back, in the order they came."""
        out: list[Chunk] = []
        for state in self._held:
            if state.state != "finished" and state.held is not None:  # not ended at the gateway since
                out += self._finish(state, state.held)
        self._held.clear()
        return out

    def calls(self) -> list[tuple[str, str]]:
        """(name, the arguments sent so far) of each call sent to the client, over all choices."""
        return [(c.name, "".join(c.arguments)) for s in self.choices.values() for c in s.made if c.opened and c.name]

    @property
    def stopped(self) -> bool:
        """Every choice is done and a stop string ended one at the gateway: close the upstream.

        A choice whose upstream finish is held counts as done: waiting for the upstream's [DONE]
        would keep the backend generating the text the gateway cut. (Text that a backend would
        still send after that choice's finish is then not read: a rare fault meets a rarer one.)"""
        # Asked before and after every upstream event: the usual answer (no stop at the gateway)
        # is one attribute.
        if not self.stop_seen:
            return False
        for c in self.choices.values():
            if c.state != "finished" and c.held is None:
                return False
        return any(c.repair is not None and c.repair.stopped for c in self.choices.values())

    def upstream_failed(self, body: Any) -> list[Chunk]:
        """End the stream with the error the upstream sent in it (``body``: any backend's shape)."""
        error = normalize_upstream_error(200, body, context_param=self.ctx.context_param)
        if self.choices and not self.ended:
            for phrase, kind in (
                (self.ctx.unparsed_call, "unparsed_call_finished"),
                (self.ctx.grammar_done, "grammar_end_finished"),
            ):
                if phrase and phrase in error.message:
                    return self._answer_end(kind)
        if not self.ended:
            self.upstream_error = True
        return self.fail(error)

    def _answer_end(self, kind: str) -> list[Chunk]:
        """An error event that stands where the finish belongs after a whole answer (``kind``, the
        repair): llama.cpp's final parse refused a call the model began under "auto", after its
        partial parses had streamed every token as content (L-32), or its guided decoding's grammar
        had completed when one more token came (L-33). The text the client has is the answer, so
        each open choice finishes ("stop") where the error stood."""
        out: list[Chunk] = []
        for state in self.choices.values():
            if state.state != "finished" and state.held is None:
                out += self._finish(state, "stop")
        self.ctx.repairs.add(kind)
        if self.usage is None:  # the error stands where the usage came: the backend's last counts
            self.usage = _counted(self._counts)
        log.info("stream %s (model %s): the backend's error after a whole answer (%s); finished", *self._where(), kind)
        return [*out, *self._release()]

    def fail(self, error: OpenAIError) -> list[Chunk]:
        """End the stream with an error (once): ``ended`` and ``error`` are set, no chunk follows."""
        if not self.ended:
            self.ended = True
            self.error = error
        return []

    # -- end -------------------------------------------------------------------------------
    def flush(self) -> list[Chunk]:
        """End of the upstream stream: the last chunks of the official stream (``ended`` is then set,
        with ``error`` None), or a failure (``error`` set); never raises."""
        try:
            return self._flush()
        except Exception:
            log.exception("stream %s (model %s): failed to end the stream", *self._where())
            return self.fail(self._internal())

    def _flush(self) -> list[Chunk]:
        if self.ended:
            return []
        out = self._release()
        unfinished = [i for i, c in self.choices.items() if c.state != "finished"]  # upstream indices
        if unfinished or not self.choices:
            what = "before any choice" if not self.choices else f"before choice {unfinished[0]} finished"
            return [*out, *self.fail(upstream_error(f"the upstream stream ended {what}"))]
        if self.ctx.include_usage and self.usage is not None:
            # Only what the backend counted: a made-up usage would be a lie (the checker reports
            # the missing chunk instead).
            out.append(self._chunk([], self.usage))
        self.ended = True
        return out


_TOP_KEYS: Final = frozenset(
    {"id", "object", "created", "model", "choices", "usage", "system_fingerprint", "service_tier"}
)
_CHOICE_KEYS: Final = frozenset({"index", "delta", "text", "logprobs", "finish_reason"})


def _counted(timings: Any) -> dict[str, Any] | None:
    """Usage from llama.cpp's per-chunk ``timings``: the prompt is its cached and its processed
    tokens, the completion the tokens predicted so far; None without them."""
    if not isinstance(timings, dict):
        return None
    cached, processed = (_parts.count(timings.get(k)) for k in ("cache_n", "prompt_n"))
    completion = _parts.count(timings.get("predicted_n"))
    if processed is None or completion is None:
        return None
    return _parts.usage({"prompt_tokens": (cached or 0) + processed, "completion_tokens": completion})


def _starts_another(entry: _Call, upstream_id: Any, name: str | None) -> bool:
    """A delta at a call's upstream index that begins another call: one with another id, or a name
    again after complete arguments (backends that number every call 0, or vLLM's named choice,
    which streams at the choice's index, V-22)."""
    if isinstance(upstream_id, str) and upstream_id and entry.upstream_id and upstream_id != entry.upstream_id:
        return True
    return bool(name and entry.name and entry.arguments and _parts.is_json("".join(entry.arguments)))


def _legacy_finish(upstream: Any) -> str:
    return upstream if upstream in ("stop", "length", "content_filter") else "stop"
