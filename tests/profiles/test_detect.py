"""Auto-detection from the Server header, a version body and the /v1/models body."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from oaishim.profiles import FAMILIES, PROFILES, detect, probe_paths, resolve
from oaishim.profiles.detect import template_paths, with_template

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
VLLM = RECORDED / "vllm-0.32-cpu"
LLAMACPP = RECORDED / "llamacpp-server"


def _server(headers: Path) -> str | None:
    for line in headers.read_text(encoding="latin-1").splitlines():
        name, _, value = line.partition(":")
        if name.strip().lower() == "server":
            return value.strip()
    return None


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _card(owned_by: str, **extra: Any) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": "m", "object": "model", "created": 1, "owned_by": owned_by, **extra}]}


# Hand-written /v1/models bodies, from docs/backend-quirks.md (not recorded).
SGLANG_MODELS = _card("sglang", root="Qwen/Qwen3-8B", parent=None, max_model_len=40960)  # S-31
TRTLLM_MODELS = _card("tensorrt_llm")  # T-26
OLLAMA_MODELS = {  # O-22: owned_by is the namespace, "library" for official models
    "object": "list",
    "data": [
        {"id": "qwen3:8b", "object": "model", "created": 1767000000, "owned_by": "library"},
        {"id": "jmorgan/custom:latest", "object": "model", "created": 1767000001, "owned_by": "jmorgan"},
    ],
}
OPENAI_MODELS = {
    "object": "list",
    "data": [
        {"id": "gpt-4o", "object": "model", "created": 1715367049, "owned_by": "system"},
        {"id": "o3", "object": "model", "created": 1744225308, "owned_by": "system"},
    ],
}


# --- the real recordings ----------------------------------------------------------------------


def test_recorded_vllm_032() -> None:
    server = _server(VLLM / "s1_models.headers")
    assert server == "uvicorn"
    profile, reason = detect(server, _json(VLLM / "s1_version.body"), _json(VLLM / "s1_models.body"))
    assert profile is PROFILES["vllm@0.32"]
    assert "vllm 0.32.0" in reason
    assert "owned_by 'vllm'" in reason
    assert "vllm@0.32" in reason


def test_recorded_vllm_without_its_version_gets_the_safe_profile() -> None:
    profile, reason = detect("uvicorn", None, _json(VLLM / "s1_models.body"))
    assert profile is PROFILES["vllm@0.6.5"]
    assert "version unknown" in reason


def test_recorded_llama_cpp_by_header_without_a_build_number() -> None:
    server = _server(LLAMACPP / "ls.models.headers")
    assert server == "llama.cpp"
    fingerprint = _json(LLAMACPP / "ls.chat_nonstream.body")["system_fingerprint"]
    assert fingerprint == "b0-unknown"
    models = _json(LLAMACPP / "ls.models.body")
    profile, reason = detect(server, {"build_info": fingerprint}, models)
    assert profile is PROFILES["llamacpp@0"]
    assert "Server header 'llama.cpp'" in reason
    assert "version 'b0-unknown' names no release" in reason


def test_an_all_zero_version_is_unknown_not_the_oldest_release() -> None:
    profile, reason = detect("uvicorn", {"version": "0.0.0"}, _json(VLLM / "s1_models.body"))
    assert profile is PROFILES["vllm@0.6.5"]
    assert "names no release" in reason


def test_recorded_llama_cpp_models_alone_are_enough() -> None:
    models = _json(LLAMACPP / "ls.models.body")
    profile, reason = detect(None, None, models)
    assert profile is PROFILES["llamacpp@0"]
    assert "owned_by 'llamacpp'" in reason


def test_recorded_llama_cpp_shape_without_owned_by() -> None:
    models = _json(LLAMACPP / "ls.models.body")
    for card in models["data"]:
        card["owned_by"] = "someone"
    profile, reason = detect(None, None, models)
    assert profile.name == "llamacpp"
    assert "'models'" in reason


@pytest.mark.parametrize(
    ("build", "key"), [("b9174-1a2b3c4", "llamacpp@b9174"), ("b11434", "llamacpp@b9174"), ("b8651", "llamacpp@0")]
)
def test_llama_cpp_build_number_picks_the_profile(build: str, key: str) -> None:
    profile, _ = detect("llama.cpp", {"build_info": build}, _json(LLAMACPP / "ls.models.body"))
    assert profile is PROFILES[key]


# --- vLLM versions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "key"),
    [
        ("0.5.4", "vllm@0"),
        ("0.6.4.post1", "vllm@0"),
        ("0.6.5", "vllm@0.6.5"),
        ("0.10.1+cpu", "vllm@0.6.5"),
        ("0.22.1", "vllm@0.6.5"),
        ("0.32.0", "vllm@0.32"),
        ("0.40.0", "vllm@0.32"),
    ],
)
def test_vllm_version_picks_the_profile(version: str, key: str) -> None:
    profile, reason = detect("uvicorn", {"version": version}, _json(VLLM / "s1_models.body"))
    assert profile is PROFILES[key]
    assert version in reason


# --- hand-written model lists -----------------------------------------------------------------


def test_sglang() -> None:
    profile, reason = detect("uvicorn", {"version": "0.5.2", "model_path": "Qwen/Qwen3-8B"}, SGLANG_MODELS)
    assert profile is PROFILES["sglang"]
    assert "owned_by 'sglang'" in reason


@pytest.mark.parametrize(
    ("version", "key"), [("1.3.0rc6", "trtllm@0"), ("1.2.0", "trtllm@0"), ("1.4.0", "trtllm@1.4"), (None, "trtllm@0")]
)
def test_trtllm(version: str | None, key: str) -> None:
    body = {"version": version} if version else None
    profile, _ = detect("uvicorn", body, TRTLLM_MODELS)
    assert profile is PROFILES[key]


def test_ollama() -> None:
    profile, reason = detect(None, {"version": "0.12.6"}, OLLAMA_MODELS)
    assert profile is PROFILES["ollama"]
    assert "owned_by 'library'" in reason


def test_openai() -> None:
    profile, reason = detect("cloudflare", None, OPENAI_MODELS)
    assert profile is PROFILES["openai"]
    assert "owned_by 'system'" in reason


def test_header_wins_over_model_cards() -> None:
    profile, _ = detect("llama.cpp", None, _card("vllm"))
    assert profile.name == "llamacpp"


# --- the fallback -----------------------------------------------------------------------------


def test_nothing_known_is_generic() -> None:
    profile, reason = detect(None, None, None)
    assert profile is PROFILES["generic"]
    assert "unrecognised" in reason


def test_unknown_owner_with_a_version_is_still_generic() -> None:
    profile, reason = detect("nginx", {"version": "1.2.3"}, _card("organization_owner"))
    assert profile is PROFILES["generic"]
    assert "unrecognised" in reason
    assert "'nginx'" in reason
    assert "1.2.3" in reason


@pytest.mark.parametrize(
    ("header", "version", "models"),
    [
        ("", "", ""),
        (None, 42, [1, 2]),
        (None, ["0.32.0"], {"data": "nope"}),
        (None, {"version": 32}, {"data": [None, 3, "x"]}),
        (None, None, {"object": "list"}),
    ],
)
def test_malformed_bodies_fall_back_without_raising(header: str | None, version: Any, models: Any) -> None:
    profile, reason = detect(header, version, models)
    assert profile is PROFILES["generic"]
    assert reason


def test_a_bare_version_string_is_read() -> None:
    profile, _ = detect(None, "0.10.0", _json(VLLM / "s1_models.body"))
    assert profile is PROFILES["vllm@0.6.5"]


def test_an_unparsable_version_uses_the_family_fallback() -> None:
    profile, reason = detect(None, {"version": "dev"}, _json(VLLM / "s1_models.body"))
    assert profile is PROFILES["vllm@0.6.5"]
    assert "'dev' unreadable" in reason


def test_detect_does_not_touch_its_inputs() -> None:
    models = _json(LLAMACPP / "ls.models.body")
    version = {"build_info": "b9999-abc"}
    before = copy.deepcopy((models, version))
    detect("llama.cpp", version, models)
    assert (models, version) == before


# --- --profile <family>: only the version is detected -------------------------------------------


def test_probe_paths_per_kind_of_name() -> None:
    assert probe_paths("auto") == ("/version", "/v1/models")
    assert probe_paths("vllm") == ("/version", "/v1/models")
    assert probe_paths("trtllm") == ("/version", "/v1/models")
    assert probe_paths("llamacpp") == ("/props", "/v1/models")
    for pinned in ("vllm@0.32", "vllm@0.10.2", "llamacpp@b9174", "generic", "sglang", "ollama", "openai"):
        assert probe_paths(pinned) == (), pinned


@pytest.mark.parametrize("family", [f for f in FAMILIES if len(f.releases) > 1], ids=lambda f: f.name)
def test_a_family_without_a_version_answer_gets_its_conservative_profile(family: Any) -> None:
    answers: dict[str, Any] = dict.fromkeys(probe_paths(family.name))
    profile, reason = resolve(family.name, None, answers)
    assert profile is family.unknown_version and f"--profile {family.name}" in reason
    assert profile.developer_to_system


@pytest.mark.parametrize(
    ("name", "answers", "expected"),
    [
        ("vllm", {"/version": {"version": "0.32.0"}}, "vllm@0.32"),
        ("vllm", {"/version": {"version": "0.6.4.post1"}}, "vllm@0"),
        ("vllm", {"/version": "0.10.2"}, "vllm@0.6.5"),
        ("trtllm", {"/version": {"version": "1.3.0rc6"}}, "trtllm@0"),
        ("trtllm", {"/version": {"version": "1.4.1"}}, "trtllm@1.4"),
        ("llamacpp", {"/props": {"build_info": "b11434-abc"}}, "llamacpp@b9174"),
        ("llamacpp", {"/props": {"build_info": "b0-unknown"}}, "llamacpp@0"),
        ("sglang", {}, "sglang@0"),
        ("ollama", {}, "ollama@0"),
        ("openai", {}, "openai@0"),
        ("vllm@0.32", {"/version": {"version": "0.5.0"}}, "vllm@0.32"),
    ],
)
def test_a_family_reads_its_own_version_endpoint(name: str, answers: dict[str, Any], expected: str) -> None:
    profile, _ = resolve(name, None, answers)
    assert profile is PROFILES[expected]


def test_a_family_ignores_the_version_of_a_backend_that_names_another_family() -> None:
    sglang = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "sglang"}]}
    profile, reason = resolve("vllm", None, {"/version": {"version": "0.32.0"}, "/v1/models": sglang})
    assert profile is PROFILES["vllm@0.6.5"] and "looks like sglang" in reason
    profile, _ = resolve("llamacpp", "uvicorn", {"/props": {"build_info": "b11434"}, "/v1/models": None})
    assert profile is PROFILES["llamacpp@b9174"]  # nothing names another family: the version is trusted


# -- the chat template (L-34) ------------------------------------------------------------------------

HERMES_TEMPLATE = "{%- for tool in tools %}{{ tool | tojson }}{%- endfor %}<tool_call>\\n{...}\\n</tool_call>"
OTHER_TEMPLATE = "{%- for tool in tools %}{{ tool | tojson }}{%- endfor %}<|tool_calls_section_begin|>"
# How each format's template writes (or describes) a call, in short: the gateway reads those in READ
# from text; in NOT_READ, Qwen3-Coder's XML and GLM's key/value tags come inside <tool_call> too, not JSON.
READ = {
    "qwen3, escaped newline": '{{- \'<tool_call>\\n{"name": <function-name>, "arguments": <args>}\\n</tool_call>\' }}',
    "hermes 2 pro, arguments first": 'Return <tool_call>\n{"arguments": <args-dict>, "name": <function-name>}\n</tool_call>',
    "minimax-m2": "{{- '<minimax:tool_call>\\n' }}{%- for tc in message.tool_calls %}<invoke name=",
    "mistral": "{{- '[TOOL_CALLS]' + tool_call.name + '[ARGS]' + arguments }}",
}
NOT_READ = {
    "qwen3-coder": "{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}",
    "glm": "{{- '<tool_call>' }}{{ tc.name }}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}</arg_value>",
    "glm, a jinja tag after the tag": "<tool_call>{{ tc.name }}</tool_call>",
    "no tools": OTHER_TEMPLATE,
}


@pytest.mark.parametrize("build", ["b0-unknown", "b11434-abc"])
def test_a_template_writing_calls_the_gateway_reads_has_streams_under_auto_read_as_text(build: str) -> None:
    answers = {"/props": {"build_info": build, "chat_template": HERMES_TEMPLATE}, "/v1/models": None}
    profile, reason = resolve("llamacpp", None, answers)
    assert template_paths(profile, answers) == ()  # the template came with the version
    adapted, why = with_template(profile, reason, answers)
    assert adapted.tool_choice.calls_as_text and not profile.tool_choice.calls_as_text
    assert why.startswith(reason) and "<tool_call>" in why
    # everything else is the version's profile
    assert replace(adapted, tool_choice=profile.tool_choice) == profile


@pytest.mark.parametrize("template", READ.values(), ids=READ.keys())
def test_each_format_the_gateway_reads_is_recognised_in_a_template(template: str) -> None:
    answers = {"/props": {"build_info": "b11434", "chat_template": template}}
    profile, reason = resolve("llamacpp", None, answers)
    assert with_template(profile, reason, answers)[0].tool_choice.calls_as_text


@pytest.mark.parametrize("template", NOT_READ.values(), ids=NOT_READ.keys())
def test_a_template_writing_another_format_keeps_the_backends_own_parser(template: str) -> None:
    answers = {"/props": {"build_info": "b11434", "chat_template": template}}
    profile, reason = resolve("llamacpp", None, answers)
    adapted, why = with_template(profile, reason, answers)
    assert adapted is profile and "does not read" in why


@pytest.mark.parametrize("props", [None, {"build_info": "b11434"}, {"chat_template": 7}, ["<tool_call>"]])
def test_no_readable_template_keeps_the_profile(props: Any) -> None:
    answers = {"/props": props, "/v1/models": None}
    profile, reason = resolve("llamacpp", None, answers)
    assert with_template(profile, reason, answers) == (profile, reason)


def test_auto_fetches_the_template_of_a_detected_llamacpp_only() -> None:
    cards = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "llamacpp", "meta": {}}]}
    answers: dict[str, Any] = {"/version": None, "/v1/models": cards}
    profile, _ = resolve("auto", "llama.cpp", answers)
    assert template_paths(profile, answers) == ("/props",)
    vllm_cards = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "vllm"}]}
    vllm, _ = resolve("auto", None, {"/version": {"version": "0.32.0"}, "/v1/models": vllm_cards})
    assert vllm.name == "vllm" and template_paths(vllm, answers) == ()  # its family reads no template
    answers["/props"] = {"chat_template": HERMES_TEMPLATE}
    assert with_template(profile, "auto", answers)[0].tool_choice.calls_as_text
