"""The tiny model generator: same bytes every run, the token layout, the GGUF and the HF folder."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _tiny import tiny_models

from oaishim.engine import tinymodel
from oaishim.engine._gguf import gguf_tensors
from oaishim.engine._template import CHAT_TEMPLATE
from oaishim.engine._weights import SHAPE, from_bf16_bits, hf_weights, to_bf16_bits
from oaishim.engine.tinymodel import MANIFEST, TinyModels, ensure_tiny_models
from oaishim.engine.tokens import load_special_tokens
from oaishim.transform.special import special_tokens_from_gguf

np = pytest.importorskip("numpy")
gguf = pytest.importorskip("gguf")
tokenizers = pytest.importorskip("tokenizers")

ADDED = {
    "<|endoftext|>": 0,
    "<|im_start|>": 1,
    "<|im_end|>": 2,
    "<think>": 3,
    "</think>": 4,
    "<tool_call>": 5,
    "</tool_call>": 6,
}


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    models, seconds = tiny_models(tmp_path_factory)
    assert seconds < 30, f"building the tiny model took {seconds:.1f} s"
    return models


@pytest.fixture(scope="module")
def reader(tiny: TinyModels) -> Any:
    return gguf.GGUFReader(str(tiny.gguf))


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_bytes_in_another_process(tiny: TinyModels, tmp_path: Path) -> None:
    # Another process has other hash seeds (Rust's HashMap in tokenizers, Python's str hash).
    env = {**os.environ, "PYTHONHASHSEED": "12345", "RAYON_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "oaishim.engine.tinymodel", "--out", str(tmp_path)],
        env=env, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert f"gguf:      {tmp_path}" in out.stdout
    (other,) = tmp_path.glob("tiny-*")
    assert other.name == tiny.root.name
    mine, theirs = _tree(tiny.root), _tree(other)
    assert sorted(mine) == sorted(theirs) == sorted([
        MANIFEST, "tiny.gguf", "hf/config.json", "hf/generation_config.json", "hf/model.safetensors",
        "hf/tokenizer.json", "hf/tokenizer_config.json",
    ])  # fmt: skip
    assert [name for name in mine if mine[name] != theirs[name]] == []


def test_cached_build_is_reused(tiny: TinyModels, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_build(*args: object, **kwargs: object) -> TinyModels:
        raise AssertionError("rebuilt a cached model")

    monkeypatch.setattr(tinymodel, "build_tiny_models", no_build)
    assert ensure_tiny_models(tiny.root.parent) == tiny


def test_lost_race_keeps_the_winner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process renames its build into place first: ours is dropped, theirs used."""
    key = tinymodel.cache_key(tinymodel.corpus())
    winner = tmp_path / f"tiny-{key}"

    def racing_build(out: Path, texts: object = None, key: str = "") -> TinyModels:
        for folder in (out, winner):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / MANIFEST).write_text(json.dumps({"ids": {"x": 1 if folder == out else 2}}))
        return tinymodel._load(out)

    monkeypatch.setattr(tinymodel, "build_tiny_models", racing_build)
    models = ensure_tiny_models(tmp_path)
    assert models.root == winner and models.ids == {"x": 2}
    assert [p.name for p in tmp_path.iterdir()] == [winner.name]  # no temporary folder left


def test_cache_root_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OAISHIM_CACHE", str(tmp_path / "env"))
    assert tinymodel.cache_root(tmp_path / "arg") == tmp_path / "arg"
    assert tinymodel.cache_root() == tmp_path / "env"
    monkeypatch.delenv("OAISHIM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tinymodel.cache_root() == tmp_path / "xdg" / "oaishim"


def test_token_ids(tiny: TinyModels) -> None:
    tok = tokenizers.Tokenizer.from_file(str(tiny.tokenizer))
    assert tok.get_vocab_size() == 4096
    assert {t: tok.token_to_id(t) for t in ADDED} == ADDED
    assert dict(tiny.ids) == {**ADDED, "\n": tok.encode("\n").ids[0]}
    ids = tok.encode("<think>x</think>\n<tool_call>{}</tool_call><|im_end|>").ids
    assert ids[0] == 3 and ids[-1] == 2
    assert [ids.count(i) for i in (3, 4, 5, 6)] == [1, 1, 1, 1]
    # The tags are text (kept when special tokens are skipped); the control tokens are not.
    assert tok.decode(ids, skip_special_tokens=True) == "<think>x</think>\n<tool_call>{}</tool_call>"


def test_special_tokens_agree(tiny: TinyModels, reader: Any) -> None:
    assert tiny.special.special == {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
    assert tiny.special.end_of_turn == {"<|im_end|>"}
    assert load_special_tokens(tiny.hf_dir) == tiny.special
    metadata = {
        k: f.contents() for k, f in reader.fields.items() if k.startswith("tokenizer.ggml.") and "merges" not in k
    }
    assert special_tokens_from_gguf(metadata) == tiny.special


def test_gguf_metadata(tiny: TinyModels, reader: Any) -> None:
    meta: dict[str, Any] = {k: f.contents() for k, f in reader.fields.items()}
    assert meta["general.architecture"] == "llama"
    expected = {
        "llama.context_length": 4096, "llama.embedding_length": 64, "llama.block_count": 2,
        "llama.feed_forward_length": 256, "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2,
        "llama.attention.key_length": 32, "llama.attention.value_length": 32, "llama.vocab_size": 4096,
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.add_bos_token": False,
    }  # fmt: skip
    assert {k: meta[k] for k in expected} == expected
    assert meta["tokenizer.chat_template"] == CHAT_TEMPLATE
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    assert len(tokens) == len(types) == 4096 and tokens[:7] == list(ADDED)
    assert types[:7] == [3, 3, 3, 4, 4, 4, 4] and set(types[7:]) == {1}
    assert all(" " in m for m in meta["tokenizer.ggml.merges"][:10])
    shapes = {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}  # ggml order: columns first
    assert shapes["token_embd.weight"] == (64, 4096) and "output.weight" not in shapes
    assert shapes["blk.1.attn_q.weight"] == (64, 128) and shapes["blk.1.attn_k.weight"] == (64, 64)
    assert len(shapes) == 1 + 2 * 9 + 1
    assert 1_000_000 < tiny.gguf.stat().st_size < 4_000_000


def _safetensors(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    assert size % 8 == 0
    header = json.loads(data[8 : 8 + size])
    assert header.pop("__metadata__") == {"format": "pt"}
    body, end = data[8 + size :], 0
    out = {}
    for name, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"]):
        start, stop = info["data_offsets"]
        assert info["dtype"] == "BF16" and start == end
        bits = np.frombuffer(body[start:stop], dtype="<u2").reshape(info["shape"])
        out[name], end = from_bf16_bits(bits), stop
    assert end == len(body)
    return out


def test_safetensors_match_config_and_gguf(tiny: TinyModels, reader: Any) -> None:
    config = json.loads((tiny.hf_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["model_type"] == "qwen3"
    assert (config["hidden_size"], config["num_attention_heads"], config["head_dim"]) == (64, 4, 32)
    assert config["tie_word_embeddings"] is True and config["eos_token_id"] == 2
    h, d, heads, kv = (
        config["hidden_size"],
        config["head_dim"],
        config["num_attention_heads"],
        config["num_key_value_heads"],
    )
    tensors = _safetensors(tiny.hf_dir / "model.safetensors")
    assert "lm_head.weight" not in tensors and len(tensors) == 1 + 11 * config["num_hidden_layers"] + 1
    assert tensors["model.embed_tokens.weight"].shape == (config["vocab_size"], h)
    assert tensors["model.layers.0.self_attn.q_proj.weight"].shape == (heads * d, h)
    assert tensors["model.layers.0.self_attn.k_proj.weight"].shape == (kv * d, h)
    assert tensors["model.layers.0.self_attn.o_proj.weight"].shape == (h, heads * d)
    assert tensors["model.layers.1.self_attn.q_norm.weight"].shape == (d,)
    assert tensors["model.layers.1.mlp.down_proj.weight"].shape == (h, config["intermediate_size"])
    # The same numbers as the GGUF (which stores them as f32, q/k rows permuted for llama.cpp).
    stored = {t.name: np.asarray(t.data) for t in reader.tensors}
    for name, tensor in gguf_tensors(tensors, SHAPE).items():
        assert np.array_equal(stored[name].reshape(tensor.shape), tensor), name


def test_weights_are_bf16_exact_and_seeded() -> None:
    weights = hf_weights()
    embed = weights["model.embed_tokens.weight"]
    assert np.array_equal(from_bf16_bits(to_bf16_bits(embed)), embed)
    assert np.array_equal(
        hf_weights()["model.layers.1.mlp.up_proj.weight"], weights["model.layers.1.mlp.up_proj.weight"]
    )
    assert (weights["model.norm.weight"] == -1).all()  # the anti-repeat head (see _weights)
    assert to_bf16_bits(np.array([1.0, 1.00390625, 1.01171875], dtype=np.float32)).tolist() == [0x3F80, 0x3F80, 0x3F82]


def test_hf_tokenizer_files(tiny: TinyModels) -> None:
    config = json.loads((tiny.hf_dir / "tokenizer_config.json").read_text())
    assert config["chat_template"] == CHAT_TEMPLATE and config["eos_token"] == "<|im_end|>"
    decoder = {int(k): (v["content"], v["special"]) for k, v in config["added_tokens_decoder"].items()}
    assert decoder == {i: (t, i < 3) for t, i in ADDED.items()}
    added = json.loads(tiny.tokenizer.read_text())["added_tokens"]
    assert [(a["id"], a["content"], a["special"]) for a in added] == [(i, t, i < 3) for t, i in ADDED.items()]
    assert json.loads((tiny.hf_dir / "generation_config.json").read_text())["eos_token_id"] == 2


def test_cli_prints_paths(tiny: TinyModels, capsys: pytest.CaptureFixture[str]) -> None:
    assert tinymodel.main(["--out", str(tiny.root.parent)]) == 0
    out = capsys.readouterr().out
    assert f"gguf:      {tiny.gguf}\n" in out and f"hf_dir:    {tiny.hf_dir}\n" in out
