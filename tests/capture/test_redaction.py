"""Acceptance: a canary API key is found nowhere in the store or the logs.

Canaries go in every place a secret travels: the client's ``Authorization``, ``api-key`` and
``x-api-key`` headers and its cookie; the upstream key the gateway sends; a ``Set-Cookie`` the
backend answers with; a key in a query string; a key the backend quotes back in an error body; a
key a user pasted into a prompt; and a configured JSON path. Then every byte of every file in the
capture folder (JSONL, SQLite and its WAL) and every log record of the run is searched.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest
from _apps import EchoBackend, RunningApp, get, post
from hypothesis import given
from hypothesis import strategies as st

from oaishim.capture.reader import CaptureReader
from oaishim.capture.record import header_value
from oaishim.capture.redact import scrub_bytes
from oaishim.capture_tools.proxy import CaptureProxy
from oaishim.server.app import Gateway
from oaishim.server.config import ModelRoute, Settings
from oaishim.server.recording import Recording

CLIENT = "sk-canary-client-5d1f0c9e77"
UPSTREAM = "sk-canary-upstream-8b2e41aa"
COOKIE = "canary-cookie-3f9a7c61d2"
SET_COOKIE = "canary-set-cookie-0c4417be"
QUERY = "canary-query-key-91d0e3ff"
USER_FIELD = "canary-user-field-6a2f"
CANARIES = (CLIENT, UPSTREAM, COOKIE, SET_COOKIE, QUERY, USER_FIELD)
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}


def everything_in(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def assert_no_canary(folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    stored = everything_in(folder)
    assert stored, "nothing was stored"
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    for canary in CANARIES:
        assert canary.encode() not in stored, f"{canary} is in the store"
        assert canary not in logged, f"{canary} is in the logs"


def assert_private(folder: Path) -> None:
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = [p for p in folder.iterdir() if p.is_file()]
    assert any(p.suffix == ".jsonl" for p in files) and any(p.name == "index.sqlite" for p in files)
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {p.name: "0o600" for p in files}


@pytest.fixture(autouse=True)
def _all_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)


def test_gateway_capture_keeps_no_key(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "capture"
    backend = EchoBackend(cookie=f"session={SET_COOKIE}; HttpOnly")
    with RunningApp(backend) as upstream:
        route = ModelRoute(name="tiny", upstreams=(upstream.url,), profile="llamacpp@b9174", upstream_api_key=UPSTREAM)
        settings = Settings(
            models=(route,),
            api_keys=(CLIENT,),
            capture_dir=folder,
            capture_redact=("$.user",),
            passthrough=("/echo-auth",),
        )
        with RunningApp(Gateway(settings)) as gw:
            bearer = {"Authorization": f"Bearer {CLIENT}", "x-api-key": CLIENT, "Cookie": f"session={COOKIE}"}
            assert post(gw.url + "/v1/chat/completions", {**CHAT, "stream": True}, bearer)[0] == 200
            assert post(gw.url + "/v1/chat/completions", {**CHAT, "user": USER_FIELD}, {"api-key": CLIENT})[0] == 200
            pasted = {"model": "tiny", "messages": [{"role": "user", "content": f"my key is {CLIENT}"}]}
            assert post(gw.url + "/v1/chat/completions", pasted, bearer)[0] == 200
            assert post(gw.url + "/v1/chat/completions", CHAT, {"Authorization": f"Bearer {COOKIE}"})[0] == 401
            assert get(gw.url + f"/echo-auth?api_key={QUERY}", bearer)[0] == 401  # passthrough: quotes the key
    # The backend did get the upstream key (and never the client's): redaction is only the record's.
    assert backend.seen[0]["authorization"] == f"Bearer {UPSTREAM}"
    assert all(CLIENT not in str(seen) for seen in backend.seen)
    records = list(CaptureReader(folder).records())
    assert len(records) == 5
    first = records[0]
    assert header_value(first["client"]["request"], "authorization") == "[REDACTED]"
    assert header_value(first["client"]["request"], "x-api-key") == "[REDACTED]"
    assert header_value(first["client"]["request"], "cookie") == "[REDACTED]"
    assert header_value(first["upstream"]["request"], "authorization") == "[REDACTED]"
    assert header_value(first["upstream"]["response"], "set-cookie") == "[REDACTED]"
    assert header_value(records[1]["client"]["request"], "api-key") == "[REDACTED]"
    assert "json:$.user" in records[1]["redacted"] and "literal" in records[2]["redacted"]
    assert "my key is [REDACTED]" in records[2]["client"]["request"]["body"]
    assert_no_canary(folder, caplog)
    assert_private(folder)


def test_proxy_forwards_the_key_but_records_none(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "proxy"
    backend = EchoBackend(cookie=f"session={SET_COOKIE}")
    with RunningApp(backend) as upstream, RunningApp(CaptureProxy(upstream.url, Recording(folder, mode="proxy"))) as px:
        headers = {"Authorization": f"Bearer {CLIENT}", "Cookie": f"session={COOKIE}", "x-api-key": UPSTREAM}
        status, body = post(px.url + "/v1/chat/completions", {**CHAT, "stream": True}, headers)
        assert status == 200 and body.endswith(b"data: [DONE]\n\n")
        status, body = get(px.url + f"/echo-auth?key={QUERY}", headers)
        assert status == 401 and CLIENT.encode() in body  # the client gets the backend's bytes as they are
    # A pure proxy: the client's headers reached the backend as they were sent.
    assert backend.seen[0]["authorization"] == f"Bearer {CLIENT}"
    assert backend.seen[0]["cookie"] == f"session={COOKIE}" and backend.seen[0]["x-api-key"] == UPSTREAM
    records = list(CaptureReader(folder).records())
    assert [r["client"]["response"]["status"] for r in records] == [200, 401]
    assert "invalid key: [REDACTED]" in records[1]["client"]["response"]["body"]
    assert_no_canary(folder, caplog)
    assert_private(folder)


def test_records_say_what_was_redacted_never_the_value(tmp_path: Path) -> None:
    folder = tmp_path / "capture"
    with RunningApp(EchoBackend()) as upstream:
        route = ModelRoute(name="tiny", upstreams=(upstream.url,), profile="llamacpp@b9174")
        settings = Settings(models=(route,), capture_dir=folder)
        with RunningApp(Gateway(settings)) as gw:
            post(gw.url + "/v1/chat/completions", CHAT, {"Authorization": f"Bearer {CLIENT}"})
    (record,) = CaptureReader(folder).records()
    assert record["redacted"] == ["header:authorization", "header:set-cookie"]
    text = orjson.dumps(record).decode()
    assert CLIENT not in text and text.count("[REDACTED]") == 2


def _modes(folder: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(os.stat(p).st_mode) for p in folder.iterdir()}


def test_files_are_private_even_under_a_permissive_umask(tmp_path: Path) -> None:
    from _apps import backend_record, write_store

    old = os.umask(0)
    try:
        write_store(tmp_path / "c", [backend_record(CHAT, [b"{}"], content_type="application/json")])
    finally:
        os.umask(old)
    modes: dict[str, Any] = _modes(tmp_path / "c")
    assert modes and set(modes.values()) == {0o600}
    assert stat.S_IMODE((tmp_path / "c").stat().st_mode) == 0o700


# ---------------------------------------------------------------------------------------------------
# Gaps: a secret in a body stored as base64, more secret query names, an existing folder's mode


def test_a_secret_in_a_body_that_is_not_utf8_is_scrubbed() -> None:
    from _apps import backend_record

    from oaishim.capture.build import build_record
    from oaishim.capture.record import body_bytes
    from oaishim.capture.redact import Redactor

    body = b"\xff\xfe binary " + UPSTREAM.encode() + b" tail \x80"
    raw = backend_record(CHAT, [body], content_type="application/octet-stream")
    record, line = build_record(raw, Redactor.build(secrets=[UPSTREAM]), run_checker=False)
    assert UPSTREAM.encode() not in line
    for side in ("client", "upstream"):
        response = record[side]["response"]
        assert "body_b64" in response  # still not UTF-8: stored as base64, without the secret
        assert body_bytes(response) == body.replace(UPSTREAM.encode(), b"[REDACTED]")
    assert "literal" in record["redacted"]


@pytest.mark.parametrize(
    "name", ["access-token", "auth", "secret", "password", "signature", "client_secret", "API-Key", "Client-Secret"]
)
def test_more_query_parameters_are_secret(name: str) -> None:
    from oaishim.capture.redact import Redactor

    found: set[str] = set()
    notes: set[str] = set()
    target = Redactor().target(f"/v1/x?model=m&{name}={QUERY}", found, notes)
    assert QUERY not in target and "model=m" in target
    assert QUERY in found and notes == {"query:" + name.lower().replace("-", "_")}


def test_an_existing_capture_folder_is_made_private(tmp_path: Path) -> None:
    from _apps import backend_record, write_store

    folder = tmp_path / "c"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    write_store(folder, [backend_record(CHAT, [b"{}"], content_type="application/json")])
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_the_proxy_asks_for_an_uncompressed_answer(tmp_path: Path) -> None:
    """A gzip answer would be stored as base64 of compressed bytes, where no secret can be found."""
    backend = EchoBackend()
    folder = tmp_path / "proxy"
    with RunningApp(backend) as upstream, RunningApp(CaptureProxy(upstream.url, Recording(folder, mode="proxy"))) as px:
        status, _ = post(px.url + "/v1/chat/completions", CHAT, {"Accept-Encoding": "gzip, br"})
        assert status == 200
    assert backend.seen[0]["accept-encoding"] == "identity"


class _SubBytes(bytes):
    """A bytes subclass, as a caller might pass: the compiled core takes it where it takes bytes."""


def _scrubbed_by_search(data: bytes, needles: tuple[bytes, ...]) -> bytes:
    """What scrub_bytes must give: each needle in turn, found then replaced."""
    for needle in needles:
        if needle in data:
            data = data.replace(needle, b"[REDACTED]")
    return data


@given(
    st.lists(st.sampled_from([b"sk-", b"ab", b"key", b"x", b"[REDACTED]", b"\n"]), max_size=12).map(b"".join),
    st.lists(st.sampled_from([b"sk-ab", b"abab", b"key", b"[REDACTED]", b"x" * 8]), max_size=3, unique=True),
)
def test_scrub_bytes_masks_every_needle_and_keeps_the_object_when_none_occurs(
    data: bytes, needles: list[bytes]
) -> None:
    order = tuple(needles)
    expected = _scrubbed_by_search(data, order)
    got = scrub_bytes(data, order)
    assert got == expected
    # the callers tell "nothing was masked" by identity (``is not``): it must hold both ways
    assert (got is data) == (not any(n in data for n in order))
    # a subclass of bytes (whose replace always copies) is masked the same, and left as it is when
    # nothing occurs
    sub = _SubBytes(data)
    got_sub = scrub_bytes(sub, order)
    assert got_sub == expected
    assert (got_sub is sub) == (not any(n in data for n in order))
