"""How a backend takes ``reasoning_effort``: the values it reads, and its thinking switch.

The official values (``ReasoningEffort`` in the vendored spec) are ``none``, ``minimal``, ``low``,
``medium``, ``high``, ``xhigh`` and ``max``. The gateway reads ``none`` and ``minimal`` as "thinking
off" and the rest as "thinking on, at this effort". Backends differ in three ways, each a field:

* which values their own ``reasoning_effort`` field accepts (a value outside that set is a 400 on
  pydantic servers), and which nearest value stands in for one they lack;
* whether the request can switch a chat template's thinking, and by which ``chat_template_kwargs``
  booleans (``enable_thinking`` for Qwen3-style templates, ``thinking`` for DeepSeek-V3.1/Kimi);
* whether "off" reaches the template at all. Where it does not, the gateway still keeps its promise
  on the response side: with thinking off no reasoning reaches the client.
"""

from __future__ import annotations

from dataclasses import dataclass

OFFICIAL_EFFORTS: frozenset[str] = frozenset({"none", "minimal", "low", "medium", "high", "xhigh", "max"})
OFF_EFFORTS: frozenset[str] = frozenset({"none", "minimal"})  # what "thinking off" is spelled as


@dataclass(frozen=True, slots=True)
class ReasoningEffortIn:
    """One backend's way of taking ``reasoning_effort``. The defaults are the official API's.

    efforts: the values sent on as ``reasoning_effort`` (after ``nearest``); ``None``: the field is
      never sent (the backend rejects it, or the notes do not say it has one).
    nearest: pairs (a value the backend lacks or misreads, the one sent instead), e.g. ``("xhigh", "high")``.
    switch: ``chat_template_kwargs`` booleans set to false for thinking off (the client's own
      ``chat_template_kwargs`` entries win); empty: the request has no such switch.
    switch_on: the same keys are set to true for ``low``…``max`` (templates where thinking is opt-in,
      on backends that do not do it themselves).
    native_off: the backend itself turns thinking off for what is sent (``reasoning_effort: none``)
      in every template, so the template's own ``<think>`` opening is closed.
    switch_refusal: a phrase of the backend's 400 to a switch the active template does not read (a
      guard that checks ``chat_template_kwargs`` against the template); the gateway then sends the
      request again without the switches it added. None: the backend never refuses them.
    """

    efforts: frozenset[str] | None = OFFICIAL_EFFORTS
    nearest: tuple[tuple[str, str], ...] = ()  # pairs, not a dict: profiles stay hashable
    switch: tuple[str, ...] = ()
    switch_on: bool = False
    native_off: bool = True
    switch_refusal: str | None = None

    def sent(self, effort: str) -> str | None:
        """What is sent as ``reasoning_effort`` for the client's ``effort`` (None: nothing)."""
        value = dict(self.nearest).get(effort, effort)
        return value if self.efforts is not None and value in self.efforts else None

    @property
    def honours_off(self) -> bool:
        """Thinking off reaches the template: by the backend's own field or by the switch."""
        return self.native_off or bool(self.switch)


OFFICIAL_WAY = ReasoningEffortIn()  # the default: every value sent as it is, the backend turns thinking off itself

__all__ = ["OFFICIAL_EFFORTS", "OFFICIAL_WAY", "OFF_EFFORTS", "ReasoningEffortIn"]
