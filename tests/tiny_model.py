"""A tiny random-weight causal LM with a real byte-level BPE tokenizer, built in the test.

No download: the tokenizer is trained on a few lines of text (with multi-byte characters, so
some characters span several tokens), the model is a 2-layer Llama with random weights.
A large init range makes the logits decisive, so greedy decoding has no near-ties that
float32 rounding between batched and single-token forwards could flip.
"""

from __future__ import annotations

from pathlib import Path

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "The quick brown fox jumps over the lazy dog.",
    "Speculative decoding lets a cheap oracle guess the next tokens.",
    "El niño comió piñas en la montaña. Café, crème brûlée, naïve.",
    "数据 模型 推理 速度 🚀 emoji ✨ test",
    "for i in range(10):\n    print(i * i)\n",
] * 20

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


ARCHITECTURES = ("llama", "qwen2")  # Qwen2: the models specviz's results are measured on


def build_tiny_model(folder: Path, seed: int = 0, vocab_size: int = 400,
                     extra_corpus: tuple[str, ...] = (), arch: str = "llama") -> Path:
    """Write tokenizer + model into `folder` and return it; `extra_corpus` (text the tokenizer
    also learns from) makes a tokenizer of another vocabulary. `arch` "qwen2" makes a Qwen2
    (biased q, k, v projections) of the same shape instead of a Llama."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    folder.mkdir(parents=True, exist_ok=True)
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tk.train_from_iterator(CORPUS + list(extra_corpus) * 20, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        unk_token=None,
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(folder)

    torch.manual_seed(seed)
    config_type, model_type = {"llama": (LlamaConfig, LlamaForCausalLM),
                               "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[arch]
    config = config_type(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.5,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
    )
    model = model_type(config).eval()
    model.save_pretrained(folder)
    return folder


def build_sibling_model(folder: Path, source: Path, noise: float = 0.15, seed: int = 3) -> Path:
    """`source` (its tokenizer and weights) with noise on its last layer's MLP, written into
    `folder`: a same-vocabulary draft that agrees with `source` on some tokens, not all (a
    model of another seed agrees on about 1 token in 200, so a step would never accept some
    of its guesses and roll back the rest)."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    for f in source.iterdir():
        shutil.copy(f, folder / f.name)
    model = AutoModelForCausalLM.from_pretrained(source)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.model.layers[-1].mlp.parameters():
            p.add_(torch.randn_like(p) * noise)
    model.save_pretrained(folder)
    return folder


def like(tensor, module):
    """`tensor` on the device and in the dtype of `module`'s weights: a test's CPU tensor fed
    to a model that may live on a GPU, in bfloat16 (SPECVIZ_TEST_DEVICE, SPECVIZ_DTYPE)."""
    weight = next(module.parameters())
    return tensor.to(weight.device, weight.dtype)


def on_cpu_in_float32(backend) -> str | None:
    """Why a test of CPU-only float32 arithmetic (int8 copies) cannot run on `backend`."""
    if backend.device != "cpu" or backend.dtype != "float32":
        return f"int8 copies are made of float32 weights on the CPU ({backend.device}, " \
               f"{backend.dtype} here)"
    return None
