"""Backend profiles: the registry, the version ranges, and the values the notes and recordings back."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from oaishim.profiles import FAMILIES, PROFILES, Profile, family_of, get_profile, version_key
from oaishim.profiles._fields import LEGACY_FUNCTIONS, PLATFORM_ONLY
from oaishim.profiles._version import is_unknown

SPEC = Path(__file__).resolve().parents[2] / "spec" / "openapi.yaml"  # vendored: spec/SOURCE.md
VLLM_REC = Path(__file__).resolve().parents[1] / "fixtures" / "recorded" / "vllm-0.32-cpu"
BACKEND_MODULES = ("vllm", "sglang", "trtllm", "llamacpp", "ollama", "openai", "generic")
ALL_PROFILES = list({id(p): p for p in PROFILES.values()}.values())  # Profile is unhashable (extra is a dict)


@pytest.fixture(scope="module")
def chat_request_fields() -> set[str]:
    assert SPEC.is_file(), f"the vendored official spec is missing: {SPEC}"
    spec = yaml.load(SPEC.read_bytes(), Loader=yaml.CSafeLoader)
    schemas = spec["components"]["schemas"]

    def properties(name: str) -> set[str]:
        node = schemas[name]
        found = set(node.get("properties", {}))
        for part in node.get("allOf", []):
            if "$ref" in part:
                found |= properties(part["$ref"].rsplit("/", 1)[-1])
            found |= set(part.get("properties", {}))
        return found

    return properties("CreateChatCompletionRequest")


# --- the registry -----------------------------------------------------------------------------


def test_bare_keys_are_the_conservative_profile_of_each_family() -> None:
    """Without a version, a family name means the profile that is safe on every release, not the newest."""
    for family in FAMILIES:
        assert PROFILES[family.name] is family.unknown_version
        assert any(family.unknown_version is profile for _, profile in family.releases)
    assert {"vllm", "sglang", "trtllm", "llamacpp", "ollama", "openai", "generic"} <= set(PROFILES)


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_the_conservative_profile_keeps_every_repair_some_release_needs(family: Any) -> None:
    """A repair a release needs and the fallback skipped would lose a client's message (developer) or
    give it usage it did not ask for; both repairs are harmless on the releases that do not need them."""
    profiles = [profile for _, profile in family.releases]
    fallback = family.unknown_version
    assert fallback.developer_to_system == any(p.developer_to_system for p in profiles)
    assert fallback.usage_on_empty_stream_options == any(p.usage_on_empty_stream_options for p in profiles)
    assert fallback.tool_call_type_required == any(p.tool_call_type_required for p in profiles)


def test_every_profile_has_one_versioned_key_named_by_its_first_version() -> None:
    for family in FAMILIES:
        assert family.releases[0][0] == "0"
        for first, profile in family.releases:
            assert PROFILES[f"{family.name}@{first}"] is profile
            assert profile.name == family.name


def test_releases_are_ordered_and_versions_describe_their_range() -> None:
    for family in FAMILIES:
        keys = [version_key(first) for first, _ in family.releases]
        assert all(k is not None for k in keys)
        assert keys == sorted(keys, key=lambda k: k or ())
        assert len(set(keys)) == len(keys)
        for _, profile in family.releases:
            assert profile.version == family.range_of(profile)


def test_get_profile_by_key_and_by_version_in_range() -> None:
    assert get_profile("vllm") is PROFILES["vllm@0.6.5"]  # the fallback; the gateway detects first
    assert get_profile("vllm@0.6.5") is PROFILES["vllm@0.6.5"]
    assert get_profile("vllm@0.10.2") is PROFILES["vllm@0.6.5"]
    assert get_profile("vllm@0.6.4.post1") is PROFILES["vllm@0"]
    assert get_profile("vllm@0.33.0rc1") is PROFILES["vllm@0.32"]
    assert get_profile("trtllm@1.3.0rc6") is PROFILES["trtllm@0"]
    assert get_profile("trtllm@1.4.0rc0") is PROFILES["trtllm@0"]
    assert get_profile("trtllm@1.4.0") is PROFILES["trtllm@1.4"]
    assert get_profile("llamacpp@b8651") is PROFILES["llamacpp@0"]
    assert get_profile("llamacpp@b11434") is PROFILES["llamacpp@b9174"]
    assert get_profile("ollama@0.12.6") is PROFILES["ollama"]
    assert get_profile("generic") is PROFILES["generic"]


@pytest.mark.parametrize("name", ["vlm", "vllm@", "vllm@latest", "generic@1.0", "", "@0.32"])
def test_unknown_names_raise_key_error_listing_the_names(name: str) -> None:
    with pytest.raises(KeyError) as info:
        get_profile(name)
    message = str(info.value)
    assert repr(name) in message
    for key in ("vllm@0.32", "trtllm@1.4", "llamacpp@b9174", "generic"):
        assert key in message


def test_registry_is_read_only() -> None:
    with pytest.raises(TypeError):
        PROFILES["mine"] = PROFILES["generic"]  # type: ignore[index]


def test_family_lookup() -> None:
    assert family_of("vllm") is FAMILIES[0]
    assert family_of("generic") is None


# --- documentation ----------------------------------------------------------------------------


@pytest.mark.parametrize("module", BACKEND_MODULES)
def test_every_backend_module_documents_its_quirks_with_references(module: str) -> None:
    doc = importlib.import_module(f"oaishim.profiles.{module}").__doc__ or ""
    assert len(doc) > 400
    assert "backend-quirks.md" in doc or module == "openai"


@pytest.mark.parametrize("profile", ALL_PROFILES, ids=repr)
def test_every_profile_has_its_own_doc(profile: Profile) -> None:
    assert len(profile.doc) > 40


# --- rejects ----------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", ALL_PROFILES, ids=repr)
def test_rejects_are_fields_of_the_official_chat_request(profile: Profile, chat_request_fields: set[str]) -> None:
    assert profile.rejects <= chat_request_fields, profile.rejects - chat_request_fields


def test_shared_field_sets_are_official_fields(chat_request_fields: set[str]) -> None:
    assert chat_request_fields >= PLATFORM_ONLY | LEGACY_FUNCTIONS


@pytest.mark.parametrize("profile", ALL_PROFILES, ids=repr)
def test_no_profile_drops_what_every_chat_request_needs(profile: Profile) -> None:
    assert not profile.rejects & {"model", "messages", "stream", "stream_options", "max_tokens", "tools"}


def test_strict_backends_drop_the_platform_fields_and_lenient_ones_drop_nothing() -> None:
    for name in ("trtllm@0", "trtllm@1.4", "vllm@0", "generic"):
        assert PROFILES[name].rejects >= PLATFORM_ONLY
    for name in ("vllm@0.6.5", "vllm@0.32", "sglang", "llamacpp@0", "llamacpp@b9174", "ollama", "openai"):
        assert PROFILES[name].rejects == frozenset()
    # reasoning_effort is never silently dropped: each profile says how it is sent (reasoning_effort_in)
    assert all("reasoning_effort" not in p.rejects for p in PROFILES.values())
    assert PROFILES["trtllm@0"].reasoning_effort_in.efforts is None
    assert PROFILES["trtllm@1.4"].reasoning_effort_in.efforts is not None
    assert "parallel_tool_calls" in PROFILES["trtllm@1.4"].rejects


# --- values the notes back --------------------------------------------------------------------


def test_history_reasoning_names() -> None:
    expected = {
        "vllm@0": "drop",
        "vllm@0.6.5": "reasoning",
        "vllm@0.32": "reasoning",
        "sglang": "reasoning_content",
        "trtllm@0": "drop",
        "trtllm@1.4": "reasoning",
        "llamacpp@0": "reasoning_content",
        "llamacpp@b9174": "reasoning_content",
        "ollama": "reasoning",
        "openai": "drop",
        "generic": "drop",
    }
    assert {name: PROFILES[name].reasoning_in for name in expected} == expected


def test_request_side_flags() -> None:
    merged = {name for name, p in PROFILES.items() if p.developer_to_system}
    assert merged == {"vllm", "vllm@0", "vllm@0.6.5", "sglang", "sglang@0", "trtllm", "trtllm@0", "trtllm@1.4"} | {
        "llamacpp",
        "llamacpp@0",
        "ollama",
        "ollama@0",
        "generic",
    }
    usage = {name for name, p in PROFILES.items() if p.usage_on_empty_stream_options}
    assert usage == {"vllm", "vllm@0", "vllm@0.6.5", "trtllm", "trtllm@0", "trtllm@1.4", "generic"}
    typed = {name for name, p in PROFILES.items() if p.tool_call_type_required}
    assert typed == {"llamacpp", "llamacpp@0", "llamacpp@b9174", "generic"}
    assert PROFILES["ollama"].max_tokens_in == "max_tokens"
    assert PROFILES["openai"].max_tokens_in == "both"


def test_only_a_default_started_llama_cpp_is_trusted_to_split_reasoning() -> None:
    splitting = {name for name, p in PROFILES.items() if p.splits_reasoning}
    assert splitting == {"llamacpp@b9174", "openai", "openai@0"}


def test_the_official_profile_rewrites_nothing() -> None:
    official = PROFILES["openai"]
    assert not official.developer_to_system
    assert official.rejects == frozenset()
    assert official.max_tokens_in == "both"
    assert not official.usage_on_empty_stream_options
    assert official.request_hooks == ()
    assert official.reasoning_out == ()


def test_only_llama_cpp_is_identified_by_its_server_header() -> None:
    headers = {name: p.server_header for name, p in PROFILES.items() if p.server_header}
    assert set(headers.values()) == {"llama.cpp"}


# --- values the vLLM 0.32 recordings back -----------------------------------------------------


def _read(name: str) -> str:
    return (VLLM_REC / name).read_text(encoding="utf-8")


def _events(name: str) -> list[dict[str, Any]]:
    lines = _read(name).splitlines()
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


def test_vllm_032_empty_stream_options_gives_no_usage() -> None:
    assert json.loads(_read("s1_chat_stream_emptyopts.req.json"))["stream_options"] == {}
    assert not any(event.get("usage") for event in _events("s1_chat_stream_emptyopts.body"))
    assert any(event.get("usage") for event in _events("s1_chat_stream_usage.body"))
    assert PROFILES["vllm@0.32"].usage_on_empty_stream_options is False


def test_vllm_032_maps_developer_to_system_itself() -> None:
    assert json.loads(_read("s3x_tokenize_dev.req.json"))["messages"][0]["role"] == "developer"
    tokens = json.loads(_read("s3x_tokenize_dev.body"))["token_strs"]
    assert tokens[:2] == ["<|im_start|>", "system"]
    assert PROFILES["vllm@0.32"].developer_to_system is False


def test_vllm_032_reads_reasoning_not_reasoning_content_in_history() -> None:
    with_content = json.loads(_read("s3x_tokenize_hist.body"))["token_strs"]
    with_reasoning = json.loads(_read("s3x_tokenize_hist_reasoning.body"))["token_strs"]
    assert "<think>" not in with_content
    assert "<think>" in with_reasoning
    assert PROFILES["vllm@0.32"].reasoning_in == "reasoning"


def test_vllm_032_answers_unknown_fields_and_reports_reasoning_as_reasoning() -> None:
    assert json.loads(_read("s1_unknown_field.req.json"))["foo"] == 1
    assert _read("s1_unknown_field.headers").startswith("HTTP/1.1 200")
    message = json.loads(_read("s1_unknown_field.body"))["choices"][0]["message"]
    assert "reasoning" in message
    assert "reasoning_content" not in message
    assert PROFILES["vllm@0.32"].reasoning_out == ("reasoning",)


# --- version keys -----------------------------------------------------------------------------


def test_versions_order_like_releases() -> None:
    ordered = ["0.5.4", "0.6.4.post1", "0.6.5", "0.11.1rc2", "0.11.1", "1.3.0rc6", "1.3.0", "1.3.0.post1", "1.4"]
    keys = [version_key(text) for text in ordered]
    assert keys == sorted(keys, key=lambda k: k or ())
    assert len(set(keys)) == len(keys)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.32.0", (0, 32, 0, 0, 4, 0)),
        ("v0.12.6", (0, 12, 6, 0, 4, 0)),
        ("0.10.1+cpu", (0, 10, 1, 0, 4, 0)),
        ("0.32.0.dev12+gabcdef", (0, 32, 0, 0, 0, 12)),
        ("b9174-1a2b3c4", (9174, 0, 0, 0, 4, 0)),
        ("1.3", (1, 3, 0, 0, 4, 0)),
    ],
)
def test_version_key_parses_backend_styles(text: str, expected: tuple[int, ...]) -> None:
    assert version_key(text) == expected


@pytest.mark.parametrize("text", ["", "latest", "unknown", "vx"])
def test_version_key_rejects_non_versions(text: str) -> None:
    assert version_key(text) is None


def test_build_zero_is_an_unknown_version() -> None:
    unknown = version_key("b0-unknown")
    assert unknown is not None
    assert is_unknown(unknown)
    known = version_key("b1")
    assert known is not None
    assert not is_unknown(known)
