"""``reasoning_effort`` (chat; the Responses API's ``reasoning.effort`` is mapped to it): sent the way
the backend takes it, so that ``none``/``minimal`` really turn thinking off.

The profile's :class:`~oaishim.profiles._reasoning_effort.ReasoningEffortIn` says how: the value
goes on as it is, as its nearest stand-in, or not at all; and where the backend's templates switch
thinking through ``chat_template_kwargs``, the switch is set (false for off; true for on where the
profile asks). The client's own ``chat_template_kwargs`` entries are kept and win, as the backends'
own code lets an explicit template kwarg win over ``reasoning_effort``.

What this cannot guarantee (no switch, a template that ignores it, a model that thinks anyway) the
response side does: :class:`Thinking` tells it that thinking is off, and it drops any reasoning.
Values the official API refuses never get here (``transform.validate`` answers its 400).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from oaishim.profiles._base import Profile
from oaishim.profiles._reasoning_effort import OFF_EFFORTS

FIELD: Final = "reasoning_effort"


@dataclass(frozen=True, slots=True)
class Thinking:
    """What the response side must know. ``off``: the client turned thinking off. ``closed``: the
    request reached the template in a way that closes its ``<think>`` (so an answer that starts in
    reasoning is not expected); false where it may not have."""

    off: bool = False
    closed: bool = False
    added: tuple[str, ...] = ()  # the chat_template_kwargs switches the gateway set (not the client's own)


THINKING_ON: Final = Thinking()  # what a request without reasoning_effort (or with thinking on) gets


def translate(client: dict[str, Any], out: dict[str, Any], profile: Profile, dropped: list[str]) -> Thinking:
    """Rewrite ``out`` (the upstream body, a top-level copy of ``client``) for the profile."""
    effort = client.get(FIELD)
    out.pop(FIELD, None)
    if not isinstance(effort, str):  # null: the default, as for every optional field
        return THINKING_ON
    how = profile.reasoning_effort_in
    off = effort in OFF_EFFORTS
    sent = how.sent(effort)
    if sent is not None:
        out[FIELD] = sent
    switched = bool(how.switch) and (off or how.switch_on)
    added: tuple[str, ...] = ()
    if switched:
        kwargs = out.get("chat_template_kwargs")
        if kwargs is None or isinstance(kwargs, dict):  # anything else is the client's own affair
            merged: dict[str, Any] = dict.fromkeys(how.switch, not off)
            merged.update(kwargs or {})
            out["chat_template_kwargs"] = merged
            added = tuple(k for k in how.switch if k not in (kwargs or {}))
    if sent is None and not switched and FIELD not in dropped:
        dropped.append(FIELD)  # nothing of it reaches the backend (with thinking off, the answer still obeys)
    # a switch the backend may refuse (and be asked again without) is not sure to reach the template
    sure = switched and how.switch_refusal is None
    return Thinking(off=off, closed=off and (sure or (how.native_off and sent in OFF_EFFORTS)), added=added)


def without_switch(body: dict[str, Any], thinking: Thinking) -> dict[str, Any] | None:
    """``body`` without the switches the gateway added (the client's own ``chat_template_kwargs``
    stay), for a backend that refused them because its template does not read them (the profile's
    ``switch_refusal``); None when the gateway added none. The answer then still obeys thinking
    off: the response side drops any reasoning (``Thinking.off``)."""
    kwargs = body.get("chat_template_kwargs")
    if not thinking.added or not isinstance(kwargs, dict):
        return None
    rest = {k: v for k, v in kwargs.items() if k not in thinking.added}
    out = {k: v for k, v in body.items() if k != "chat_template_kwargs"}
    if rest:
        out["chat_template_kwargs"] = rest
    return out


__all__ = ["FIELD", "THINKING_ON", "Thinking", "translate", "without_switch"]
