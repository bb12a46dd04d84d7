"""Text to target tokens at the context's end, across multi-byte characters."""

from __future__ import annotations

import pytest

from specviz.engines.oracles.retokenize import (
    ContextText,
    complete_prefix,
    continue_tokens,
    window_start,
)

TEXTS = ["数据 模型 推理 速度 🚀 emoji ✨ test", "Café, crème brûlée, naïve.",
         "def add(a, b):\n    return a + b\n", "El niño comió piñas 🚀✨ en la montaña."]


def test_complete_prefix_stops_before_a_cut_character():
    rocket = "🚀".encode()
    assert complete_prefix(b"ab" + rocket[:3]) == b"ab"
    assert complete_prefix(b"ab" + rocket) == b"ab" + rocket
    assert complete_prefix(b"") == b""


@pytest.mark.parametrize("text", TEXTS)
def test_continuations_spell_the_new_text_from_any_cut(tiny_backend, text):
    """Cut the text's tokens anywhere (often inside a character): the tokens proposed after
    the cut spell a prefix of the rest, and together they read as the text."""
    ids = tiny_backend.tokenize(text, False)
    data = text.encode()
    produced = 0
    for cut in range(1, len(ids)):
        head = b"".join(tiny_backend.token_bytes(t) for t in ids[:cut])
        new = data[len(head):]
        cont = continue_tokens(tiny_backend, ids[:cut], new)
        spelled = b"".join(tiny_backend.token_bytes(t) for t in cont.tokens)
        assert new.startswith(spelled), (cut, spelled, new)
        assert cont.ends == [len(b"".join(tiny_backend.token_bytes(t) for t in cont.tokens[:i + 1]))
                             for i in range(len(cont.tokens))]
        produced += len(cont.tokens)
    assert produced > len(ids)  # it does propose, not just stay safe


def test_the_seam_keeps_the_context_tokens(tiny_backend):
    # "rocket" cut after its first token: the continuation must finish the same character.
    ids = tiny_backend.tokenize("🚀", False)
    cont = continue_tokens(tiny_backend, ids[:1], "🚀 emoji".encode()[len(
        tiny_backend.token_bytes(ids[0])):])
    assert cont.tokens and tiny_backend.detokenize(ids[:1] + cont.tokens).startswith("🚀")


def test_a_window_never_starts_inside_a_character(tiny_backend):
    ids = tiny_backend.tokenize("数据 模型", False)
    for lookbehind in range(1, 5):
        start = window_start(tiny_backend, ids, lookbehind)
        assert not 0x80 <= (tiny_backend.token_bytes(ids[start])[:1] or b"a")[0] < 0xC0


class DummyPrefixVocab:
    """SentencePiece-like: a leading space is added, and merged into the first character."""

    def tokenize(self, text, add_special=True):
        text = " " + text
        pieces = [text[:2], *text[2:]]
        return [ord(p[-1]) + (1000 if len(p) == 2 else 0) for p in pieces]

    def token_bytes(self, t):
        return (" " + chr(t - 1000) if t >= 1000 else chr(t)).encode()

    def is_special(self, t):
        return False


def test_a_prefix_space_added_by_the_tokenizer_is_not_proposed():
    vocab = DummyPrefixVocab()
    context = vocab.tokenize("ab")
    cont = continue_tokens(vocab, context, b"cd")
    assert cont.tokens == [ord("c"), ord("d")]  # not " c": the window absorbs the prefix


def test_context_text_grows_with_the_context(tiny_backend):
    prompt = "数据 "
    ids = tiny_backend.tokenize(prompt, False)
    text = ContextText(prompt, len(ids), tiny_backend.token_bytes)
    more = tiny_backend.tokenize("模型", False)
    assert text.update(ids + more).decode() == "数据 模型"
    with pytest.raises(ValueError):
        text.update(ids[:-1])
