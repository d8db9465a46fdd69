"""A case's own expectations, beyond the checker: the effects a parameter must have. Pure.

Each entry of :data:`EXPECTATIONS` takes the expectation's parameters (from ``cases.yaml``), the
views of the case's steps by name, and the run's :class:`Context`, and gives a :class:`Verdict`:
``pass``, ``fail`` (a finding of the expectation's severity) or ``skip`` ("cannot tell": the effect
is not observable here, e.g. no way to force the text). A skipped check is not counted in the score.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema_rs
import orjson

from oaishim.probe._view import StepView

__all__ = ["EXPECTATIONS", "Context", "Verdict"]

Outcome = Literal["pass", "fail", "skip"]
NOT_HONOURED = "tool_choice_not_honoured"  # a gateway's error for a forced call the model did not make


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    message: str
    path: str = "$"


@dataclass(frozen=True, slots=True)
class Context:
    model: str
    exact_text: bool = True  # the server can be made to write a given text
    tool_calls_forceable: bool = True  # the server can be made to call a tool
    steered: frozenset[str] = frozenset()  # steps whose text was steered
    steered_tools: frozenset[str] = frozenset()  # steps steered towards a tool call
    variables: Mapping[str, Any] = field(default_factory=dict)


Views = Mapping[str, StepView]
Check = Callable[[Mapping[str, Any], Views, Context], Verdict]


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _answered(view: StepView, name: str) -> Verdict | None:
    if view.transport_error:
        return Verdict("fail", f"step {name}: no answer ({view.transport_error})")
    if not view.ok:
        return Verdict("fail", f"step {name}: HTTP {view.status}: {_short(view.error)}")
    return None


def _text_check(
    params: Mapping[str, Any], views: Views, ctx: Context, test: Callable[[str], bool], what: str
) -> Verdict:
    name = params["step"]
    view = views[name]
    if (bad := _answered(view, name)) is not None:
        return bad
    text = view.text() or ""
    if test(text):
        return Verdict("pass", f"step {name}: text {what}")
    if name in ctx.steered and not ctx.exact_text:
        return Verdict("skip", f"cannot tell: the text could not be forced (prompt only); got {_short(text)}")
    return Verdict("fail", f"step {name}: text {_short(text)} is not {what}", "$.choices[0]")


def _status(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    view, wanted = views[params["step"]], list(params.get("in") or [200])
    if view.status in wanted:
        return Verdict("pass", f"HTTP {view.status}")
    got = view.transport_error or f"HTTP {view.status} {_short(view.error or view.result, 120)}"
    return Verdict("fail", f"step {params['step']}: {got}; expected HTTP {' or '.join(map(str, wanted))}")


def _same_text(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    a, b = params["steps"]
    for name in (a, b):
        if (bad := _answered(views[name], name)) is not None:
            return bad
    ta, tb = views[a].text(), views[b].text()
    if ta is not None and ta == tb:
        return Verdict("pass", f"the same text twice: {_short(ta)}")
    if ta is None and tb is None:  # a reasoning parser took the whole answer (no </think> came)
        return Verdict("skip", f"cannot tell: neither step {a} nor step {b} gave text to compare")
    return Verdict("fail", f"step {a} gave {_short(ta)}, step {b} gave {_short(tb)}")


def _different_text(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    a, b = params["steps"]
    for name in (a, b):
        if (bad := _answered(views[name], name)) is not None:
            return bad
    ta, tb = views[a].text(), views[b].text()
    if ta != tb:
        return Verdict("pass", "the texts differ")
    return Verdict("fail", f"steps {a} and {b} gave the same text {_short(ta)}")


def _text_equals(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    want = str(params["text"])
    return _text_check(params, views, ctx, lambda t: t == want, f"exactly {_short(want)}")


def _text_contains(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    want = str(params["text"])
    return _text_check(params, views, ctx, lambda t: want in t, f"holding {_short(want)}")


def _text_lacks(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    want = str(params["text"])
    return _text_check(params, views, ctx, lambda t: want not in t, f"free of {_short(want)}")


def _text_ends_with(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    want = str(params["text"])
    return _text_check(params, views, ctx, lambda t: t.endswith(want), f"ending with {_short(want)}")


def _text_cut_at_stop(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    """The stopped text is the full text up to the stop string (and including it when asked)."""
    name, full_name, stop = params["step"], params["full"], str(params["stop"])
    for n in (name, full_name):
        if (bad := _answered(views[n], n)) is not None:
            return bad
    full = views[full_name].text() or ""
    if stop not in full:
        return Verdict("skip", f"cannot tell: the unstopped text never reaches {stop!r} ({_short(full)})")
    want = full.split(stop, 1)[0] + (stop if params.get("include") else "")
    got, finish = views[name].text(), views[name].finish_reason()
    if got == want and finish == "stop":
        return Verdict("pass", f"text cut to {_short(want)}, finish_reason stop")
    return Verdict(
        "fail", f"step {name}: text {_short(got)} with finish_reason {finish!r}; expected {_short(want)} and 'stop'"
    )


def _unforceable(views: Views, name: str, ctx: Context) -> Verdict | None:
    """The call could not be forced here and the endpoint said the model did not make it (a gateway
    that checks a forced choice answers ``tool_choice_not_honoured``): not the endpoint's fault."""
    error = views[name].error
    if name in ctx.steered_tools and not ctx.tool_calls_forceable and error and error.get("code") == NOT_HONOURED:
        return Verdict(
            "skip", f"cannot tell: no way was found to make this model call a tool (HTTP {views[name].status})"
        )
    return None


def _tool_call(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    name = params["step"]
    if (unforced := _unforceable(views, name, ctx)) is not None:
        return unforced
    if (bad := _answered(views[name], name)) is not None:
        return bad
    calls = views[name].tool_calls()
    if not calls and name in ctx.steered_tools and not ctx.tool_calls_forceable:
        return Verdict("skip", "cannot tell: no way was found to make this model call a tool")
    if not calls:
        return Verdict("fail", f"step {name}: no tool call (text {_short(views[name].text())})", "$.choices[0].message")
    function = calls[0].get("function")
    called, arguments = (
        (function.get("name"), function.get("arguments")) if isinstance(function, Mapping) else (None, None)
    )
    if params.get("name") and called != params["name"]:
        return Verdict("fail", f"step {name}: called {called!r}, not {params['name']!r}")
    try:
        parsed = orjson.loads(arguments) if isinstance(arguments, str) else None
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        if views[name].finish_reason() == "length":  # the call was made; the token limit cut its arguments
            return Verdict("skip", f"cannot tell: the arguments were cut by the token limit ({_short(arguments)})")
        return Verdict("fail", f"step {name}: arguments {_short(arguments)} are not a JSON object text")
    return Verdict("pass", f"called {called}({_short(parsed, 60)})")


def _no_tool_call(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    name = params["step"]
    if (bad := _answered(views[name], name)) is not None:
        return bad
    view = views[name]
    if view.tool_calls() or view.finish_reason() == "tool_calls":
        return Verdict("fail", f"step {name}: a tool call although tool_choice forbids it", "$.choices[0]")
    return Verdict("pass", "no tool call")


def _finish_reason(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    name, wanted = params["step"], list(params["in"])
    if (bad := _answered(views[name], name)) is not None:
        return bad
    got = views[name].finish_reason()
    if got in wanted:
        return Verdict("pass", f"finish_reason {got!r}")
    if got == "length":  # the token limit ended it first: how it would have finished is not seen
        return Verdict("skip", f"cannot tell: step {name} was cut by the token limit (finish_reason 'length')")
    return Verdict("fail", f"step {name}: finish_reason {got!r}, expected {' or '.join(map(repr, wanted))}")


def _choices(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    name, want = params["step"], int(params["count"])
    if (bad := _answered(views[name], name)) is not None:
        return bad
    indices = sorted({c.get("index") for c in views[name].choices()}, key=repr)
    if indices == list(range(want)):
        return Verdict("pass", f"{want} choices")
    return Verdict("fail", f"step {name}: choices {indices}, expected indices 0..{want - 1}", "$.choices")


def _distinct_choices(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    """``n`` had its effect: ``count`` choices, indices 0 … count-1, no two alike (a sampling request:
    n copies sampled under one seed, or one choice repeated, would be alike)."""
    name, want = params["step"], int(params["count"])
    if (bad := _answered(views[name], name)) is not None:
        return bad
    view = views[name]
    indices = sorted({c.get("index") for c in view.choices()}, key=repr)
    if indices != list(range(want)):
        return Verdict("fail", f"n had no effect: step {name} asked n: {want} and got choices {indices}", "$.choices")
    answers = [(view.text(i), view.reasoning(i)) for i in range(want)]
    if len(set(answers)) < want:
        shown = ", ".join(_short(text, 30) for text, _ in answers)
        return Verdict("fail", f"n gave {want} choices but not {want} distinct ones: {shown}", "$.choices")
    return Verdict("pass", f"{want} distinct choices")


def _completion_tokens_at_most(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    name, limit = params["step"], int(params["limit"])
    if (bad := _answered(views[name], name)) is not None:
        return bad
    used = views[name].usage_count("completion_tokens")
    if used is None:
        return Verdict("fail", f"step {name}: no usage.completion_tokens to tell the limit's effect")
    if used <= limit:
        return Verdict("pass", f"{used} completion tokens (limit {limit})")
    return Verdict("fail", f"step {name}: {used} completion tokens, limit {limit}", "$.usage.completion_tokens")


def _prompt_tokens(params: Mapping[str, Any], views: Views, ctx: Context, *, greater: bool) -> Verdict:
    a, b = params["steps"]
    for name in (a, b):
        if (bad := _answered(views[name], name)) is not None:
            return bad
    pa, pb = views[a].usage_count("prompt_tokens"), views[b].usage_count("prompt_tokens")
    if pa is None or pb is None:
        return Verdict("skip", "cannot tell: usage.prompt_tokens missing")
    good = pa > pb if greater else pa == pb
    relation = ">" if greater else "=="
    verdict: Outcome = "pass" if good else "fail"
    return Verdict(verdict, f"prompt_tokens {a}={pa} {'' if good else 'not '}{relation} {b}={pb}")


def _usage(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    name, present = params["step"], bool(params["present"])
    if (bad := _answered(views[name], name)) is not None:
        return bad
    has = views[name].usage is not None
    if has == present:
        return Verdict("pass", "usage present" if has else "no usage")
    return Verdict(
        "fail", f"step {name}: usage {'present' if has else 'absent'}, expected {'present' if present else 'absent'}"
    )


def _error_field(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    name, key, want = params["step"], str(params["field"]), params["equals"]
    error = views[name].error
    got = error.get(key) if error is not None else None
    if error is not None and got == want:
        return Verdict("pass", f"error.{key} = {want!r}")
    return Verdict("fail", f"step {name}: error.{key} is {_short(got)}, expected {want!r}", f"$.error.{key}")


def _model_listed(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    name = params["step"]
    if (bad := _answered(views[name], name)) is not None:
        return bad
    result = views[name].result
    data = result.get("data") if isinstance(result, Mapping) else None
    ids = [m.get("id") for m in data if isinstance(m, Mapping)] if isinstance(data, list) else []
    if ctx.model in ids:
        return Verdict("pass", f"{ctx.model!r} listed")
    return Verdict("fail", f"{ctx.model!r} not among {_short(ids)}", "$.data")


def _unknown_field_rejected(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    view = views[params["step"]]
    if view.status == 400 and view.error is not None:
        return Verdict("pass", f"rejected: {_short(view.error.get('message'))}")
    return Verdict(
        "fail",
        f"HTTP {view.status}: the unknown field was accepted and ignored "
        "(the official API answers 400 'Unrecognized request argument supplied')",
    )


def _token_in_one_chunk(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    """A special token arrives whole in one content delta (clients look for the end of turn in each delta)."""
    name, token = params["step"], str(params["text"])
    if (bad := _answered(views[name], name)) is not None:
        return bad
    deltas = []
    for chunk in views[name].chunks:
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, Mapping) else None
            if isinstance(delta, Mapping) and isinstance(delta.get("content"), str) and delta["content"]:
                deltas.append(delta["content"])
    if any(token in d for d in deltas):
        return Verdict("pass", f"{token!r} arrived whole in one delta")
    if token not in "".join(deltas):
        if name in ctx.steered and not ctx.exact_text:
            return Verdict("skip", f"cannot tell: the text could not be forced to hold {token!r}")
        return Verdict("fail", f"step {name}: {token!r} never arrived")
    pieces = [d for d in deltas if d and (d in token or token.startswith(d) or token.endswith(d))]
    return Verdict("fail", f"step {name}: {token!r} arrived cut into pieces {_short(pieces)}")


def _bias_token_appears(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    token = ctx.variables.get("bias_token")
    if not isinstance(token, str):
        return Verdict("skip", "cannot tell: no single-token word found to bias")
    return _text_check(params, views, ctx, lambda t: token in t, f"holding the biased token {token!r}")


def _reasoning_equals(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    """The reasoning a client reads: chat ``reasoning_content``; a response's ``reasoning`` item with
    ``reasoning_text`` parts (the raw reasoning, as the official API gives open-weight models')."""
    name, want = params["step"], str(params["text"])
    if (bad := _answered(views[name], name)) is not None:
        return bad
    got = views[name].reasoning()
    if got == want:
        return Verdict("pass", f"step {name}: reasoning exactly {_short(want)}")
    if name in ctx.steered and not ctx.exact_text:
        return Verdict("skip", f"cannot tell: the text could not be forced (prompt only); reasoning {_short(got)}")
    where = "a reasoning item's reasoning_text" if views[name].responses else "reasoning_content"
    return Verdict("fail", f"step {name}: {where} is {_short(got)}, not {_short(want)}", "$.output")


def _response_status(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    name, wanted = params["step"], list(params.get("in") or ["completed"])
    if (bad := _answered(views[name], name)) is not None:
        return bad
    if not views[name].responses:
        return Verdict("fail", f"step {name}: no response object (a stream without a terminal event?)")
    got = views[name].response_status
    if got in wanted:
        return Verdict("pass", f"status {got!r}")
    return Verdict("fail", f"step {name}: status {got!r}, expected {' or '.join(map(repr, wanted))}", "$.status")


def _json_matches_schema(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    """The text parses as JSON that the schema accepts (``text.format`` / ``response_format``)."""
    name, schema = params["step"], params["schema"]
    if (bad := _answered(views[name], name)) is not None:
        return bad
    view, text = views[name], views[name].text() or ""
    if view.finish_reason() == "length":
        return Verdict("skip", f"cannot tell: the output was cut by the token limit ({_short(text)})")
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = _NOT_JSON
    errors = [] if value is _NOT_JSON else [e.message for e in jsonschema_rs.validator_for(schema).iter_errors(value)]
    if value is not _NOT_JSON and not errors:
        return Verdict("pass", f"step {name}: {_short(value, 60)} matches the schema")
    if not ctx.exact_text:
        return Verdict("skip", f"cannot tell: this endpoint's output cannot be forced; got {_short(text)}")
    what = "is not JSON" if value is _NOT_JSON else f"does not match the schema ({_short(errors[0])})"
    return Verdict("fail", f"step {name}: text {_short(text)} {what}", "$.output")


_NOT_JSON = object()
_THINK_TAGS = ("<think>", "</think>")


def _no_reasoning(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    """Thinking turned off (``reasoning_effort`` none/minimal): no reasoning reaches the client, neither in
    a reasoning field nor as ``<think>`` text in the content. A failure names the parameter."""
    name, param, value = params["step"], str(params.get("param", "reasoning_effort")), params.get("value")
    if (bad := _answered(views[name], name)) is not None:
        return bad
    reasoning, text = views[name].reasoning() or "", views[name].text() or ""
    leaked = reasoning or next((text for tag in _THINK_TAGS if tag in text), "")
    if not leaked:
        return Verdict("pass", f"step {name}: no reasoning with {param} {value!r}")
    if name in ctx.steered and not ctx.exact_text:
        return Verdict("skip", f"cannot tell: the text could not be forced (prompt only); got {_short(leaked)}")
    where = "as reasoning" if reasoning else "in the content"
    return Verdict(
        "fail", f"{param} {value!r} had no effect: step {name} still gave reasoning {where}: {_short(leaked)}"
    )


def _param_changes_prompt(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    """The first step's parameter reached the prompt (the chat template): more prompt tokens than without it."""
    verdict = _prompt_tokens(params, views, ctx, greater=True)
    if verdict.outcome != "fail":
        return verdict
    param, value = params.get("param", "the parameter"), params.get("value")
    return Verdict("fail", f"{param} {value!r} had no effect on the prompt: {verdict.message}", verdict.path)


# -- issue 15: tool_choice and parallel_tool_calls ---------------------------------------------------


def _forced_call(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    """``tool-call``, whose failure names the parameter that had no effect (``param``, e.g.
    ``tool_choice: required``)."""
    verdict = _tool_call(params, views, ctx)
    if verdict.outcome != "fail":
        return verdict
    return Verdict("fail", f"{params.get('param', 'tool_choice')} had no effect: {verdict.message}", verdict.path)


def _tool_calls_at_most(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    name, most = params["step"], int(params.get("count", 1))
    if (unforced := _unforceable(views, name, ctx)) is not None:
        return unforced
    if (bad := _answered(views[name], name)) is not None:
        return bad
    calls = views[name].tool_calls()
    if not calls and name in ctx.steered_tools and not ctx.tool_calls_forceable:
        return Verdict("skip", "cannot tell: no way was found to make this model call a tool")
    if len(calls) > most:
        what = params.get("param", "parallel_tool_calls: false")
        return Verdict("fail", f"{what} had no effect: step {name} has {len(calls)} tool calls", "$.choices[0].message")
    return Verdict("pass", f"{len(calls)} tool call(s), at most {most}")


def _format_honoured(params: Mapping[str, Any], views: Views, ctx: Context) -> Verdict:
    """``response_format`` had its effect: the content is a JSON object (``json_object``) or JSON the
    schema accepts (``json_schema``). A failure names the parameter that had no effect."""
    name, schema = params["step"], params.get("schema")
    param = "response_format json_schema" if schema is not None else "response_format json_object"
    if (bad := _answered(views[name], name)) is not None:
        return bad
    view = views[name]
    text, reasoning = view.text() or "", view.reasoning() or ""
    if view.finish_reason() == "length":
        if not text.strip() and reasoning:  # V-32, L-23: the grammar waits for the reasoning to end
            why = "the model was still reasoning at the token limit (the backend applies the grammar after it)"
        else:
            why = "the output was cut by the token limit"
        return Verdict("skip", f"cannot tell: {why}; content {_short(text)}")
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = _NOT_JSON
    if value is _NOT_JSON:
        where = " (the JSON came as reasoning)" if not text.strip() and _parses(reasoning) else ""
        return Verdict("fail", f"step {name}: {param} had no effect: content {_short(text)} is not JSON{where}", "$")
    if schema is None:
        if isinstance(value, dict):
            return Verdict("pass", f"step {name}: {_short(value, 60)} is a JSON object")
        return Verdict("fail", f"step {name}: {param} had no effect: {_short(value, 60)} is not a JSON object", "$")
    errors = [e.message for e in jsonschema_rs.validator_for(schema).iter_errors(value)]
    if not errors:
        return Verdict("pass", f"step {name}: {_short(value, 60)} matches the schema")
    return Verdict("fail", f"step {name}: {param} had no effect: {_short(value, 60)} breaks it ({_short(errors[0])})")


def _parses(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return bool(text.strip())


EXPECTATIONS: dict[str, Check] = {
    "status": _status,
    "same-text": _same_text,
    "different-text": _different_text,
    "text-equals": _text_equals,
    "text-contains": _text_contains,
    "text-lacks": _text_lacks,
    "text-ends-with": _text_ends_with,
    "text-cut-at-stop": _text_cut_at_stop,
    "tool-call": _tool_call,
    "no-tool-call": _no_tool_call,
    "finish-reason": _finish_reason,
    "choices": _choices,
    "distinct-choices": _distinct_choices,
    "completion-tokens-at-most": _completion_tokens_at_most,
    "prompt-tokens-greater": lambda p, v, c: _prompt_tokens(p, v, c, greater=True),
    "prompt-tokens-equal": lambda p, v, c: _prompt_tokens(p, v, c, greater=False),
    "usage": _usage,
    "error-field": _error_field,
    "model-listed": _model_listed,
    "unknown-field-rejected": _unknown_field_rejected,
    "bias-token-appears": _bias_token_appears,
    "token-in-one-chunk": _token_in_one_chunk,
    "reasoning-equals": _reasoning_equals,
    "response-status": _response_status,
    "json-matches-schema": _json_matches_schema,
    "no-reasoning": _no_reasoning,
    "param-changes-prompt": _param_changes_prompt,
    "forced-call": _forced_call,
    "tool-calls-at-most": _tool_calls_at_most,
    "format-honoured": _format_honoured,
}
