"""Random-weight models of a realistic shape (benchmarks/gpu/shapes.py): the shapes hold the
published models' parameter counts, the quantization mix is llama.cpp's Q4_K_M rule, and a
written GGUF loads in llama.cpp and computes finite logits."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks" / "gpu"))
import shapes  # benchmarks/gpu is no package


def parameters(shape: shapes.Shape, tied: bool) -> int:
    n = sum(r * c for _, r, c in shapes.matrices(shape))
    n += sum(length for _, length, _ in shapes.vectors(shape))
    return n - (shape.vocab * shape.hidden if tied else 0)


@pytest.mark.parametrize("name, published, tied", [
    ("llama3.1-8b", 8_030_261_248, False),  # meta-llama/Llama-3.1-8B's safetensors
    ("qwen2.5-1.5b", 1_543_714_304, True),  # Qwen/Qwen2.5-1.5B's (the GGUF unties it)
])
def test_each_shape_has_its_models_parameter_count(name, published, tied):
    assert parameters(shapes.SHAPES[name], tied) == published


def test_q4_k_m_gives_half_of_28_layers_more_bits_as_the_real_gguf_has():
    # qwen2.5-coder-1.5b-instruct-q4_k_m.gguf: 14 of 28 attn_v and ffn_down are Q6_K (not the
    # same 14: an older llama.cpp made it; the count is what a forward pass pays for)
    assert sum(shapes.more_bits(i, 28) for i in range(28)) == 14


def test_random_blocks_have_finite_scales():
    from gguf import GGMLQuantizationType as T
    from gguf.quants import dequantize

    rng = np.random.default_rng(0)
    for qtype, layout in ((T.Q4_K, shapes.Q4_K), (T.Q6_K, shapes.Q6_K)):
        blocks = shapes.random_blocks(4, 512, layout, rng)
        values = dequantize(blocks, qtype)
        assert values.shape == (4, 512)
        assert np.isfinite(values).all() and values.std() > 0


@pytest.mark.model
def test_a_written_gguf_loads_in_llama_cpp_with_the_shapes_vocabulary(tmp_path, smollm2_path):
    from llama_cpp import Llama

    path = shapes.write_gguf(shapes.SHAPES["tiny"], smollm2_path, tmp_path / "tiny.gguf")
    model = Llama(str(path), n_ctx=128, logits_all=True, verbose=False)
    tokens = model.tokenize(b"def add(a, b):\n    return a + b")
    model.eval(tokens)
    logits = np.array(model.scores[:len(tokens)])
    assert model.n_vocab() == shapes.SHAPES["tiny"].vocab == logits.shape[1]
    assert np.isfinite(logits).all()
