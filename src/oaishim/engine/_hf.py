"""Writing the tiny model as a Hugging Face folder for vLLM: Qwen3 config, safetensors, tokenizer.

The safetensors file is written by hand, so building the model needs no torch: 8 bytes of
little-endian header length, a JSON header (padded with spaces to 8 bytes, as the reference
writer does) mapping each name to dtype, shape and byte range, then the raw tensors in header
order. bfloat16 is the top half of a float32 (see :mod:`._weights`). ``lm_head`` is absent:
the embeddings are tied, and vLLM skips ``lm_head.*`` then.

The tokenizer is ``PreTrainedTokenizerFast`` over ``tokenizer.json``, which needs no other files;
``added_tokens_decoder`` marks only the three control tokens special, so ``engine.tokens.load_special_tokens``
(and vLLM's ``skip_special_tokens``) see the tags as text.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from oaishim.engine._tokenizer import ADDED, CONTROL, ENDOFTEXT, EOS
from oaishim.engine._weights import F32, Shape, to_bf16_bits

BOS_ID, EOS_ID = ADDED.index(ENDOFTEXT), ADDED.index(EOS)


def _dump(data: Any) -> bytes:
    return (json.dumps(data, ensure_ascii=False, indent=2) + "\n").encode()


def config(shape: Shape) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "hidden_size": shape.hidden,
        "initializer_range": shape.init_std,
        "intermediate_size": shape.ffn,
        "max_position_embeddings": shape.context,
        "max_window_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_hidden_layers": shape.layers,
        "num_key_value_heads": shape.kv_heads,
        "rms_norm_eps": shape.rms_eps,
        "rope_scaling": None,
        "rope_theta": shape.rope_theta,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": shape.vocab,
    }


def tokenizer_config(template: str, shape: Shape) -> dict[str, Any]:
    decoder = {
        str(token_id): {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": token in CONTROL,
        }
        for token_id, token in enumerate(ADDED)
    }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "bos_token": None,
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS,
        "errors": "replace",
        "model_max_length": shape.context,
        "pad_token": ENDOFTEXT,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def safetensors_bytes(weights: dict[str, F32]) -> bytes:
    """The ``.safetensors`` encoding of the weights, all in bf16, tensors sorted by name."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name in sorted(weights):
        blob = to_bf16_bits(weights[name]).tobytes()
        header[name] = {
            "dtype": "BF16",
            "shape": list(weights[name].shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


def write_hf(folder: Path, tokenizer: dict[str, Any], weights: dict[str, F32], shape: Shape, template: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_bytes(_dump(config(shape)))
    (folder / "generation_config.json").write_bytes(
        _dump({"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": BOS_ID})
    )
    (folder / "tokenizer.json").write_bytes(_dump(tokenizer))
    (folder / "tokenizer_config.json").write_bytes(_dump(tokenizer_config(template, shape)))
    (folder / "model.safetensors").write_bytes(safetensors_bytes(weights))
