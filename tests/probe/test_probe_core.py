"""The probe's pure core: catalogue, steering, views and records, expectations, judgement, scores,
baselines, the comparison and the written reports. Inputs are recorded traffic (the official API,
``tests/fixtures/openai-live``; llama.cpp, ``tests/fixtures/recorded/llamacpp-server``) or small
hand-made answers; no server runs here except one port that nothing listens on.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from oaishim.check import CheckOptions
from oaishim.probe import ProbeOptions, Target, run_probe
from oaishim.probe._cases import Case, CatalogueError, Expect, Step, fill, load_catalogue, parse_catalogue, select
from oaishim.probe._compare import compare, tops
from oaishim.probe._expect import EXPECTATIONS, Context
from oaishim.probe._files import write_reports
from oaishim.probe._html import html_report
from oaishim.probe._judge import Sent, judge_case
from oaishim.probe._markdown import markdown_report
from oaishim.probe._record import field_set, record_of
from oaishim.probe._results import ProbeRun, SideResult, baseline_keys, new_errors, score_of
from oaishim.probe._steer import Steering, gbnf_literal, steer_body, tool_call_recipe
from oaishim.probe._terminal import ProgressPrinter, summary_table
from oaishim.probe._view import view_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
OPENAI = FIXTURES / "openai-live"
LLAMA = FIXTURES / "recorded" / "llamacpp-server"
SSE = {"content-type": "text/event-stream"}
JSON = {"content-type": "application/json"}

# What issue 6 asks the catalogue to hold, by case id.
REQUIRED = {
    "compat.fixed-request", "compat.two-endpoints", "compat.logprobs-chat", "compat.logprobs-completions",
    "compat.stop", "compat.stream-vs-plain", "compat.unknown-field", "roles.developer",
    "history.reasoning-content", "tools.auto", "tools.required", "tools.named", "tools.none", "tools.never-empty",
    "stream.n2", "stream.options-absent", "stream.options-empty", "stream.usage-true", "stream.usage-false",
    "limits.max-tokens-absent", "ignored.stop", "ignored.n", "ignored.seed", "ignored.max-completion-tokens",
    "ignored.logit-bias", "errors.bad-json", "errors.missing-field", "errors.unknown-model",
    "errors.context-overflow", "models.list", "eot.kept",
}  # fmt: skip


def _sent(
    name: str,
    body: bytes,
    request: Mapping[str, Any] | None,
    *,
    status: int = 200,
    path: str = "/v1/chat/completions",
    stream: bool = False,
) -> Sent:
    return Sent(name, "POST", path, request, request, status, SSE if stream else JSON, body)


def _chat(content: str | None, *, tool_calls: list[Any] | None = None, finish: str = "stop", usage: int = 5) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body = {
        "id": "chatcmpl-abc",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": 3, "completion_tokens": usage, "total_tokens": 3 + usage},
    }
    return orjson.dumps(body)


# ---------------------------------------------------------------------------------------------------
# The catalogue


def test_the_catalogue_holds_what_the_issue_asks_for() -> None:
    cases = load_catalogue()
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)) and set(ids) >= REQUIRED
    assert all(e.kind in EXPECTATIONS for c in cases for e in c.expect)
    stop = next(c for c in cases if c.id == "compat.stop")
    flags = {s.body.get("include_stop_str_in_output") for s in stop.steps if s.body}
    assert {True, False} <= flags  # comparison step 4: both ways
    options = {str(s.body.get("stream_options")) for c in cases if c.group == "stream" for s in c.steps if s.body}
    assert {"None", "{}", "{'include_usage': True}", "{'include_usage': False}"} <= options
    choices = {str(s.body.get("tool_choice")) for c in cases if c.group == "tools" for s in c.steps if s.body}
    assert {"auto", "required", "none", "{'type': 'function', 'function': {'name': 'get_weather'}}"} <= choices


def test_select_by_globs() -> None:
    cases = load_catalogue()
    assert {c.id for c in select(cases, "tools.*")} == {c.id for c in cases if c.id.startswith("tools.")}
    assert [c.id for c in select(cases, "models.list, eot.*")] == ["models.list", "eot.kept"]
    assert select(cases, "") == cases and select(cases, "nothing.*") == ()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            {"cases": [{"id": "a", "steps": [{"name": "s", "body": {}}], "expect": [{"is": "nope", "step": "s"}]}]},
            "not one of",
        ),
        (
            {"cases": [{"id": "a", "steps": [{"name": "s", "body": {}}], "expect": [{"is": "status", "step": "t"}]}]},
            "unknown step",
        ),
        ({"cases": [{"id": "a", "steps": [{"name": "s", "body": {}, "raw": "x"}]}]}, "exactly one of body and raw"),
        ({"cases": [{"id": "a", "steps": [{"name": "s", "body": {}}]}] * 2}, "ids repeat"),
        ({"cases": [{"id": "a", "steps": []}]}, "no steps"),
        ({"cases": [{"id": "a", "needs": ["gpu"], "steps": [{"name": "s", "body": {}}]}]}, "needs"),
        ({"cases": [{"id": "a", "steps": [{"name": "s", "body": {}, "steer": {"voice": 1}}]}]}, "steer"),
        ({"cases": "x"}, "list under 'cases'"),
    ],
)
def test_a_broken_catalogue_is_refused(document: Any, message: str) -> None:
    with pytest.raises(CatalogueError, match=message):
        parse_catalogue(document)


def test_fill_placeholders_in_values_and_keys() -> None:
    variables = {"model": "m", "bias_token_id": 302, "eot": "<|im_end|>"}
    got = fill(
        {"logit_bias": {"${bias_token_id}": 100}, "id": "${bias_token_id}", "t": "Done.${eot}", "x": ["${nope}"]},
        variables,
    )
    assert got == {"logit_bias": {"302": 100}, "id": 302, "t": "Done.<|im_end|>", "x": ["${nope}"]}


# ---------------------------------------------------------------------------------------------------
# Steering


def test_gbnf_literal_escapes() -> None:
    assert gbnf_literal('a "b" \\ c\nd\te') == 'root ::= "a \\"b\\" \\\\ c\\nd\\te"'


def test_steer_body_in_each_dialect() -> None:
    body = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], "max_tokens": 9}
    assert steer_body(body, {"text": "Hi"}, Steering("gbnf"))["grammar"] == 'root ::= "Hi"'
    assert steer_body(body, {"text": "a.b"}, Steering("structured_outputs"))["structured_outputs"] == {"regex": "a\\.b"}
    asked = steer_body(body, {"text": "Hi"}, Steering("prompt"))
    assert asked["messages"][1]["content"].endswith("\nHi") and body["messages"][1]["content"] == "u"  # a copy
    recipe = Steering(tool_call="recipe", tool_overlay=tool_call_recipe(5, 205))
    forced = steer_body({**body, "logit_bias": {"9": -1}}, {"tool_call": True}, recipe)
    assert forced["logit_bias"] == {"9": -1, "5": 100, "205": 100} and forced["stop"] == ["</tool_call>"]
    assert steer_body(body, {"tool_call": True}, Steering(tool_call="plain")) == body


# ---------------------------------------------------------------------------------------------------
# Views and compat records


def test_record_of_an_official_stream() -> None:
    request = {
        "model": "gpt-4o",
        "stream": True,
        "logprobs": True,
        "top_logprobs": 2,
        "stream_options": {"include_usage": True},
    }
    view = view_of((OPENAI / "content-logprobs.sse").read_bytes(), request=request, status=200, headers=SSE)
    record = record_of("/v1/chat/completions", request, view)
    assert record["stream"] is True and record["served_model_name"] == "gpt-4o-2024-08-06"
    assert record["request"]["top_logprobs"] == 2 and record["request"]["stream_options"] == {"include_usage": True}
    response = record["response"]
    assert response["logprobs_container"] == "ChatCompletionLogProbs"
    assert response["token_fields"] == ["bytes", "logprob", "token", "top_logprobs"]
    assert response["first_chunk_has_content"] is True and response["usage_present"] is True
    assert record["error"]["unknown_field_rejected"] is None and "choices[].delta.role" in record["fields"]


def test_record_of_llama_cpp_traffic() -> None:
    stream = view_of((LLAMA / "ls.chat_stream.body").read_bytes(), request={"stream": True}, status=200, headers=SSE)
    assert record_of("/v1/chat/completions", {"stream": True}, stream)["response"]["first_chunk_has_content"] is False
    plain = view_of(
        (LLAMA / "ls.completions_logprobs.body").read_bytes(), request={"logprobs": 2}, status=200, headers=JSON
    )
    response = record_of("/v1/completions", {"logprobs": 2}, plain)["response"]
    assert response["logprobs_container"] == "ChatCompletionLogProbs"  # L-22: chat-shaped on /v1/completions
    assert "id" in response["token_fields"]  # L-21


def test_field_set_pools_lists_and_legacy_alternatives() -> None:
    body = {"choices": [{"logprobs": {"tokens": ["a"], "top_logprobs": [{"a": -1.0, "b": -2.0}]}}, {"text": "x"}]}
    assert field_set([body]) == [
        "choices",
        "choices[].logprobs",
        "choices[].logprobs.tokens",
        "choices[].logprobs.top_logprobs",
        "choices[].logprobs.top_logprobs[].{token}",
        "choices[].text",
    ]
    assert tops({"timings", "timings.a", "choices[].x", "choices[].x.y", "z"}) == ["choices[].x", "timings", "z"]


# ---------------------------------------------------------------------------------------------------
# Expectations and judgement


def _case(*steps: Step, expect: tuple[Expect, ...] = (), tolerate: frozenset[str] = frozenset()) -> Case:
    return Case("t.case", "a case", steps, expect, tolerate=tolerate)


def test_judging_official_and_llama_cpp_streams() -> None:
    request = {"model": "m", "messages": [], "stream": True, "stream_options": {"include_usage": True}}
    case = _case(Step("s", body=request), expect=(Expect("usage", {"step": "s", "present": True}),))
    official = judge_case(
        case, [_sent("s", (OPENAI / "content.sse").read_bytes(), request, stream=True)], Context("m"), CheckOptions()
    )
    assert official.outcome == "pass" and [c.outcome for c in official.checks] == ["pass", "pass"]
    assert official.steps[0].record["status"] == "comparable"
    raw = (LLAMA / "ls.chat_stream.body").read_bytes()
    llama = judge_case(case, [_sent("s", raw, request, stream=True)], Context("m"), CheckOptions())
    assert llama.outcome == "fail" and llama.checks[0].outcome == "fail"
    assert "stream.first-delta" in {f.rule for f in llama.steps[0].findings}
    assert llama.steps[0].record["status"] == "differs" and llama.steps[0].record["findings"]


def test_tolerated_fields_become_notes_in_that_case_only() -> None:
    body = orjson.loads(_chat("Hello"))
    body["choices"][0]["message"]["reasoning_content"] = "abc"
    sent = [_sent("s", orjson.dumps(body), {"messages": []})]
    strict = judge_case(_case(Step("s", body={})), sent, Context("m"), CheckOptions())
    lenient = judge_case(
        _case(Step("s", body={}), tolerate=frozenset({"reasoning_content"})), sent, Context("m"), CheckOptions()
    )
    assert strict.outcome == "fail" and lenient.outcome == "pass"
    assert [f.severity for f in lenient.steps[0].findings] == ["note"]


def test_expectation_outcomes_pass_fail_skip_and_info() -> None:
    full, cut = _chat("Hello world. Bye"), _chat("Hello ")
    steps = (Step("full", body={}), Step("cut", body={}), Step("kept", body={}))
    expect = (
        Expect("text-cut-at-stop", {"step": "cut", "full": "full", "stop": "world"}),
        Expect("text-cut-at-stop", {"step": "kept", "full": "full", "stop": "world", "include": True}, "note"),
        Expect("text-cut-at-stop", {"step": "cut", "full": "full", "stop": "zzz"}),
        Expect("text-equals", {"step": "full", "text": "other"}),
    )
    sent = [_sent("full", full, {}), _sent("cut", cut, {}), _sent("kept", cut, {})]
    result = judge_case(_case(*steps, expect=expect), sent, Context("m", steered=frozenset({"full"})), CheckOptions())
    outcomes = {c.id: c.outcome for c in result.checks if c.id.startswith("expect")}
    assert outcomes == {
        "expect:text-cut-at-stop:cut": "pass",
        "expect:text-cut-at-stop:kept": "info",  # a note-level expectation that did not hold
        "expect:text-cut-at-stop:cut#2": "skip",  # the text never reaches "zzz": cannot tell
        "expect:text-equals:full": "fail",
    }
    prompt_only = Context("m", exact_text=False, steered=frozenset({"full"}))
    again = judge_case(_case(*steps, expect=expect[3:]), sent, prompt_only, CheckOptions())
    assert again.checks[-1].outcome == "skip"  # the text could not be forced: not the server's fault


def test_tool_call_and_error_expectations() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    steps = (Step("call", body={}), Step("text", body={}), Step("err", body={}))
    expect = (
        Expect("tool-call", {"step": "call", "name": "get_weather"}),
        Expect("tool-call", {"step": "text"}),
        Expect("no-tool-call", {"step": "text"}),
        Expect("status", {"step": "err", "in": [404]}),
        Expect("error-field", {"step": "err", "field": "code", "equals": "model_not_found"}),
        Expect("unknown-field-rejected", {"step": "text"}, "note"),
    )
    error = {"error": {"message": "no", "type": "invalid_request_error", "param": None, "code": "model_not_found"}}
    sent = [
        _sent("call", _chat(None, tool_calls=[call], finish="tool_calls"), {}),
        _sent("text", _chat("hi"), {}),
        _sent("err", orjson.dumps(error), {}, status=404),
    ]
    result = judge_case(_case(*steps, expect=expect), sent, Context("m"), CheckOptions())
    assert [c.outcome for c in result.checks if c.id.startswith("expect")] == [
        "pass",
        "fail",
        "pass",
        "pass",
        "pass",
        "info",
    ]
    unforced = Context("m", tool_calls_forceable=False, steered_tools=frozenset({"text"}))
    assert judge_case(_case(*steps, expect=expect[1:2]), sent, unforced, CheckOptions()).checks[-1].outcome == "skip"


def test_a_call_whose_arguments_the_token_limit_cut_cannot_tell_whether_tool_choice_worked() -> None:
    """The backend made the forced call but ``max_tokens`` cut its arguments (vLLM 0.32 constrains only
    the call's envelope: a random model writes an endless number): not "tool_choice had no effect"."""
    steps = (Step("cut", body={}), Step("broken", body={}))
    expect = (
        Expect("forced-call", {"step": "cut", "name": "get_weather"}, parameter="tool_choice"),
        Expect("forced-call", {"step": "broken", "name": "get_weather"}, parameter="tool_choice"),
    )
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "78850285028"}}
    sent = [
        _sent("cut", _chat(None, tool_calls=[call], finish="length"), {}),
        _sent("broken", _chat(None, tool_calls=[call], finish="tool_calls"), {}),
    ]
    checks = judge_case(_case(*steps, expect=expect), sent, Context("m"), CheckOptions()).checks
    cut, broken = (c for c in checks if c.id.startswith("expect"))
    assert cut.outcome == "skip" and "cut by the token limit" in cut.message and not cut.ignored
    assert broken.outcome == "fail" and broken.ignored  # finished without the limit: the arguments are the call's
    finish = Expect("finish-reason", {"step": "cut", "in": ["stop"]})
    (check,) = [c for c in judge_case(_case(*steps, expect=(finish,)), sent, Context("m"), CheckOptions()).checks
                if c.id.startswith("expect")]  # fmt: skip
    assert check.outcome == "skip"  # cut by the limit: how the named choice would have finished is not seen


def test_a_gateway_saying_the_unforceable_call_was_not_made_cannot_tell() -> None:
    """No steering could force a call here, and a gateway that checks forced choices answered its 502
    ``tool_choice_not_honoured``: the model's doing, not the endpoint's; anywhere else a 502 fails."""
    steps = (Step("call", body={}),)
    expect = (Expect("forced-call", {"step": "call", "name": "get_weather"}, parameter="tool_choice"),)
    error = {"error": {"message": "no call", "type": "server_error", "param": "tool_choice",
                       "code": "tool_choice_not_honoured"}}  # fmt: skip
    sent = [_sent("call", orjson.dumps(error), {}, status=502)]
    unforced = Context("m", tool_calls_forceable=False, steered_tools=frozenset({"call"}))
    (check,) = [c for c in judge_case(_case(*steps, expect=expect), sent, unforced, CheckOptions()).checks
                if c.id.startswith("expect")]  # fmt: skip
    assert check.outcome == "skip"
    (forced,) = [c for c in judge_case(_case(*steps, expect=expect), sent, Context("m"), CheckOptions()).checks
                 if c.id.startswith("expect")]  # fmt: skip
    assert forced.outcome == "fail"  # the call could be forced: the endpoint's error is a failure


def test_a_special_token_cut_across_chunks_is_found() -> None:
    def stream(*pieces: str) -> bytes:
        chunks = [{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": {"content": p}, "logprobs": None, "finish_reason": None}]}
                  for p in pieces]  # fmt: skip
        return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"

    case = _case(Step("s", body={}), expect=(Expect("token-in-one-chunk", {"step": "s", "text": "<|im_end|>"}),))
    whole = judge_case(case, [_sent("s", stream("Done.", "<|im_end|>"), {}, stream=True)], Context("m"), CheckOptions())
    cut = judge_case(case, [_sent("s", stream("Done.<|im", "_end|>"), {}, stream=True)], Context("m"), CheckOptions())
    assert whole.checks[-1].outcome == "pass" and cut.checks[-1].outcome == "fail"
    assert "cut into pieces" in cut.checks[-1].message


def test_a_step_without_an_answer_is_a_transport_finding() -> None:
    sent = [Sent("s", "POST", "/v1/chat/completions", {}, {}, transport_error="ClientConnectorError: refused")]
    result = judge_case(
        _case(Step("s", body={}), expect=(Expect("status", {"step": "s"}),)), sent, Context("m"), CheckOptions()
    )
    assert [f.rule for f in result.steps[0].findings] == ["probe.transport"]
    assert [c.outcome for c in result.checks] == ["fail", "fail"]


# ---------------------------------------------------------------------------------------------------
# Scores, baselines, comparison, reports


def _side(label: str, body: bytes, status: int = 200) -> SideResult:
    case = _case(Step("s", body={}), expect=(Expect("status", {"step": "s", "in": [200]}),))
    result = judge_case(case, [_sent("s", body, {"messages": []}, status=status)], Context("m"), CheckOptions())
    return SideResult(label, f"http://{label.lower()}", "m", Steering("gbnf", tool_call="recipe"), [result])


def test_scores_round_half_up_and_count_only_pass_and_fail() -> None:
    score = score_of([_side("A", _chat("x")).cases[0]])
    assert score["total"] == {"passed": 2, "run": 2, "percent": 100.0}
    assert score["by_endpoint"] == {"/v1/chat/completions": {"passed": 2, "run": 2, "percent": 100.0}}
    fails = _side("B", (LLAMA / "ls.chat_nonstream.body").read_bytes()).cases
    assert score_of(fails)["total"] == {"passed": 1, "run": 2, "percent": 50.0}
    assert score_of([])["total"]["percent"] is None


def test_baselines_fail_only_new_errors() -> None:
    good, bad = _side("A", _chat("x")), _side("A", (LLAMA / "ls.chat_nonstream.body").read_bytes())
    run = ProbeRun([bad], "now")
    keys = baseline_keys(orjson.loads(orjson.dumps(run.as_dict())))
    assert new_errors(bad, None) and new_errors(bad, keys) == [] and new_errors(good, None) == []
    with pytest.raises(ValueError, match="not a probe results file"):
        baseline_keys({"files": []})


def test_comparison_and_reports(tmp_path: Path) -> None:
    a, b = _side("A", _chat("x")), _side("B", (LLAMA / "ls.chat_nonstream.body").read_bytes())
    comparison = compare(a, b)
    assert comparison["differ"] == 1 and comparison["same"] == 0
    (step,) = comparison["cases"][0]["steps"]
    assert "timings" in step["fields_only_in_B"] and "choices[].message.refusal" in step["fields_only_in_A"]
    assert set(step["rules_only_in_B"]) == {"schema", "unknown-field"}
    run = ProbeRun([a, b], "2026-01-01T00:00:00+00:00", comparison, "0.1.0")
    files = write_reports(run, tmp_path / "out")
    assert orjson.loads(files["json"].read_bytes()) == orjson.loads(orjson.dumps(run.as_dict()))
    record = orjson.loads((tmp_path / "out" / "records" / "B" / "t.case.json").read_bytes())
    assert yaml.safe_load((tmp_path / "out" / "records" / "B" / "t.case.yaml").read_text("utf-8")) == record
    assert record["records"][0]["status"] == "differs" and record["outcome"] == "fail"
    markdown = markdown_report(run)
    assert "| **total** | **100.0% (2/2)** | **50.0% (1/2)** |" in markdown and "`timings`" in markdown
    html = html_report(run)
    assert html.count("<script") == 2 and 'id="probe-data"' in html and 'data-side="B"' in html
    data = html.split('id="probe-data">', 1)[1].split("</script>", 1)[0]
    assert orjson.loads(data.replace("<\\/", "</"))["sides"]["B"]["score"]["total"]["percent"] == 50.0
    table = summary_table(run)
    total = next(line for line in table.splitlines() if line.startswith("total"))
    assert total.split() == ["total", "100.0%", "(2/2)", "50.0%", "(1/2)"] and "1 case(s) differ" in table


def test_progress_lines(capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    printer = ProgressPrinter(sys.stdout, live=False)
    printer("A", _side("A", _chat("x")).cases[0], 1, 2)
    assert capsys.readouterr().out == "[A   1/2] ok   t.case\n"


def test_an_endpoint_that_does_not_answer(tmp_path: Path) -> None:
    """Nothing listens on the port: every step is a transport finding, no crash, exit status 1."""
    import socket

    from oaishim.commands.main import main

    with socket.socket() as s:  # a port that was free a moment ago; nothing listens on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cases = select(load_catalogue(), "models.list,errors.bad-json")
    run = run_probe([Target(f"http://127.0.0.1:{port}/v1", "m")], cases, ProbeOptions(timeout=5))
    assert {f.rule for c in run.primary.cases for _, f in c.findings()} >= {"probe.transport"}
    assert run.primary.score()["total"]["percent"] == 0.0
    argv = ["probe", f"http://127.0.0.1:{port}", "--model", "m", "--cases", "models.*", "--out", str(tmp_path)]
    assert main(argv) == 1 and (tmp_path / "report.html").is_file()
