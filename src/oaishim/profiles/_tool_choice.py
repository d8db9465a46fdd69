"""How a backend takes ``tool_choice`` and ``parallel_tool_calls`` (issue 15): a small frozen value.

A forced choice (``"required"``, or a named function) reaches the backend one of three ways:

* ``native``: as the client sent it; the backend enforces it (vLLM and SGLang with a tool parser use
  guided decoding; llama.cpp a grammar for ``required``).
* ``required``: only the named function is offered, with ``tool_choice: "required"``: how a backend
  that enforces ``required`` but has no named choice is made to call that one function (llama.cpp).
* ``retry``: the backend cannot enforce it, so it is asked with ``"auto"`` (a named choice: only that
  function offered); the gateway checks the answer, asks once more when the call is missing, and
  then answers an OpenAI-shaped error (TensorRT-LLM's ``required``, Ollama).

``verify``: the backend is meant to enforce the choice but was seen not to (llama.cpp with a template
whose tool-call format its grammar does not cover): the answer is checked as for ``retry`` — asked once
more without the call, then an OpenAI-shaped error — while the choice is still sent its native way.

``refusal`` is a phrase of the backend's 400 to a forced choice it cannot parse (vLLM started without
``--tool-call-parser``); the gateway then resends the request with ``tool_choice: "none"`` and
``guided`` (the request field the backend reads a JSON schema from, ``{"json": schema}``) set to the
schema of one call, and reads the JSON the model writes as that call.
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
    none_hides_tools: bool = False  # tool_choice "none": tools (and the choice) are not sent at all
    parallel_default: bool = True  # the backend's own default for parallel_tool_calls
    verify: bool = False  # check the answer even where the backend is meant to enforce the choice

    def __post_init__(self) -> None:
        if self.required == "required":
            raise ValueError("'required' is a way for the named choice only")
