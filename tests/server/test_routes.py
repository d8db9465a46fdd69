"""Which request targets the gateway accepts and where each goes: only origin-form targets (no
request line can point it at another host), one canonical path for routing and for the backend
(dot segments, encoded delimiters), the OpenAI endpoints validated whatever spelling reached them,
an allowlist of pass-through paths (every other path a 404, a wrong method a 405), pass-through
answers with cleaned headers and official errors, and the ``passthrough`` setting."""

from __future__ import annotations

import http.client
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from _servers import Canned, Replayer, RunningGateway, free_port

from _net import listener
from oaishim.check import check, exchange_from_bytes
from oaishim.commands.main import main
from oaishim.server.config import DEFAULT_PASSTHROUGH, ConfigError, ModelRoute, Settings, build_settings

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
VLLM = RECORDED / "vllm-0.32-cpu"
LLAMA = RECORDED / "llamacpp-server"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hello, who are you?"}]}


def raw_request(url: str, request_line: bytes, body: bytes = b"", headers: bytes = b"") -> tuple[int, bytes, bytes]:
    """Send a request line exactly as given (no client library would send these) and read the answer:
    (status, header block, body)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(
            request_line + b"\r\nHost: gw\r\nConnection: close\r\n" + headers
            + b"content-type: application/json\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )  # fmt: skip
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in head.lower():
        decoded = b""
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            length = int(size, 16)
            decoded, rest = decoded + rest[:length], rest[length + 2 :]
        rest = decoded
    return status, head, rest


def call(url: str, method: str, target: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    """One request with ``target`` sent as it is written (http.client does not normalise it)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    conn.request(method, target, body=data, headers={"content-type": "application/json", **(headers or {})})
    response = conn.getresponse()
    out = (response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    conn.close()
    return out


def official_error(status: int, headers: Any, body: bytes, expected_status: int) -> dict[str, Any]:
    assert status == expected_status, body
    payload = json.loads(body)
    assert set(payload) == {"error"} and set(payload["error"]) == {"message", "type", "param", "code"}
    findings = check(exchange_from_bytes(body, status=status, headers=dict(headers) if headers else None))
    assert [(f.rule, f.message) for f in findings if f.severity == "error"] == []
    error: dict[str, Any] = payload["error"]
    return error


# ---------------------------------------------------------------------------------------------------
# Request targets that are not a path


@pytest.mark.parametrize("method", [b"POST", b"GET", b"DELETE"])
def test_a_request_line_cannot_name_another_host(backend: Replayer, gateways: Any, method: bytes) -> None:
    url = gateways("vllm@0.32")
    with listener() as (port, got):
        for target in (f"*@127.0.0.1:{port}/x", f"*@127.0.0.1:{port}/v1/chat/completions"):
            status, _, body = raw_request(
                url, method + b" " + target.encode() + b" HTTP/1.1", json.dumps(CHAT).encode()
            )
            error = official_error(status, None, body, 400)
            assert error["type"] == "invalid_request_error" and "Invalid URL" in error["message"]
            assert b"secret stuff" not in body
        time.sleep(0.2)  # a connection the gateway would have opened has arrived by now
        assert got == []
    assert backend.seen == []


def test_asterisk_form_is_400(backend: Replayer, gateways: Any) -> None:
    for method in (b"OPTIONS", b"GET", b"POST"):
        status, _, body = raw_request(gateways("vllm@0.32"), method + b" * HTTP/1.1")
        official_error(status, None, body, 400)
    assert backend.seen == []


# ---------------------------------------------------------------------------------------------------
# One canonical path: the OpenAI endpoints whatever the spelling


SPELLINGS = [
    "/v1/chat/../chat/completions",
    "/v1/chat/%2e%2e/chat/completions",
    "/v1/chat/%2E%2E/chat/completions",
    "/v1/./chat/completions",
    "/v1/%2e/chat/completions",
    "//v1//chat/completions",
    "/v1/chat/%63ompletions",
    "/x/../v1/chat/completions",
]


@pytest.mark.parametrize("target", SPELLINGS)
def test_any_spelling_of_an_endpoint_is_validated(backend: Replayer, gateways: Any, target: str) -> None:
    url = gateways("vllm@0.32")
    for body, param in (({**CHAT, "n": 0}, "n"), ({**CHAT, "temperature": 9}, "temperature")):
        error = official_error(*call(url, "POST", target, body), 400)
        assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert backend.seen == []


@pytest.mark.parametrize("target", SPELLINGS[:3])
def test_any_spelling_of_an_endpoint_is_normalised(backend: Replayer, gateways: Any, target: str) -> None:
    raw = (VLLM / "s1_chat.body").read_bytes()
    backend.push(Canned(raw))
    status, _, body = call(gateways("vllm@0.32"), "POST", target, CHAT)
    assert status == 200
    answer = json.loads(body)
    assert answer["model"] == "tiny" and "prompt_logprobs" not in answer  # the gateway's rewrite, not raw
    assert [(s.method, s.path) for s in backend.seen] == [("POST", "/v1/chat/completions")]


@pytest.mark.parametrize(
    "target",
    [
        "/v1/chat/completions%3Fx=1",
        "/v1/chat/completions%23x",
        "/v1/chat/completions%3Bx",
        "/v1/chat%2Fcompletions",
        "/v1/chat%2fcompletions",
        "/v1%5Cchat/completions",
        "/v1/chat/completions%00",
        "/v1\\chat\\completions",
        "/../v1/chat/completions",
        "/v1/chat/completions%zz",
    ],
)
def test_encoded_delimiters_are_refused(backend: Replayer, gateways: Any, target: str) -> None:
    error = official_error(*call(gateways("vllm@0.32"), "POST", target, {**CHAT, "n": 0}), 400)
    assert error["type"] == "invalid_request_error" and error["message"].startswith("Invalid URL (POST ")
    assert backend.seen == []


# ---------------------------------------------------------------------------------------------------
# Pass-through: an allowlist


ADMIN = [
    ("POST", "/v1/load_lora_adapter"),
    ("POST", "/v1/unload_lora_adapter"),
    ("POST", "/sleep"),
    ("POST", "/wake_up"),
    ("POST", "/reset_prefix_cache"),
    ("POST", "/flush_cache"),
    ("GET", "/flush_cache"),
    ("POST", "/update_weights_from_disk"),
    ("GET", "/props"),
    ("DELETE", "/v1/files/x"),
]


def test_backend_routes_off_the_list_are_404(backend: Replayer, gateways: Any) -> None:
    url = gateways("vllm@0.32")
    for method, path in ADMIN:
        error = official_error(*call(url, method, path, {"lora_name": "x", "lora_path": "/tmp/x"}), 404)
        assert (error["message"], error["type"]) == (f"Invalid URL ({method} {path})", "invalid_request_error")
    # the path as it would be routed is named, also when the client spelled it otherwise
    error = official_error(*call(url, "POST", "/v1/../sleep"), 404)
    assert error["message"] == "Invalid URL (POST /sleep)"
    assert backend.seen == []


def test_wrong_method_on_an_openai_path_is_405(backend: Replayer, gateways: Any) -> None:
    url = gateways("vllm@0.32")
    for method, path in (
        ("GET", "/v1/chat/completions"),
        ("PUT", "/v1/chat/completions"),
        ("GET", "/v1/completions"),
        ("DELETE", "/v1/embeddings"),
        ("POST", "/v1/models"),
        ("GET", "/tokenize"),  # listed for POST only
        ("POST", "/version"),  # listed for GET only
    ):
        error = official_error(*call(url, method, path), 405)
        assert (error["message"], error["type"]) == (
            f"Invalid method for URL ({method} {path})",
            "invalid_request_error",
        )
    assert backend.seen == []


def test_listed_paths_pass_through_with_clean_headers(backend: Replayer, gateways: Any) -> None:
    url = gateways("vllm@0.32", passthrough=(*DEFAULT_PASSTHROUGH, "GET /props", "GET /slots/*"))
    tokenize_request = (VLLM / "s3x_tokenize_dev.req.json").read_bytes()
    tokenize_answer = (VLLM / "s3x_tokenize_dev.body").read_bytes()
    version = (VLLM / "s1_version.body").read_bytes()
    backend_headers = {"server": "backend/1.0", "date": "Mon, 01 Jan 2001 00:00:00 GMT", "x-request-id": "r-1"}
    backend.push(
        Canned(
            tokenize_answer,
            headers={**backend_headers, "set-cookie": "session=abc123def456", "location": "http://10.0.0.9:8000/x"},
        ),
        Canned(version),
        Canned(b'{"n_ctx": 4096}'),
        Canned(b"[]"),
    )
    status, headers, body = call(url, "POST", "/tokenize?add_special_tokens=false&note=a%20b", tokenize_request)
    assert (status, body) == (200, tokenize_answer)
    # the backend's own headers stay, but for x-request-id: the gateway's id, the one the backend was sent
    assert headers["x-request-id"] == backend.seen[0].headers["x-request-id"] != "r-1"
    assert "set-cookie" not in headers
    assert "location" not in headers  # it would name the backend's own address
    assert headers.get("server") != "backend/1.0" and headers["date"] != backend_headers["date"]
    assert call(url, "GET", "/./version")[2] == version
    assert call(url, "GET", "/props?slot=1")[2] == b'{"n_ctx": 4096}'
    assert call(url, "GET", "/slots/0")[2] == b"[]"
    sent = [(s.method, s.path, s.body) for s in backend.seen]
    assert sent == [
        ("POST", "/tokenize?add_special_tokens=false&note=a%20b", tokenize_request),
        ("GET", "/version", b""),  # the canonical path, as routed
        ("GET", "/props?slot=1", b""),
        ("GET", "/slots/0", b""),
    ]


def test_passthrough_errors_are_official(backend: Replayer, gateways: Any) -> None:
    url = gateways("vllm@0.32", passthrough=("GET /props", "POST /tokenize"))
    backend.push(
        Canned((LLAMA / "ls.notfound.body").read_bytes(), status=404),
        Canned(b'{"detail": [{"loc": ["body", "prompt"], "msg": "Field required", "type": "missing"}]}', status=422),
        Canned(b"<html><title>502 Bad Gateway</title></html>", status=502, content_type="text/html"),
    )
    error = official_error(*call(url, "GET", "/props"), 404)
    assert (error["message"], error["type"]) == ("File Not Found", "invalid_request_error")
    error = official_error(*call(url, "POST", "/tokenize", {}), 400)
    assert error["param"] == "prompt"
    error = official_error(*call(url, "POST", "/tokenize", {}), 502)
    assert (error["message"], error["type"]) == ("502 Bad Gateway", "server_error")


def test_an_empty_list_passes_nothing(backend: Replayer, gateways: Any) -> None:
    url = gateways("vllm@0.32", passthrough=())
    official_error(*call(url, "POST", "/tokenize", {"prompt": "x"}), 404)
    official_error(*call(url, "GET", "/version"), 404)
    assert backend.seen == []


def test_model_retrieve(backend: Replayer) -> None:
    settings = Settings(models=(ModelRoute("tiny", (backend.url,), profile="vllm@0.32"),), port=free_port())
    with RunningGateway(settings) as gw:
        status, _, body = call(gw.url, "GET", "/v1/models/tiny")
        assert status == 200 and json.loads(body)["id"] == "tiny"
        error = official_error(*call(gw.url, "GET", "/v1/models/gpt-9"), 404)
        assert error["code"] == "model_not_found"
    assert backend.seen == []


# ---------------------------------------------------------------------------------------------------
# The passthrough setting


def test_passthrough_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OAISHIM_PASSTHROUGH", "OAISHIM_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    assert build_settings(upstream="http://u:1").passthrough == DEFAULT_PASSTHROUGH
    config = tmp_path / "c.toml"
    config.write_text('upstream = "http://u:1"\npassthrough = ["GET /props", "/v1/rerank"]\n')
    assert build_settings(config=config).passthrough == ("GET /props", "/v1/rerank")
    monkeypatch.setenv("OAISHIM_PASSTHROUGH", "POST /tokenize,GET /slots/*")
    assert build_settings(config=config).passthrough == ("POST /tokenize", "GET /slots/*")
    assert build_settings(config=config, passthrough=["/version"]).passthrough == ("/version",)
    assert build_settings(config=config, passthrough=["none"]).passthrough == ()
    config.write_text('upstream = "http://u:1"\npassthrough = []\n')
    monkeypatch.delenv("OAISHIM_PASSTHROUGH")
    assert build_settings(config=config).passthrough == ()
    for bad in ("/a/../b", "tokenize", "G3T /x", "/a%2Fb"):
        with pytest.raises(ConfigError, match="passthrough: "):
            build_settings(upstream="http://u:1", passthrough=[bad])


def test_serve_with_a_bad_passthrough_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--upstream", "http://u:1", "--passthrough", "/ok", "--passthrough", "sleep"]) == 2
    assert "passthrough: " in capsys.readouterr().err
