"""What the text-repair stages hand each other: typed pieces of one choice's output, in order.

A backend without a reasoning or tool parser sends everything as ``content`` text; the repair
stages (``reasoning``, ``toolcalls``, ``stops``, ``special``) turn that text into these pieces, and
the stream normaliser turns pieces into official deltas. Each stage is ``feed(x) -> list[Piece]`` /
``flush() -> list[Piece]``; concatenating the text of all pieces (plus the markup a stage removed)
gives back the input: nothing is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TextKind = Literal["content", "reasoning"]
# The pieces are not frozen dataclasses (nothing changes one): mypyc builds a frozen dataclass as a
# Python class, whose construction costs several times a native one's, and a stream makes many.
# Each has its own __init__: the one dataclasses generates is interpreted, compiled or not.


@dataclass(slots=True, init=False)
class Text:
    kind: TextKind
    text: str

    def __init__(self, kind: TextKind, text: str) -> None:
        self.kind, self.text = kind, text


@dataclass(slots=True, init=False)
class CallStart:
    """A tool call begins: its 0-based index within the choice, its ``call_…`` id and its name."""

    index: int
    id: str
    name: str

    def __init__(self, index: int, id: str, name: str) -> None:
        self.index, self.id, self.name = index, id, name


@dataclass(slots=True, init=False)
class CallArgs:
    """A piece of a tool call's JSON arguments text."""

    index: int
    text: str

    def __init__(self, index: int, text: str) -> None:
        self.index, self.text = index, text


Piece = Text | CallStart | CallArgs


def join_text(pieces: list[Piece], kind: TextKind) -> str:
    return "".join(p.text for p in pieces if isinstance(p, Text) and p.kind == kind)


def merge(pieces: list[Piece]) -> list[Piece]:
    """Adjacent Text pieces of one kind joined, and adjacent CallArgs of one call: one delta each."""
    out: list[Piece] = []
    for piece in pieces:
        last = out[-1] if out else None
        if isinstance(piece, Text) and isinstance(last, Text) and last.kind == piece.kind:
            out[-1] = Text(piece.kind, last.text + piece.text)
        elif isinstance(piece, CallArgs) and isinstance(last, CallArgs) and last.index == piece.index:
            out[-1] = CallArgs(piece.index, last.text + piece.text)
        elif not (isinstance(piece, (Text, CallArgs)) and piece.text == ""):
            out.append(piece)
    return out
