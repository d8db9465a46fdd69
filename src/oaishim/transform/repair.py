"""Text repair for one choice: the stages a backend without parsers needs, in one pipeline.

Order matters and follows what the backend itself would have done: stop strings are matched on
the raw text (backends apply ``stop`` before any parsing); special tokens are kept whole; then
``<think>`` blocks become reasoning; then tool calls written as text become tool calls (only in
content, and only when the request offered tools); last, the display cleanup (when asked) strips
named markup from the reasoning and content text, never from a tool call's name or arguments. Each stage holds back only what a tag or stop
string could still need, so the stream is delayed by a few characters at most, and ``flush()``
hands everything back: no character is lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from oaishim.transform.cleanup import DisplayCleanup, display_markup
from oaishim.transform.pieces import Piece, Text, TextKind
from oaishim.transform.reasoning import ReasoningSplitter, passes_fresh
from oaishim.transform.special import SpecialTokens
from oaishim.transform.stops import StopMatcher
from oaishim.transform.toolcalls import ToolCallParser, ToolFormat

TOOL_FORMATS: Final[tuple[ToolFormat, ...]] = ("hermes", "minimax", "llama3", "mistral")


# Not frozen: mypyc builds a frozen dataclass as a Python class (sse.SSEEvent); its own __init__,
# compiled (as transform.context.ResponseContext).
@dataclass(slots=True, init=False)
class RepairPlan:
    """What to repair, decided once per request from the profile, the settings and the request."""

    reasoning: bool = True
    starts_in_reasoning: bool = False
    tools: bool = False
    tool_formats: tuple[ToolFormat, ...] = TOOL_FORMATS
    tool_names: frozenset[str] = frozenset()
    stops: tuple[str, ...] = ()
    include_stop: bool = False
    special: SpecialTokens | None = None
    cleanup: bool = False  # strip display markup from reasoning and content: see ``display_markup``
    markup: frozenset[str] = frozenset()  # literal markup named in configuration, stripped by the cleanup

    def __init__(
        self,
        *,
        reasoning: bool = True,
        starts_in_reasoning: bool = False,
        tools: bool = False,
        tool_formats: tuple[ToolFormat, ...] = TOOL_FORMATS,
        tool_names: frozenset[str] = frozenset(),
        stops: tuple[str, ...] = (),
        include_stop: bool = False,
        special: SpecialTokens | None = None,
        cleanup: bool = False,
        markup: frozenset[str] = frozenset(),
    ) -> None:
        self.reasoning, self.starts_in_reasoning, self.tools = reasoning, starts_in_reasoning, tools
        self.tool_formats, self.tool_names = tool_formats, tool_names
        self.stops, self.include_stop = stops, include_stop
        self.special, self.cleanup, self.markup = special, cleanup, markup

    @property
    def active(self) -> bool:
        return self.reasoning or self.tools or bool(self.stops) or self.special is not None or self.cleanup


@dataclass(slots=True, init=False)  # its own __init__, compiled (as transform.context.ResponseContext)
class TextRepair:
    plan: RepairPlan
    stopper: StopMatcher | None
    holder: DisplayCleanup | None
    cleaner: DisplayCleanup | None
    _cleaning: TextKind | None  # the kind of text the cleaner holds
    splitter: ReasoningSplitter | None
    parser: ToolCallParser | None
    done: bool  # every stage flushed: the text is complete

    def __init__(self, plan: RepairPlan) -> None:
        self.plan = plan
        self._cleaning = None
        self.done = False
        self.stopper = StopMatcher(plan.stops, include_stop=plan.include_stop) if plan.stops else None
        # Every special token kept whole and an end-of-turn token ends the text (it used to flow
        # on: the signal a cleanup regex once ate). Markup is stripped only at the end, from display text.
        self.holder = DisplayCleanup(plan.special, end_at_end_of_turn=True) if plan.special is not None else None
        strip = display_markup(plan.special or SpecialTokens(), plan.markup) if plan.cleanup else frozenset()
        self.cleaner = DisplayCleanup(SpecialTokens(), markup=strip) if strip else None
        self.splitter = ReasoningSplitter(starts_in_reasoning=plan.starts_in_reasoning) if plan.reasoning else None
        self.parser = ToolCallParser(plan.tool_formats, tool_names=plan.tool_names) if plan.tools else None

    @property
    def stopped(self) -> bool:
        """A stop string was hit, or an end-of-turn token passed: the text is complete and the
        upstream can be closed (a backend that missed its own end of turn keeps generating)."""
        return (self.stopper is not None and self.stopper.hit is not None) or self.saw_end_of_turn

    @property
    def saw_end_of_turn(self) -> bool:
        """An end-of-turn token passed: the turn is over whatever the display shows."""
        return self.holder is not None and self.holder.saw_end_of_turn

    @property
    def calls_made(self) -> int:
        return self.parser.calls_made if self.parser is not None else 0

    def applied(self) -> list[str]:
        """The repairs this text needed, by kind (asked once, when the choice ends)."""
        kinds = []
        if self.splitter is not None and self.splitter.split:
            kinds.append("think_split")
        if self.calls_made:
            kinds.append("tool_calls_parsed")
        if self.stopper is not None and self.stopper.hit is not None:
            kinds.append("stop_enforced")
        if self.saw_end_of_turn:
            kinds.append("end_of_turn")
        return kinds

    def passes(self, text: str) -> TextKind | None:
        """The kind ``text`` would come out as, one piece unchanged with no stage's state touched,
        or None when ``feed`` could do anything else (only the reasoning splitter is asked; with any
        other stage on, None)."""
        if self.done or self.stopper is not None or self.holder is not None or self.parser is not None:
            return None
        if self.cleaner is not None:
            return None
        if self.splitter is None:
            return "content"
        return self.splitter.passes(text)

    def feed(self, text: str) -> list[Piece]:
        if self.stopper is not None:
            text = self.stopper.feed(text)
        return self._after_stops(text, final=self.stopped)

    def flush(self) -> list[Piece]:
        text = self.stopper.flush() if self.stopper is not None else ""
        return self._after_stops(text, final=True)

    def _after_stops(self, text: str, *, final: bool) -> list[Piece]:
        if self.done:
            return []
        self.done = final
        if self.holder is not None:
            text = self.holder.feed(text) + (self.holder.flush() if final else "")
        pieces: list[Piece] = []
        if self.splitter is not None:
            pieces = self.splitter.feed(text) if text else []
            if final:
                pieces += self.splitter.flush()
        elif text:
            pieces = [Text("content", text)]
        if self.parser is not None:
            parsed: list[Piece] = []
            for piece in pieces:
                if isinstance(piece, Text) and piece.kind == "content":
                    parsed += self.parser.feed(piece.text)
                else:
                    parsed.append(piece)
            if final:
                parsed += self.parser.flush()
            pieces = parsed
        return self._clean(pieces, final=final) if self.cleaner is not None else pieces

    def _clean(self, pieces: list[Piece], *, final: bool) -> list[Piece]:
        """Strip markup from runs of text of one kind; a call or a change of kind ends a run, and
        what the cleaner held of it goes out first, so the order of pieces is kept."""
        out: list[Piece] = []
        for piece in pieces:
            if isinstance(piece, Text):
                if self._cleaning not in (None, piece.kind):
                    out += self._end_run()
                self._cleaning = piece.kind
                assert self.cleaner is not None
                text = self.cleaner.feed(piece.text)
                if text:
                    out.append(Text(piece.kind, text))
            else:
                out += self._end_run()
                out.append(piece)
        if final:
            out += self._end_run()
        return out

    def _end_run(self) -> list[Piece]:
        kind, self._cleaning = self._cleaning, None
        assert self.cleaner is not None
        held = self.cleaner.flush()
        return [Text(kind, held)] if kind is not None and held else []


def plan_tool_names(tools: Sequence[object] | None) -> frozenset[str]:
    names: list[str] = []
    for tool in tools or ():
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.append(fn["name"])
    return frozenset(names)


def _splits_only(plan: RepairPlan) -> bool:
    """The plan's only stage is the reasoning splitter, starting in content."""
    return (
        plan.reasoning
        and not plan.starts_in_reasoning
        and not plan.tools
        and not plan.stops
        and plan.special is None
        and not plan.cleanup
    )


def repair_text(text: str, plan: RepairPlan, applied: set[str] | None = None) -> tuple[list[Piece], bool]:
    """A whole text at once (plain bodies): the same pipeline, so both paths agree. The kinds of
    repair it needed are added to ``applied`` when given."""
    if _splits_only(plan) and text and passes_fresh(text):
        # The common answer: no tag in it, and no other stage on. The pipeline would give it back
        # whole as content and apply nothing; building it is most of a plain answer's repair cost.
        return [Text("content", text)], False
    repair = TextRepair(plan)
    pieces = repair.feed(text) + repair.flush()
    if applied is not None:
        applied.update(repair.applied())
    return pieces, repair.stopped


__all__ = ["RepairPlan", "TextRepair", "plan_tool_names", "repair_text"]
