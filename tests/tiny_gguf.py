"""A tiny random-weight llama GGUF with Q4_0 matrices, written in the test.

Q4_0 is a type llama.cpp repacks on AVX2 and NEON CPUs (and runs through AMX where it is
built in), so this model takes the same load path a real quantised model does, in well under
a second. Its vocabulary is SentencePiece-style: the 256 byte tokens and a few words.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, TokenType
from gguf.quants import quantize

N_EMBD, N_FF, N_LAYER, N_HEAD = 256, 512, 2, 4
WORDS = ["▁def", "▁return", "▁the", "▁a", "(", ")", ":", "▁=", "▁+", "▁x", "▁y"]


def write_tiny_gguf(path: Path, seed: int = 0, context: int = 512) -> Path:
    """The model, written to `path`; `context`: the context length it says it was trained
    on (llama.cpp caps a context asked for at it)."""
    rng = np.random.default_rng(seed)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + WORDS
    types = ([TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL]
             + [TokenType.BYTE] * 256 + [TokenType.NORMAL] * len(WORDS))
    n_vocab = len(tokens) + (-len(tokens)) % 32  # padded so Q4_0 rows stay whole blocks
    tokens += [f"<pad{i}>" for i in range(n_vocab - len(tokens))]
    types += [TokenType.UNUSED] * (n_vocab - len(types))

    w = GGUFWriter(str(path), "llama")
    w.add_context_length(context)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 3 + [-1000.0] * 256 + [-1.0] * (n_vocab - 259))
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def matrix(name: str, rows: int, cols: int) -> None:
        data = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
        w.add_tensor(name, quantize(data, GGMLQuantizationType.Q4_0),
                     raw_dtype=GGMLQuantizationType.Q4_0)

    def norm(name: str) -> None:
        w.add_tensor(name, np.ones(N_EMBD, dtype=np.float32))

    matrix("token_embd.weight", n_vocab, N_EMBD)
    for i in range(N_LAYER):
        norm(f"blk.{i}.attn_norm.weight")
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            matrix(f"blk.{i}.{part}.weight", N_EMBD, N_EMBD)
        norm(f"blk.{i}.ffn_norm.weight")
        matrix(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        matrix(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        matrix(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)
    norm("output_norm.weight")
    matrix("output.weight", n_vocab, N_EMBD)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def tiny_llama_backend(folder: Path, n_ctx: int):
    """A llama.cpp backend on a tiny GGUF written into `folder`, one thread (close it)."""
    from specviz.engines.backends.llama import LlamaBackend

    return LlamaBackend(write_tiny_gguf(folder / "tiny.gguf"), n_ctx=n_ctx, threads=1)
