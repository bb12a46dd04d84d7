"""Can this draft model draft for this target? Their tokenizers compared, item by item.

The draft oracle hands the draft the target's token ids and verifies the draft's ids as the
target's, so the two vocabularies must agree id by id (llama.cpp allows a size difference of up
to 128 tokens: padding, added tokens at the end). Where they do not, cross-drafting goes through
text: the draft must then spell the target's text exactly in its own tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..backends.base import Backend
from ..errors import IncompatibleModels
from ..oracles.cross_draft import encode_exactly
from ..oracles.draft import MAX_VOCAB_SIZE_DIFFERENCE, check_compatible

VERDICT_DRAFT = "draft"  # same vocabulary: the draft oracle works
VERDICT_CROSS = "cross-draft"  # different vocabularies: drafting through text
VERDICT_UNUSABLE = "unusable"  # the draft cannot even spell the target's text

DIFFERENCES_SHOWN = 3


@dataclass(frozen=True)
class Item:
    """One thing compared: each model's value and whether they agree well enough."""

    name: str
    target: str
    draft: str
    ok: bool
    note: str = ""


@dataclass
class VocabReport:
    items: list[Item] = field(default_factory=list)
    verdict: str = VERDICT_DRAFT
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def compare_vocabularies(target: Backend, draft: Backend, sample_text: str = "") -> VocabReport:
    """The items, and the verdict: `draft`, `cross-draft`, or `unusable` when the draft
    cannot encode `sample_text` (the target's own answers) byte for byte."""
    items = [
        Item("vocabulary type", target.vocab_type, draft.vocab_type,
             target.vocab_type == draft.vocab_type),
        _size_item(target, draft),
        _padding_item(target, draft),
        _special_item("beginning of text", target.bos_id, draft.bos_id, target, draft),
        _eos_item(target, draft),
        _spelling_item(target, draft),
    ]
    report = VocabReport(items)
    try:
        check_compatible(target, draft)
        report.reason = "the vocabularies agree id by id: the draft oracle works"
    except IncompatibleModels as exc:
        report.verdict, report.reason = VERDICT_CROSS, str(exc).split(" (")[0].split(";")[0]
    if report.verdict == VERDICT_CROSS and sample_text:
        unspellable = _unspellable(draft, sample_text)
        if unspellable is not None:
            report.verdict = VERDICT_UNUSABLE
            report.reason = (f"the draft cannot spell the target's text in its own tokens "
                             f"(first at {unspellable!r})")
    return report


def _size_item(target: Backend, draft: Backend) -> Item:
    diff = abs(target.n_vocab - draft.n_vocab)
    return Item("vocabulary size", str(target.n_vocab), str(draft.n_vocab),
                diff <= MAX_VOCAB_SIZE_DIFFERENCE,
                f"differ by {diff} (at most {MAX_VOCAB_SIZE_DIFFERENCE} allowed)" if diff else "")


def _padding_item(target: Backend, draft: Backend) -> Item:
    """Logit rows beyond the tokenizer's tokens: padding that differs is harmless."""
    pads = [b.n_vocab - b.tokenizer_size for b in (target, draft)]
    note = "padding rows are never proposed" if any(pads) else ""
    return Item("padding rows", str(pads[0]), str(pads[1]), True, note)


def _special_item(name: str, t_id: int | None, d_id: int | None, target: Backend,
                  draft: Backend) -> Item:
    def spell(b: Backend, i: int | None) -> str:
        return "none" if i is None else f"{i} {b.token_text_raw(i)!r}"

    same = t_id == d_id and (t_id is None or target.token_text_raw(t_id)
                             == draft.token_text_raw(t_id))
    return Item(name, spell(target, t_id), spell(draft, d_id), same)


def _eos_item(target: Backend, draft: Backend) -> Item:
    def spell(b: Backend) -> str:
        ids = sorted(b.eos_ids)
        shown = ", ".join(f"{i} {b.token_text_raw(i)!r}" for i in ids[:4])
        return shown + (f" +{len(ids) - 4}" if len(ids) > 4 else "")

    shared = target.eos_ids & draft.eos_ids
    return Item("end of text", spell(target), spell(draft), bool(shared),
                "" if shared else "no end token in common")


def _spelling_item(target: Backend, draft: Backend) -> Item:
    """The first ids whose spellings differ, within the ids both have."""
    n = min(target.tokenizer_size, draft.tokenizer_size)
    found = []
    for tid in range(n):
        if target.token_text_raw(tid) != draft.token_text_raw(tid):
            found.append(tid)
            if len(found) == DIFFERENCES_SHOWN:
                break
    if not found:
        return Item("spellings", f"all {n} shared ids alike", f"all {n} shared ids alike", True)
    return Item("spellings", ", ".join(f"{i} {target.token_text_raw(i)!r}" for i in found),
                ", ".join(f"{i} {draft.token_text_raw(i)!r}" for i in found), False,
                "first ids spelled differently")


def _unspellable(draft: Backend, text: str) -> str | None:
    """The first line of `text` the draft does not encode back to the same bytes, or None."""
    for line in text.splitlines(keepends=True):
        if line and encode_exactly(draft, line.encode("utf-8")) is None:
            return line[:40]
    return None
