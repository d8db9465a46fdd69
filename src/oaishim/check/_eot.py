"""Rule f: the end of a turn is never lost.

A proxy whose cleanup regex ate ``<|im_end|>`` left a front end waiting forever. Given the model's
special tokens (``CheckOptions.special_tokens``; the end-of-turn ones in ``eot_tokens``):

* ``eot.split-token``: no special token is cut across two content deltas; a client that inspects
  each delta for the tag must see it whole;
* ``eot.truncated``: a choice that finished with ``stop`` does not end with a dangling prefix of a
  special token (the tail of a tag lost on the way);
* ``eot.stripped``: when the request asked to keep special tokens (``skip_special_tokens: false``)
  and the turn ended with ``stop``, the text ends with an end-of-turn token.

Without special tokens these rules have nothing to protect and report nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from oaishim.check._findings import Sink, jpath
from oaishim.check._model import CheckOptions


def _dangling_prefix(text: str, tokens: frozenset[str]) -> str | None:
    """The longest proper prefix (2+ characters) of a token that ``text`` ends with."""
    best: str | None = None
    for token in tokens:
        for size in range(min(len(token) - 1, len(text)), 1, -1):
            if text.endswith(token[:size]):
                if best is None or size > len(best):
                    best = token[:size]
                break
    return best


def check_split_tokens(pieces: list[tuple[int, str, str]], index: int, options: CheckOptions, sink: Sink) -> None:
    """``pieces``: (chunk number, path of the choice, content delta) of one choice, in order."""
    tokens = options.special_tokens | options.eot_tokens
    if not tokens:
        return
    for (n, _, left), (m, path, right) in itertools.pairwise(pieces):
        for token in tokens:
            for cut in range(1, len(token)):
                if left.endswith(token[:cut]) and right.startswith(token[cut:]):
                    sink.add(
                        "eot.split-token",
                        path,
                        f"choice {index}: special token {token!r} cut across chunks {n} and {m}",
                        chunk=m,
                    )
                    break


def check_final_text(
    text: str | None,
    finish: Any,
    index: int,
    request: Mapping[str, Any] | None,
    options: CheckOptions,
    sink: Sink,
) -> None:
    tokens = options.special_tokens | options.eot_tokens
    if not tokens or finish != "stop" or text is None:
        return
    path = jpath("choices", index)
    tail = _dangling_prefix(text, tokens)
    if tail is not None and not any(text.endswith(t) for t in tokens):
        sink.add("eot.truncated", path, f"choice {index}: text ends with {tail!r}, the start of a special token")
    keep = request is not None and request.get("skip_special_tokens") is False
    if keep and options.eot_tokens and not any(text.endswith(t) for t in options.eot_tokens):
        sink.add(
            "eot.stripped",
            path,
            f"choice {index}: special tokens were to be kept, but no end-of-turn token ends the text",
        )
