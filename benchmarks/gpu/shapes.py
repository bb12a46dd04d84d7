"""Random-weight models of a realistic shape, for `specviz profile` where no real model of that
size can travel to the GPU (issue #45, point 4).

A forward pass costs what its shapes and its weights' format cost, not what the values are: a
GGUF with random blocks in Q4_K_M's layout, and a transformers folder with random bfloat16
weights, time as the real models would. The tokenizer is smollm2's (it travels), its list
padded with unused tokens to the shape's vocabulary, so the output layer is the real size.

    python benchmarks/gpu/shapes.py gguf --shape qwen2.5-1.5b --tokenizer-from X.gguf --out F
    python benchmarks/gpu/shapes.py hf --shape qwen2.5-1.5b --tokenizer-from X.gguf --out DIR

Checked on a CPU against the real Qwen2.5-Coder-1.5B (docs/results/cost-profile.md).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Shape:
    arch: str  # llama.cpp's architecture name
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    qkv_bias: bool
    rope_base: float
    eps: float


SHAPES = {
    # our CPU pair's target: acceptance was measured for it on the CPU
    "qwen2.5-1.5b": Shape("qwen2", 1536, 28, 12, 2, 8960, 151936, True, 1e6, 1e-6),
    # the common 8B target of EAGLE-3 and the serving engines
    "llama3.1-8b": Shape("llama", 4096, 32, 32, 8, 14336, 128256, False, 5e5, 1e-5),
    # small enough to write and load in a test
    "tiny": Shape("llama", 256, 2, 4, 2, 512, 50000, False, 1e4, 1e-5),
}

# ggml block layouts: (values per block, bytes per block, byte offsets of fp16 scales)
Q4_K = (256, 144, (0, 2))  # d, dmin, scales[12], qs[128]
Q6_K = (256, 210, (208,))  # ql[128], qh[64], scales[16], d
SCALE = np.float16(2.0 ** -10).tobytes()  # every block's fp16 scale: finite, small logits


def more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's Q4_K_M rule for which layers' attn_v and ffn_down get Q6_K."""
    eighth = layers // 8
    return layer < eighth or layer >= 7 * layers // 8 or (layer - eighth) % 3 == 2


def matrices(shape: Shape) -> list[tuple[str, int, int]]:
    """(name, rows, columns) of every weight matrix, as llama.cpp names them."""
    head = shape.hidden // shape.heads
    kv = head * shape.kv_heads
    out = [("token_embd.weight", shape.vocab, shape.hidden)]
    for i in range(shape.layers):
        b = f"blk.{i}."
        out += [(b + "attn_q.weight", shape.hidden, shape.hidden),
                (b + "attn_k.weight", kv, shape.hidden), (b + "attn_v.weight", kv, shape.hidden),
                (b + "attn_output.weight", shape.hidden, shape.hidden),
                (b + "ffn_gate.weight", shape.ffn, shape.hidden),
                (b + "ffn_up.weight", shape.ffn, shape.hidden),
                (b + "ffn_down.weight", shape.hidden, shape.ffn)]
    out.append(("output.weight", shape.vocab, shape.hidden))
    return out


def quant_of(name: str, layers: int):
    from gguf import GGMLQuantizationType as T

    if name == "output.weight":
        return T.Q6_K, Q6_K
    if name.endswith(("attn_v.weight", "ffn_down.weight")) and more_bits(
            int(name.split(".")[1]), layers):
        return T.Q6_K, Q6_K
    return T.Q4_K, Q4_K


def random_blocks(rows: int, cols: int, layout, rng: np.random.Generator) -> np.ndarray:
    per_block, nbytes, scales = layout
    data = np.frombuffer(rng.bytes(rows * cols // per_block * nbytes), np.uint8).copy()
    blocks = data.reshape(-1, nbytes)
    for at in scales:  # random bytes as an fp16 scale could be inf or NaN
        blocks[:, at:at + 2] = np.frombuffer(SCALE, np.uint8)
    return data.reshape(rows, cols // per_block * nbytes)


def vectors(shape: Shape) -> list[tuple[str, int, float]]:
    """(name, length, value) of the norms' weights and the attention biases (float32)."""
    head = shape.hidden // shape.heads
    out = [("output_norm.weight", shape.hidden, 1.0)]
    for i in range(shape.layers):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", shape.hidden, 1.0),
                (b + "ffn_norm.weight", shape.hidden, 1.0)]
        if shape.qkv_bias:
            out += [(b + "attn_q.bias", shape.hidden, 0.0),
                    (b + "attn_k.bias", head * shape.kv_heads, 0.0),
                    (b + "attn_v.bias", head * shape.kv_heads, 0.0)]
    return out


def tokenizer(source: Path, vocab: int) -> dict:
    """smollm2's tokenizer from its GGUF, its token list padded to `vocab`."""
    from gguf import GGUFReader

    fields = GGUFReader(source).fields
    tokens = list(fields["tokenizer.ggml.tokens"].contents())
    types = list(fields["tokenizer.ggml.token_type"].contents())
    if vocab < len(tokens):
        raise SystemExit(f"the shape's vocabulary ({vocab}) is smaller than the tokenizer's")
    pad = vocab - len(tokens)
    return {"tokens": tokens + [f"<unused_{i}>" for i in range(pad)],
            "types": types + [5] * pad,  # 5: unused
            "merges": list(fields["tokenizer.ggml.merges"].contents()),
            "pre": fields["tokenizer.ggml.pre"].contents(),
            "bos": int(fields["tokenizer.ggml.bos_token_id"].contents()),
            "eos": int(fields["tokenizer.ggml.eos_token_id"].contents())}


def write_gguf(shape: Shape, source: Path, out: Path, seed: int = 0) -> Path:
    from gguf import GGUFWriter, LlamaFileType

    tok = tokenizer(source, shape.vocab)
    out.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(out, shape.arch)
    w.add_name(f"random {out.stem}")
    w.add_file_type(LlamaFileType.MOSTLY_Q4_K_M)
    w.add_context_length(32768)
    w.add_embedding_length(shape.hidden)
    w.add_feed_forward_length(shape.ffn)
    w.add_block_count(shape.layers)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_rope_dimension_count(shape.hidden // shape.heads)
    w.add_rope_freq_base(shape.rope_base)
    w.add_layer_norm_rms_eps(shape.eps)
    w.add_vocab_size(shape.vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(tok["pre"])
    w.add_token_list(tok["tokens"])
    w.add_token_types(tok["types"])
    w.add_token_merges(tok["merges"])
    w.add_bos_token_id(tok["bos"])
    w.add_eos_token_id(tok["eos"])
    # Tensor infos first, then the data one tensor at a time: an 8B never sits in memory.
    plan = []
    for name, length, value in vectors(shape):
        plan.append((name, lambda n=length, v=value: np.full(n, v, np.float32)))
        w.add_tensor_info(name, (length,), np.dtype(np.float32), length * 4)
    rng = np.random.default_rng(seed)
    for name, rows, cols in matrices(shape):
        qtype, layout = quant_of(name, shape.layers)
        nbytes = rows * cols // layout[0] * layout[1]
        w.add_tensor_info(name, (rows, cols // layout[0] * layout[1]), np.dtype(np.uint8),
                          nbytes, raw_dtype=qtype)
        plan.append((name, lambda r=rows, c=cols, lay=layout: random_blocks(r, c, lay, rng)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, make in plan:
        w.write_tensor_data(make())
    w.close()
    return out


def write_hf(shape: Shape, source: Path, out: Path, device: str = "cpu",
             dtype: str = "bfloat16", seed: int = 0) -> Path:
    """A transformers folder of the shape (Llama or Qwen2 layers), random weights in `dtype`,
    made on `device` (a GPU makes an 8B in seconds), with smollm2's tokenizer."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = random_model(shape, device, dtype, seed, tok.bos_token_id, tok.eos_token_id)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def random_model(shape: Shape, device: str = "cpu", dtype: str = "bfloat16", seed: int = 0,
                 bos: int | None = None, eos: int | None = None):
    """A transformers causal LM of the shape (Llama or Qwen2 layers), random weights in
    `dtype`, made on `device`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        "qwen2" if shape.arch == "qwen2" else "llama", vocab_size=shape.vocab,
        hidden_size=shape.hidden, intermediate_size=shape.ffn, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        rope_theta=shape.rope_base, rms_norm_eps=shape.eps, max_position_embeddings=32768,
        tie_word_embeddings=False, bos_token_id=bos, eos_token_id=eos, initializer_range=0.02)
    torch.manual_seed(seed)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("format", choices=("gguf", "hf"))
    p.add_argument("--shape", choices=sorted(SHAPES), required=True)
    p.add_argument("--tokenizer-from", type=Path, required=True, help="smollm2's .gguf")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cpu", help="hf: where the weights are made")
    args = p.parse_args(argv)
    shape = SHAPES[args.shape]
    if args.format == "gguf":
        path = write_gguf(shape, args.tokenizer_from, args.out)
    else:
        path = write_hf(shape, args.tokenizer_from, args.out, args.device)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
