"""How a backend takes ``tool_choice`` and ``parallel_tool_calls`` (issue 15): a small frozen value.

A forced choice (``"required"``, or a named function) reaches the backend one of three ways:

* ``native``: as the client sent it; the backend enforces it (vLLM and SGLang with a tool parser use
  guided decoding; llama.cpp a grammar for ``required``).
* ``required``: only the named function is offered, with ``tool_choice: "required"``: how a backend
  that enforces ``required`` but has no named choice is made to call that one function (llama.cpp).
* ``retry``: the backend cannot enforce it, so it is asked with ``"auto"`` (a named choice: only that
  function offered); the gateway checks the answer, asks once more when the call is missing, and
  then answers an OpenAI-shaped error (TensorRT-LLM's ``required``, Ollama).

``refusal`` is a phrase of the backend's 400 to a forced choice it cannot parse (vLLM started without
``--tool-call-parser``); the gateway then resends the request with ``tool_choice: "none"`` and
``guided`` (the request field the backend reads a JSON schema from, ``{"json": schema}``) set to the
schema of one call, and reads the JSON the model writes as that call.

``verify``: the backend's own enforcement may not hold (seen on llama.cpp with the tiny model's
template), so the answer is checked as for ``retry`` — asked once more without the call, then an
OpenAI-shaped error — while the choice is still sent its native way; the second try is the guided request above (where ``guided`` is set) instead of the same one: llama.cpp's
``required`` grammar is lazy on some templates (L-30) and waits for the model to open a call, which a
model may never do. ``guided_key``: the guided field holds ``{guided_key: schema}`` (vLLM's
``structured_outputs: {json: …}``), or the schema itself when None (llama.cpp's ``json_schema``).

``unparsed``: a phrase of the backend's 500 when what the model wrote under a forced choice did not
parse as the template's call format (llama.cpp, L-31): no call came back, so the answer is judged as one
without the call (asked once more), not passed on as a server fault. Under ``auto`` a plain answer
is asked again with ``none``; a stream ends as the answer the client already has (L-32).

``grammar_done``: a phrase of the backend's error event when the grammar of its guided decoding
(a call's trigger, a ``json_schema``) had completed and one more token came (llama.cpp, L-33): what
was streamed is the whole constrained answer, so the stream ends as that answer.

``counts``: a request field (true) that makes the backend count the tokens on every streamed chunk
(llama.cpp's ``timings_per_token``), sent on a stream under ``auto`` where ``unparsed`` may end it
without its usage: the last count stands in for it.

``text_calls``: patterns (regular expressions) of call formats the gateway reads from text itself
(``transform.toolcalls``), as a chat template writes them. Where the backend's template matches one
(read at detection: ``Family.template_key``), detection sets ``calls_as_text``: a stream under
``auto`` is then sent ``tool_choice: "none"`` with the tools (the template still lists them) and the
gateway reads the calls from the text. llama.cpp's partial parse can stop at call markup it cannot
read and send nothing more: it generates the rest in silence and drops it, ending with L-32's error
(L-34). A pattern names the format, not only its tag: Qwen3-Coder and GLM write ``<tool_call>`` too,
followed by XML the gateway does not read, and keep the backend's parser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ForcedWay = Literal["native", "required", "retry"]

__all__ = ["ForcedWay", "ToolChoiceSupport"]


@dataclass(frozen=True, slots=True)
class ToolChoiceSupport:
    required: ForcedWay = "native"
    named: ForcedWay = "native"
    refusal: str | None = None
    guided: str | None = None
    guided_key: str | None = "json"
    verify: bool = False
    unparsed: str | None = None
    counts: str | None = None
    grammar_done: str | None = None
    none_hides_tools: bool = False  # tool_choice "none": tools (and the choice) are not sent at all
    text_calls: tuple[str, ...] = ()
    calls_as_text: bool = False  # set at detection, from the backend's chat template
    parallel_default: bool = True  # the backend's own default for parallel_tool_calls

    def __post_init__(self) -> None:
        if self.required == "required":
            raise ValueError("'required' is a way for the named choice only")
