"""A transformers tokenizer's tables: every token's bytes, the special and end-of-turn ids, the
chat template (a GGUF's own where the tokenizer has none)."""

from __future__ import annotations

import json
import re
from pathlib import Path

# Names of end-of-turn tokens used by common chat models; they end generation like EOS.
END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")


def piece_table(tok) -> list[bytes]:
    """Raw bytes of every token id, decoded the way the tokenizer's decoder would."""
    vocab = tok.convert_ids_to_tokens(list(range(len(tok))))
    decoder = json.loads(tok.backend_tokenizer.to_str()).get("decoder") or {}
    added = {t.content for t in tok.added_tokens_decoder.values()}
    if "ByteLevel" in json.dumps(decoder):
        byte_of = {c: b for b, c in bytes_to_unicode().items()}
        return [_bytelevel(p, byte_of, added) for p in vocab]
    return [_sentencepiece(p, added) for p in vocab]


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def _bytelevel(piece: str | None, byte_of: dict[str, int], added: set[str]) -> bytes:
    if piece is None:
        return b""
    if piece in added or any(c not in byte_of for c in piece):
        return piece.encode("utf-8")
    return bytes(byte_of[c] for c in piece)


_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _sentencepiece(piece: str | None, added: set[str]) -> bytes:
    if piece is None:
        return b""
    if piece in added:
        return piece.encode("utf-8")
    m = _BYTE_FALLBACK.match(piece)
    if m:
        return bytes([int(m.group(1), 16)])
    return piece.replace("\u2581", " ").encode("utf-8")


def special_ids(tok) -> frozenset[int]:
    """The tokenizer's special tokens and the added tokens marked special."""
    added = (i for i, t in tok.added_tokens_decoder.items() if t.special)
    return frozenset(tok.all_special_ids) | frozenset(added)


def eos_ids(tok, model) -> frozenset[int]:
    ids: set[int] = set()
    for source in (tok.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(source)
    vocab = tok.get_vocab()
    ids.update(vocab[name] for name in END_OF_TURN if name in vocab)
    return frozenset(ids)


def chat_template(tok, gguf_path: Path | None) -> str | None:
    template = getattr(tok, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default") or next(iter(template.values()), None)
    if template or gguf_path is None:
        return template
    from ..models.gguf_meta import read_metadata

    return read_metadata(gguf_path).get("tokenizer.chat_template")


def vocab_type(tok) -> str:
    """The tokenizer model's kind ("BPE", "Unigram"), or a slow tokenizer's class name."""
    try:
        return str(json.loads(tok.backend_tokenizer.to_str())["model"]["type"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return type(tok).__name__  # a slow tokenizer: no backend to ask
