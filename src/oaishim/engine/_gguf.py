"""Writing the tiny model as a GGUF file for llama.cpp, with the ``gguf`` package.

The file is what llama.cpp's own converter would make of the HF folder, minus Qwen3's q/k norms:
architecture ``llama`` with an explicit key/value length of 32 (as for Mistral-NeMo), q/k rows
permuted from the HF rotary layout to llama.cpp's, f32 tensors, tied output (no
``output.weight``: llama.cpp then reuses ``token_embd``).

Tokenizer metadata: ``gpt2`` (byte-level BPE) with the ``gpt-2`` split regex, the same as the HF
tokenizer's, so both engines give the same ids. Token types follow the converter: the control
tokens are CONTROL (3), never printed unless asked; the tags are USER_DEFINED (4), llama.cpp's
"added but ordinary" type: always matched whole, even in text that is not parsed for special
tokens, and printed as text, as Qwen3's GGUFs have ``<think>``. No BOS is added (as Qwen3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oaishim.engine._tokenizer import ADDED, CONTROL, ENDOFTEXT, EOS, merges_list, vocab_list
from oaishim.engine._weights import F32, Shape

NAME = "oaishim-tiny"

# HF (Qwen3) tensor name suffix -> llama.cpp GGUF name, per layer.
_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def _rope_permute(weight: F32, heads: int) -> F32:
    """HF rotates the two halves of a head; llama.cpp's llama rope rotates adjacent pairs."""
    import numpy as np

    rows = weight.shape[0]
    return np.ascontiguousarray(
        weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


def gguf_tensors(weights: dict[str, F32], shape: Shape) -> dict[str, F32]:
    """The HF weights renamed (and q/k permuted) for llama.cpp, in the order they are written."""
    out = {"token_embd.weight": weights["model.embed_tokens.weight"]}
    for i in range(shape.layers):
        for hf_name, gguf_name in _LAYER_NAMES.items():
            tensor = weights[f"model.layers.{i}.{hf_name}"]
            if gguf_name == "attn_q.weight":
                tensor = _rope_permute(tensor, shape.heads)
            elif gguf_name == "attn_k.weight":
                tensor = _rope_permute(tensor, shape.kv_heads)
            out[f"blk.{i}.{gguf_name}"] = tensor
    out["output_norm.weight"] = weights["model.norm.weight"]
    return out


def write_gguf(path: Path, tokenizer: dict[str, Any], weights: dict[str, F32], shape: Shape, template: str) -> None:
    import gguf

    tokens = vocab_list(tokenizer)
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for token_id, token in enumerate(ADDED):
        types[token_id] = gguf.TokenType.CONTROL if token in CONTROL else gguf.TokenType.USER_DEFINED

    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(NAME)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(shape.vocab)
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(shape.rope_theta)
    writer.add_layer_norm_rms_eps(shape.rms_eps)

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges_list(tokenizer))
    writer.add_bos_token_id(ADDED.index(ENDOFTEXT))
    writer.add_eos_token_id(ADDED.index(EOS))
    writer.add_pad_token_id(ADDED.index(ENDOFTEXT))
    writer.add_add_bos_token(False)
    writer.add_chat_template(template)

    for name, tensor in gguf_tensors(weights, shape).items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
