"""Rebuild the final object of a streamed response from its chunks.

The rules mirror openai-python's stream helper (``openai.lib.streaming._deltas.accumulate_delta`` and
``openai.lib.streaming.chat.ChatCompletionStreamState``), so that what we rebuild is what a client using
the official SDK would see. Everything here works on already-decoded JSON (``dict``/``list``/``str``/...)
and does no I/O.

Where the SDK relies on an accident (list *position* standing in for the ``index`` key, adding booleans as
numbers) we keep its intent instead; each such place says so in its docstring.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final, Protocol

__all__ = [
    "ChatAccumulator",
    "CompletionAccumulator",
    "accumulate_chat",
    "accumulate_completion",
    "accumulate_delta",
]

_REPLACED_KEYS: Final = frozenset({"index", "type"})


def json_copy(value: Any) -> Any:
    """A JSON value copied: new objects and arrays all the way down, the scalars (immutable) shared.
    What ``copy.deepcopy`` gives for parsed JSON, compiled (deepcopy is interpreted, and the stream
    builders copy on every chunk)."""
    if isinstance(value, dict):
        return {key: json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_copy(item) for item in value]
    return value


def _is_number(value: object) -> bool:
    # JSON true/false decode to bool, a subclass of int; they are flags, not amounts.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _addable(current: object, value: object) -> bool:
    """Strings concatenate and numbers add; the SDK does both with ``+=``."""
    both_str = isinstance(current, str) and isinstance(value, str)
    return both_str or (_is_number(current) and _is_number(value))


def _is_indexed_list(*lists: list[Any]) -> bool:
    """True when a list holds entries addressed by an ``index`` key (tool calls, choices)."""
    return any(isinstance(entry, dict) and "index" in entry for items in lists for entry in items)


def _entry_index(entry: object) -> int:
    if not isinstance(entry, dict):
        raise TypeError(f"entry of an indexed list delta is not an object: {entry!r}")
    if "index" not in entry:
        raise ValueError(f"entry of an indexed list delta has no 'index' key: {dict(entry)!r}")
    index = entry["index"]
    if not isinstance(index, int) or isinstance(index, bool):
        raise TypeError(f"'index' of a list delta entry is not an integer: {index!r}")
    return index


def _merge_indexed(acc: list[Any], delta: list[Any]) -> None:
    """Merge ``delta`` entries into ``acc`` entries carrying the same ``index`` value.

    The SDK uses ``index`` as a list position, which is the same thing while indices arrive as 0, 1, 2, ...
    (every real stream) but mixes entries up when one arrives out of order. We match on the key and keep
    ``acc`` sorted by it, so in-order streams give the SDK's result and out-of-order ones a correct one.
    """
    for entry in delta:
        index = _entry_index(entry)
        indexed = [(i, e) for i, e in enumerate(acc) if isinstance(e, dict) and isinstance(e.get("index"), int)]
        match = next((e for _, e in indexed if e["index"] == index), None)
        if match is not None:
            accumulate_delta(match, entry)
        else:
            position = next((i for i, e in indexed if e["index"] > index), len(acc))
            acc.insert(position, accumulate_delta({}, entry))


def accumulate_delta(acc: dict[str, Any], delta: Mapping[str, Any]) -> dict[str, Any]:
    """Fold one ``delta`` object into ``acc`` (mutated in place and returned), like the SDK's helper.

    Per key of ``delta``:

    * key missing from ``acc``, or ``acc`` holds ``None`` there: the delta value is copied in (a ``None``
      is copied too, so a key the server sent as ``null`` is present in the result);
    * ``"index"`` and ``"type"``: replaced, never accumulated (they address list entries and union members);
    * ``None`` in the delta over a non-``None`` value: ``acc`` is left alone (SDK: no branch matches);
    * strings are concatenated, numbers added, objects merged recursively;
    * lists whose entries carry an ``"index"`` key (tool calls) are merged entry by entry on that key; an
      entry without one raises ``ValueError``, a non-integer one ``TypeError`` (the SDK raises
      ``RuntimeError``/``TypeError``); other lists (logprob tokens, annotations) are extended;
    * anything else (booleans, mismatched types): booleans take the latest value (the SDK would add them
      as ints), mismatched types keep ``acc`` as the SDK does.

    Values taken from ``delta`` are deep-copied, so later changes to the chunk cannot reach ``acc``.
    """
    for key, value in delta.items():
        current = acc.get(key)
        if current is None:
            if isinstance(value, list) and _is_indexed_list(value):
                # One delta may hold several fragments for the same index: merge them, don't copy.
                current = acc[key] = []
            else:
                acc[key] = json_copy(value)
                continue
        if key in _REPLACED_KEYS:
            acc[key] = json_copy(value)
        elif value is None:
            continue
        elif _addable(current, value):
            acc[key] = current + value
        elif isinstance(current, bool) and isinstance(value, bool):
            acc[key] = value
        elif isinstance(current, dict) and isinstance(value, dict):
            accumulate_delta(current, value)
        elif isinstance(current, list) and isinstance(value, list):
            if _is_indexed_list(current, value):
                _merge_indexed(current, value)
            else:
                current.extend(json_copy(value))
    return acc


def _header_field(header: dict[str, Any], chunk: Mapping[str, Any], key: str) -> None:
    """Keep the first non-null value of a per-response field (the SDK takes them from the first chunk)."""
    if header.get(key) is None and chunk.get(key) is not None:
        header[key] = chunk[key]


def _choice_index(choice: object) -> int:
    if not isinstance(choice, dict):
        raise TypeError(f"choice is not an object: {choice!r}")
    return _entry_index(choice)


class _StreamHeader:
    """Response-level fields shared by chat and legacy completion streams."""

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}
        self.fingerprint_seen = False
        self.system_fingerprint: Any = None
        self.usage: Any = None
        self.fed = False

    def feed(self, chunk: Mapping[str, Any]) -> None:
        self.fed = True
        for key in ("id", "created", "model", "service_tier"):
            _header_field(self.fields, chunk, key)
        # SDK: ``snapshot.usage = chunk.usage`` and ``snapshot.system_fingerprint = chunk.system_fingerprint``
        # on every chunk, so the last chunk decides, even when it lacks the key (-> None).
        self.usage = json_copy(chunk.get("usage"))
        self.system_fingerprint = chunk.get("system_fingerprint")
        self.fingerprint_seen = self.fingerprint_seen or "system_fingerprint" in chunk

    def build(self, object_name: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        if not self.fed:
            raise ValueError(f"no chunk was fed; cannot build a {object_name} object")
        result: dict[str, Any] = {
            "id": self.fields.get("id"),
            "object": object_name,
            "created": self.fields.get("created"),
            "model": self.fields.get("model"),
        }
        if self.fingerprint_seen:
            result["system_fingerprint"] = self.system_fingerprint
        if "service_tier" in self.fields:
            result["service_tier"] = self.fields["service_tier"]
        result["choices"] = choices
        result["usage"] = json_copy(self.usage)
        return result


class _ChoiceBuilder(Protocol):
    def feed(self, choice: Mapping[str, Any]) -> None: ...

    def build(self) -> dict[str, Any]: ...


class _ChatChoice:
    def __init__(self, index: int) -> None:
        self.index = index
        self.message: dict[str, Any] = {}
        self.logprobs: dict[str, Any] | None = None
        self.finish_reason: Any = None

    def feed(self, choice: Mapping[str, Any]) -> None:
        accumulate_delta(self.message, choice.get("delta") or {})
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        logprobs = choice.get("logprobs")
        if logprobs is None:
            return
        if self.logprobs is None:
            # SDK: the first logprobs object is taken as is (a list or null per field) ...
            self.logprobs = {
                "content": json_copy(logprobs.get("content")),
                "refusal": json_copy(logprobs.get("refusal")),
            }
            return
        for key in ("content", "refusal"):
            # ... later ones only extend, and only with non-empty lists.
            if logprobs.get(key):
                if self.logprobs[key] is None:
                    self.logprobs[key] = []
                self.logprobs[key].extend(json_copy(logprobs[key]))

    def build(self) -> dict[str, Any]:
        message = json_copy(self.message)
        built = {
            "role": message.pop("role", None) or "assistant",
            "content": message.pop("content", None),
            "refusal": message.pop("refusal", None),
        }
        built.update(message)  # tool_calls, function_call, reasoning_content, ...: passed through
        return {
            "index": self.index,
            "message": built,
            "logprobs": json_copy(self.logprobs),
            "finish_reason": self.finish_reason,
        }


class _Accumulator:
    """Feeding and building shared by both accumulators; subclasses name the objects and choice type."""

    _chunk_object: ClassVar[str]
    _result_object: ClassVar[str]

    def __init__(self) -> None:
        self._header = _StreamHeader()
        self._choices: dict[int, _ChoiceBuilder] = {}

    def feed(self, chunk: Mapping[str, Any]) -> None:
        if chunk.get("object") != self._chunk_object:
            return
        self._header.feed(chunk)
        for choice in chunk.get("choices") or []:
            index = _choice_index(choice)
            if index not in self._choices:
                self._choices[index] = self._new_choice(index)
            self._choices[index].feed(choice)

    def _new_choice(self, index: int) -> _ChoiceBuilder:
        raise NotImplementedError

    def result(self) -> dict[str, Any]:
        """The final object so far (a fresh copy; raises ``ValueError`` if nothing was fed)."""
        choices = [self._choices[i].build() for i in sorted(self._choices)]
        return self._header.build(self._result_object, choices)


class ChatAccumulator(_Accumulator):
    """Rebuild a ``chat.completion`` object from ``chat.completion.chunk`` objects.

    Mirrors ``ChatCompletionStreamState``:

    * chunks whose ``object`` is not ``"chat.completion.chunk"`` are skipped (the SDK's stream drops them:
      Azure's asynchronous content filter sends such events);
    * ``id``/``created``/``model``/``service_tier`` come from the first chunk that has them;
      ``system_fingerprint`` and ``usage`` from the *last* chunk, even when it lacks them (the SDK assigns
      ``snapshot.usage = chunk.usage`` on every chunk, so a chunk without usage after the usage chunk
      resets it to ``None``); ``system_fingerprint`` is only emitted when some chunk carried the key;
    * a choice is created the first time its ``index`` is seen; its message is the ``accumulate_delta`` of
      its deltas, so unknown delta keys (``reasoning_content``, ...) are accumulated and kept;
    * tool calls are merged by their ``index`` and keep that ``index`` key in the result, as the SDK's
      final ``ChatCompletion`` does (its models keep extra fields);
    * ``finish_reason`` is the last non-empty one; ``logprobs`` is ``None`` until a chunk carries it, then
      its ``content`` and ``refusal`` lists are concatenated.

    The result's message always has ``role`` (default ``"assistant"``), ``content`` and ``refusal``
    (``None`` when never sent), and choices are sorted by ``index``. Top-level and choice-level keys outside
    the ``chat.completion`` schema are not carried over.
    """

    _chunk_object = "chat.completion.chunk"
    _result_object = "chat.completion"

    def _new_choice(self, index: int) -> _ChoiceBuilder:
        return _ChatChoice(index)


class _TextChoice:
    def __init__(self, index: int) -> None:
        self.index = index
        self.text = ""
        self.logprobs: dict[str, Any] | None = None
        self.finish_reason: Any = None

    def feed(self, choice: Mapping[str, Any]) -> None:
        text = choice.get("text")
        if isinstance(text, str):
            self.text += text
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        logprobs = choice.get("logprobs")
        if logprobs is None:
            return
        if self.logprobs is None:
            self.logprobs = {}
        # Concatenated key by key rather than with accumulate_delta: top_logprobs entries are
        # {token: logprob} maps, and a token spelled "index" must not turn the list into an indexed one.
        for key, value in logprobs.items():
            current = self.logprobs.get(key)
            if isinstance(current, list) and isinstance(value, list):
                current.extend(json_copy(value))
            elif current is None:
                self.logprobs[key] = json_copy(value)

    def build(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "text": self.text,
            "logprobs": json_copy(self.logprobs),
            "finish_reason": self.finish_reason,
        }


class CompletionAccumulator(_Accumulator):
    """Rebuild a legacy ``/v1/completions`` ``text_completion`` object from its stream chunks.

    The SDK has no helper for this endpoint; the rules follow ``ChatAccumulator`` so both behave alike:
    chunks whose ``object`` is not ``"text_completion"`` are skipped, ``text`` is concatenated per choice
    ``index``, the legacy ``logprobs`` lists (``tokens``, ``token_logprobs``, ``top_logprobs``,
    ``text_offset``) are concatenated, ``finish_reason`` is the last non-empty one and ``usage`` comes
    from the last chunk.
    """

    _chunk_object = "text_completion"
    _result_object = "text_completion"

    def _new_choice(self, index: int) -> _ChoiceBuilder:
        return _TextChoice(index)


def accumulate_chat(chunks: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Feed every chunk to a fresh ``ChatAccumulator`` and return its ``chat.completion`` object."""
    accumulator = ChatAccumulator()
    for chunk in chunks:
        accumulator.feed(chunk)
    return accumulator.result()


def accumulate_completion(chunks: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Feed every chunk to a fresh ``CompletionAccumulator`` and return its ``text_completion`` object."""
    accumulator = CompletionAccumulator()
    for chunk in chunks:
        accumulator.feed(chunk)
    return accumulator.result()
