"""Rule c: the order and shape of a streamed chat or legacy completion.

What the official API sends (docs/wire-format.md §3, and the 12 live recordings): ``data:`` lines
only, one ``id`` and one ``created`` on every chunk; per choice, a first chunk carrying the role,
content deltas, then ``finish_reason`` once in a chunk whose delta is ``{}``, and nothing more for
that choice; new choice indices in order from 0; tool-call deltas that open with ``index``, ``id``,
``type``, ``function.name`` and ``arguments: ""`` and continue with ``index`` and ``arguments``
only; a usage chunk with ``choices: []`` last, exactly when ``stream_options.include_usage`` was
true; then ``data: [DONE]``.

One :class:`ChoiceState` per choice holds what the rules need; nothing lives in parallel lists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from oaishim.check._findings import Sink, jpath

_FIRST_DELTA_KEYS: Final = frozenset({"role", "content", "refusal", "tool_calls"})
_REASONING_KEYS: Final = frozenset({"reasoning_content", "reasoning"})


def check_id_prefix(obj: Mapping[str, Any], chat: bool, sink: Sink, chunk: int | None = None) -> None:
    """Response ids start ``chatcmpl-`` (chat) or ``cmpl-`` (legacy completions)."""
    want = "chatcmpl-" if chat else "cmpl-"
    rid = obj.get("id")
    if isinstance(rid, str) and not rid.startswith(want):
        sink.add("id.prefix", "$.id", f"id {rid!r} lacks the {want} prefix", chunk=chunk)


@dataclass(slots=True)
class ChoiceState:
    index: int
    first_chunk: int
    deltas: int = 0
    finished_at: int | None = None
    pending_null_first: tuple[int, str] | None = None  # a first delta `content: null` awaiting a tool call
    tool_calls: set[int] = field(default_factory=set)


@dataclass(slots=True)
class StreamRules:
    """Feed it each decoded chunk in order, then call :meth:`finish`."""

    sink: Sink
    chat: bool
    include_usage: bool | None  # None: no request, so a usage chunk is neither required nor refused
    first: Mapping[str, Any] | None = None
    choices: dict[int, ChoiceState] = field(default_factory=dict)
    usage_chunk: int | None = None
    last_chunk: int | None = None
    call_ids: set[str] = field(default_factory=set)

    def feed(self, n: int, chunk: Mapping[str, Any]) -> None:
        self.last_chunk = n
        self._identity(n, chunk)
        self._usage(n, chunk)
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return
        if len(choices) > 1:
            self.sink.add("stream.choice-count", "$.choices", f"{len(choices)} choices in one chunk", chunk=n)
        for i, choice in enumerate(choices):
            if isinstance(choice, dict) and isinstance(choice.get("index"), int):
                self._choice(n, i, choice)

    def _identity(self, n: int, chunk: Mapping[str, Any]) -> None:
        if self.first is None:
            self.first = chunk
            check_id_prefix(chunk, self.chat, self.sink, n)
        else:
            for key, rule in (("id", "stream.id"), ("created", "stream.created")):
                if chunk.get(key) != self.first.get(key):
                    self.sink.add(
                        rule,
                        f"$.{key}",
                        f"{key} {chunk.get(key)!r} differs from the first chunk's {self.first.get(key)!r}",
                        chunk=n,
                    )
        want = "chat.completion.chunk" if self.chat else "text_completion"
        if chunk.get("object") != want:
            self.sink.add("stream.object", "$.object", f"object {chunk.get('object')!r}, expected {want!r}", chunk=n)

    def _usage(self, n: int, chunk: Mapping[str, Any]) -> None:
        has_key = "usage" in chunk
        usage = chunk.get("usage")
        if usage is None:
            if has_key and self.include_usage is False:
                self.sink.add(
                    "stream.usage", "$.usage", "usage: null although include_usage was not requested", chunk=n
                )
            return
        if self.usage_chunk is not None:
            self.sink.add(
                "stream.usage",
                "$.usage",
                f"a second usage object (first in chunk {self.usage_chunk})",
                chunk=n,
            )
        if self.include_usage is False:
            self.sink.add("stream.usage", "$.usage", "usage sent although include_usage was not requested", chunk=n)
        elif chunk.get("choices"):
            self.sink.add(
                "stream.usage",
                "$.usage",
                "usage on a chunk with choices; it belongs on its own last chunk",
                chunk=n,
            )
        self.usage_chunk = n if self.usage_chunk is None else self.usage_chunk

    def _choice(self, n: int, i: int, choice: Mapping[str, Any]) -> None:
        index: int = choice["index"]
        base = jpath("choices", i)
        state = self.choices.get(index)
        if state is None:
            if index != len(self.choices):
                self.sink.add(
                    "stream.choice-index",
                    base + ".index",
                    f"new choice index {index}, expected {len(self.choices)}",
                    chunk=n,
                )
            state = self.choices[index] = ChoiceState(index, n)
        elif state.finished_at is not None:
            self.sink.add(
                "stream.after-finish",
                base,
                f"choice {index} continues after its finish_reason (chunk {state.finished_at})",
                chunk=n,
            )
        delta = choice.get("delta") if self.chat else None
        if isinstance(delta, dict):
            self._delta(n, base, state, delta)
        finish = choice.get("finish_reason")
        if finish is not None:
            if state.finished_at is not None:
                self.sink.add("stream.finish-once", base + ".finish_reason", f"choice {index} finished twice", chunk=n)
            else:
                state.finished_at = n
            if self.chat and isinstance(delta, dict) and delta:
                self.sink.add(
                    "stream.finish-delta",
                    base + ".delta",
                    "finish_reason arrives with a non-empty delta; expected {}",
                    chunk=n,
                )
        state.deltas += 1

    def _delta(self, n: int, base: str, state: ChoiceState, delta: Mapping[str, Any]) -> None:
        path = base + ".delta"
        if state.pending_null_first is not None:
            if delta.keys() <= _REASONING_KEYS:
                # Reasoning is an extension the official API does not stream: a role chunk sent
                # before it cannot know whether text or a tool call follows, so null is accepted.
                state.pending_null_first = None
            else:
                if not delta.get("tool_calls"):
                    self._bad_first(*state.pending_null_first, "content: null without a tool call or refusal")
                state.pending_null_first = None
        if state.deltas == 0:
            self._first_delta(n, path, state, delta)
        elif "role" in delta:
            self.sink.add("stream.role-repeat", path + ".role", f"role sent again for choice {state.index}", chunk=n)
        if "tool_calls" in delta:
            self._tool_calls(n, path, state, delta["tool_calls"])

    def _bad_first(self, n: int, path: str, why: str) -> None:
        self.sink.add("stream.first-delta", path, f"first delta of the choice: {why}", chunk=n)

    def _first_delta(self, n: int, path: str, state: ChoiceState, delta: Mapping[str, Any]) -> None:
        if delta.get("role") != "assistant":
            self._bad_first(n, path, f"role is {delta.get('role')!r}, expected 'assistant'")
            return
        extra = delta.keys() - _FIRST_DELTA_KEYS
        if extra:
            return  # rule b reports the unknown keys
        content, refusal, calls = delta.get("content", ...), delta.get("refusal"), delta.get("tool_calls")
        if calls:
            pass  # content "" beside the call is judged on the final message (message.content-null)
        elif content == "":
            if refusal is not None:
                self._bad_first(n, path, 'content "" with a refusal')
        elif content is None:
            if refusal != "":
                state.pending_null_first = (n, path)  # fine only if the next delta opens a tool call
        elif content is ...:
            self._bad_first(n, path, 'no content key (expected content: "")')
        else:
            self._bad_first(n, path, 'carries text; the official first delta has content: ""')

    def _tool_calls(self, n: int, path: str, state: ChoiceState, calls: Any) -> None:
        if calls is None or calls == []:
            self.sink.add(
                "message.tool-calls-empty",
                path + ".tool_calls",
                f"tool_calls is {calls!r} in a delta",
                chunk=n,
            )
            return
        if not isinstance(calls, list):
            return
        for j, call in enumerate(calls):
            if not isinstance(call, dict) or not isinstance(call.get("index"), int):
                continue  # rule a
            cpath = f"{path}.tool_calls[{j}]"
            k = call["index"]
            if k not in state.tool_calls:
                if k != len(state.tool_calls):
                    self.sink.add(
                        "tool-call.index",
                        cpath + ".index",
                        f"new tool-call index {k}, expected {len(state.tool_calls)}",
                        chunk=n,
                    )
                state.tool_calls.add(k)
                self._opening_call(n, cpath, call)
            else:
                self._continuing_call(n, cpath, call)

    def _opening_call(self, n: int, cpath: str, call: Mapping[str, Any]) -> None:
        fn = call.get("function")
        missing = [
            name
            for name, ok in (
                ("id", isinstance(call.get("id"), str) and call.get("id") != ""),
                ("type", call.get("type") == "function"),
                ("function.name", isinstance(fn, dict) and isinstance(fn.get("name"), str)),
                ('function.arguments ""', isinstance(fn, dict) and fn.get("arguments") == ""),
            )
            if not ok
        ]
        if missing:
            self.sink.add(
                "stream.tool-call-delta",
                cpath,
                f"first delta of a tool call lacks {', '.join(missing)}",
                chunk=n,
            )
        call_id = call.get("id")
        if isinstance(call_id, str) and call_id:
            if call_id in self.call_ids:
                self.sink.add("tool-call.id", cpath + ".id", f"tool-call id {call_id!r} repeated", chunk=n)
            elif not call_id.startswith("call_"):
                self.sink.add("id.prefix", cpath + ".id", f"tool-call id {call_id!r} lacks the call_ prefix", chunk=n)
            self.call_ids.add(call_id)

    def _continuing_call(self, n: int, cpath: str, call: Mapping[str, Any]) -> None:
        extra = sorted(call.keys() - {"index", "function"})
        fn = call.get("function")
        if isinstance(fn, dict):
            extra += [f"function.{key}" for key in sorted(fn.keys() - {"arguments"})]
        if extra:
            self.sink.add(
                "stream.tool-call-delta",
                cpath,
                f"a continuing tool-call delta repeats {', '.join(extra)}",
                chunk=n,
            )

    def finish(self, *, errored: bool = False) -> None:
        """End of stream. After an error event, missing finishes and usage are the error's doing."""
        for state in self.choices.values():
            if state.pending_null_first is not None:
                self._bad_first(*state.pending_null_first, "content: null without a tool call or refusal")
            if state.finished_at is None and not errored:
                self.sink.add("stream.finish-once", "$", f"choice {state.index} never sent a finish_reason")
        if self.include_usage and self.usage_chunk is None and not errored:
            self.sink.add("stream.usage", "$", "include_usage was requested but no usage chunk came")
        elif self.usage_chunk is not None and self.usage_chunk != self.last_chunk:
            self.sink.add("stream.usage", "$.usage", "the usage chunk is not the last chunk", chunk=self.usage_chunk)
