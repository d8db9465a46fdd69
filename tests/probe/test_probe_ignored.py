"""A parameter accepted and ignored is an error-level finding naming the endpoint and the parameter,
and every report lists, side by side, what each endpoint did with each parameter a case measures.

The answers are built here as a client would see them: an Ollama-like 200 for a prompt beyond the
context (it truncates silently, backend-quirks.md O-5), llama.cpp's 400 without OpenAI's code
(L-25), and the gateway's official 400.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import yaml

from oaishim.check import CheckOptions
from oaishim.probe._cases import CatalogueError, Step, load_catalogue, parse_catalogue
from oaishim.probe._expect import Context
from oaishim.probe._html import html_report
from oaishim.probe._judge import Sent, judge_case
from oaishim.probe._markdown import markdown_report
from oaishim.probe._results import ProbeRun, SideResult, parameter_table
from oaishim.probe._steer import Steering
from oaishim.probe._terminal import summary_table

CASES = """
cases:
  - id: errors.overflow
    title: overflow
    parameter: context_length
    steps:
      - {name: plain, body: {messages: [{role: user, content: long}], max_tokens: 4}}
    expect:
      - {is: status, step: plain, in: [400], severity: warning}
      - {is: error-field, step: plain, field: code, equals: context_length_exceeded}
      - {is: error-field, step: plain, field: param, equals: messages, parameter: ""}
"""

TRUNCATED = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "ok", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 4096, "completion_tokens": 1, "total_tokens": 4097},
}
LLAMA_400 = {
    "error": {
        "code": 400,
        "message": "the request exceeds the available context size",
        "type": "exceed_context_size_error",
    }
}
OPENAI_400 = {
    "error": {
        "message": "This model's maximum context length is 4096 tokens.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


def sent(status: int, body: dict[str, Any]) -> list[Sent]:
    request = {"model": "m", "messages": [{"role": "user", "content": "long"}], "max_tokens": 4}
    return [
        Sent(
            "plain",
            "POST",
            "/v1/chat/completions",
            request,
            request,
            status,
            {"content-type": "application/json"},
            orjson.dumps(body),
        )
    ]


def side(label: str, title: str, status: int, body: dict[str, Any]) -> SideResult:
    (case,) = parse_catalogue(yaml.safe_load(CASES))
    result = judge_case(case, sent(status, body), Context("m"), CheckOptions(), f"{label} ({title})")
    return SideResult(label, f"http://{label.lower()}", "m", Steering(), [result], title=title)


def test_an_accepted_parameter_without_effect_is_an_error_naming_who_ignored_what() -> None:
    ollama = side("B", "raw Ollama", 200, TRUNCATED)
    (case,) = ollama.cases
    ignored = [f for _, f in case.findings() if "ignored" in f.message]
    # the status expectation is only a warning in the case: ignoring a parameter is an error all the same
    assert [(f.rule, f.severity) for f in ignored] == [("expect.status", "error"), ("expect.error-field", "error")]
    assert ignored[0].message.startswith("B (raw Ollama) ignored context_length: step plain: HTTP 200")
    assert [r["parameter"] for r in ollama.ignored()] == ["context_length", "context_length"]
    # the param check opted out of the case's parameter: it fails as an ordinary finding
    assert not any("ignored" in f.message for _, f in case.findings() if "error.param" in f.message)


def test_an_error_answer_refused_the_parameter_rather_than_ignoring_it() -> None:
    llama = side("B", "raw llama.cpp", 400, LLAMA_400)
    assert llama.ignored() == []
    assert llama.effects() == {("errors.overflow", "context_length"): "refused"}
    code = next(c for c in llama.cases[0].checks if c.id == "expect:error-field:plain")
    assert code.outcome == "fail" and not code.ignored


def test_every_report_shows_each_sides_verdict_side_by_side() -> None:
    gateway = side("A", "gateway, profile ollama", 400, OPENAI_400)
    raw = side("B", "raw Ollama", 200, TRUNCATED)
    run = ProbeRun([gateway, raw], "2026-01-01T00:00:00Z")
    (row,) = parameter_table(run.sides)
    assert row["by_side"] == {"A": "honoured", "B": "ignored"}
    assert row["seen"]["B"].startswith("step plain: HTTP 200")
    results = orjson.loads(orjson.dumps(run.as_dict()))
    assert results["parameters"][0]["by_side"] == {"A": "honoured", "B": "ignored"}
    assert [r["parameter"] for r in results["sides"]["B"]["ignored"]] == ["context_length", "context_length"]
    assert results["sides"]["A"]["ignored"] == []
    terminal = summary_table(run)
    assert "B (raw Ollama) ignored context_length (errors.overflow): step plain: HTTP 200" in terminal
    markdown = markdown_report(run)
    assert "| `context_length` | `errors.overflow` | ✅ honoured | ❌ **ignored** |" in markdown
    html = html_report(run)
    assert '<section id="parameters">' in html and "raw Ollama" in html


@pytest.mark.parametrize("value", [3, ["a"]])
def test_a_parameter_must_be_a_name(value: Any) -> None:
    document = yaml.safe_load(CASES)
    document["cases"][0]["parameter"] = value
    with pytest.raises(CatalogueError, match="parameter must be a string"):
        parse_catalogue(document)


def test_the_builtin_overflow_cases_measure_the_context_length() -> None:
    cases = {c.id: c for c in load_catalogue()}
    for name in ("errors.context-overflow", "errors.context-overflow-stream"):
        assert cases[name].parameter == "context_length"
        assert any(e.parameter == "context_length" and e.kind == "status" for e in cases[name].expect)
    stream = cases["errors.context-overflow-stream"]
    assert {s.name: s.body.get("stream") for s in stream.steps if isinstance(s, Step) and s.body} == {
        "stream": True,
        "completions": None,
    }
