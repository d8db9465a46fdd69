"""The tiny model's shape and its seeded random weights, shared by the GGUF and the HF folder.

Both engines get the same numbers: the weights are drawn once, in Hugging Face (Qwen3) naming,
from a fixed-seed NumPy generator, then rounded to bfloat16. vLLM reads them as bf16; the GGUF
stores the same values as f32, where they are exact, so nothing is lost between the two.

Shape: hidden 64, 4 query heads and 2 KV heads of size 32 (an explicit ``head_dim``: vLLM's CPU
attention accepts 32 but not the implied 64 / 4 = 16), 2 layers, FFN 256, vocabulary 4096, tied
embeddings. Qwen3's per-head ``q_norm`` / ``k_norm`` weights (ones) exist only in the HF folder:
llama.cpp's llama architecture has no such norm, so the two models compute slightly different
junk. With random weights the model practically never emits eos; callers must bound every
generation.

Two choices make the model steerable with ``logit_bias`` (the way the engine tests force a tool
call on llama.cpp: +100 on ``<tool_call>`` and on the newline). In so small a model the residual
stream is mostly the current token's embedding, so with a tied head the top logit is the token
just read: the model repeats itself (``\n\n\n…``, ``<tool_call><tool_call>…``) and of two
boosted tokens always picks the one it just wrote. Hence:

* the final norm weight is **-1**: the head scores tokens *against* the current one, so after a
  newline ``<tool_call>`` beats the newline and after ``<tool_call>`` the newline wins, which
  is the order the forced call needs; unsteered text stays varied junk;
* the embeddings are drawn 5x wider than the other matrices (std 0.1), so that effect is a few
  logits strong and holds when sampling at temperature 1, not only greedily.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from oaishim.engine._tokenizer import VOCAB_SIZE

if TYPE_CHECKING:  # NumPy is imported where used: the package imports without the engine extra
    import numpy as np
    import numpy.typing as npt

SEED = 20261129
F32: TypeAlias = "npt.NDArray[np.float32]"


@dataclass(frozen=True, slots=True)
class Shape:
    vocab: int = VOCAB_SIZE
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 32
    ffn: int = 256
    context: int = 4096
    rope_theta: float = 1_000_000.0
    rms_eps: float = 1e-6
    init_std: float = 0.02
    embed_std: float = 0.1  # see the module docstring


SHAPE = Shape()


def to_bf16_bits(values: F32) -> npt.NDArray[np.uint16]:
    """Round float32 to bfloat16 (nearest, ties to even) and return the raw 16-bit patterns."""
    import numpy as np

    bits = np.ascontiguousarray(values, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2")


def from_bf16_bits(bits: npt.NDArray[np.uint16]) -> F32:
    import numpy as np

    return np.asarray(bits.astype("<u4") << 16).view("<f4")


def hf_weights(shape: Shape = SHAPE, seed: int = SEED) -> dict[str, F32]:
    """Every tensor of the Qwen3 checkpoint, by HF name, bf16-exact float32, drawn in a fixed order."""
    import numpy as np

    rng = np.random.default_rng(seed)
    h, d = shape.hidden, shape.head_dim

    def normal(rows: int, cols: int, std: float = shape.init_std) -> F32:
        drawn = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(std)
        return from_bf16_bits(to_bf16_bits(drawn))

    def ones(n: int, value: float = 1.0) -> F32:
        return np.full(n, value, dtype=np.float32)

    weights: dict[str, F32] = {"model.embed_tokens.weight": normal(shape.vocab, h, shape.embed_std)}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        weights |= {
            p + "input_layernorm.weight": ones(h),
            p + "self_attn.q_proj.weight": normal(shape.heads * d, h),
            p + "self_attn.k_proj.weight": normal(shape.kv_heads * d, h),
            p + "self_attn.v_proj.weight": normal(shape.kv_heads * d, h),
            p + "self_attn.o_proj.weight": normal(h, shape.heads * d),
            p + "self_attn.q_norm.weight": ones(d),
            p + "self_attn.k_norm.weight": ones(d),
            p + "post_attention_layernorm.weight": ones(h),
            p + "mlp.gate_proj.weight": normal(shape.ffn, h),
            p + "mlp.up_proj.weight": normal(shape.ffn, h),
            p + "mlp.down_proj.weight": normal(h, shape.ffn),
        }
    weights["model.norm.weight"] = ones(h, -1.0)  # anti-repeat head: see the module docstring
    return weights
