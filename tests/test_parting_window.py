"""A greedy lane whose text parted from plain decoding's marks the token where it parted and
says why, live and replayed (#73): a near-tie is backend numerics, a wide margin is loud."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtGui import QTextCharFormat, QTextCursor
from step_factory import make_step

from specviz.engines import events as ev
from specviz.engines.trace import TraceWriter

pytestmark = pytest.mark.gui

PROMPT = "def main(dry_run):"
PLAIN_IDS = list(range(10, 19))  # nine tokens, one a step
PARTED_AT = 4  # the lane's second step, its second accepted proposal
WAVE = QTextCharFormat.UnderlineStyle.WaveUnderline


def header(oracle: str, temperature: float = 0.0) -> dict:
    return {"prompt": PROMPT, "prompt_text": PROMPT, "target": {"name": "smollm2-135m"},
            "backend": "llama", "device": "cpu", "oracle": oracle,
            "settings": {"k": 3, "auto_k": False, "max_tokens": 64,
                         "temperature": temperature}}


def piece(token: int) -> str:
    return f"t{token} "


def plain_steps(margin: float) -> list[ev.StepEvent]:
    """Plain decoding of PLAIN_IDS; its top two tied within `margin` where the lane parts."""
    return [make_step(i, 0, oracle="none", text=piece(t), target=ev.TargetToken(
        t, piece(t), ev.TARGET_PLAIN, 0.9, margin if i == PARTED_AT else 3.0))
        for i, t in enumerate(PLAIN_IDS)]


def lane_steps(parts: bool = True) -> list[ev.StepEvent]:
    """Prompt lookup over the same tokens, three a step (two copied, one the target's), its
    token PARTED_AT another one where `parts`."""
    ids = [t + 100 if parts and i == PARTED_AT else t for i, t in enumerate(PLAIN_IDS)]
    steps = []
    for step, at in enumerate(range(0, len(ids), 3)):
        copied, own = ids[at:at + 2], ids[at + 2]
        proposed = tuple(ev.ProposedToken(t, piece(t), "prompt", True) for t in copied)
        steps.append(make_step(step, 3, at + 3, proposed=proposed, text="".join(
            piece(t) for t in ids[at:at + 3]), target=ev.TargetToken(
            own, piece(own), ev.TARGET_CORRECTION, 0.9, 2.0)))
    return steps


def summary(oracle: str, steps: list[ev.StepEvent]) -> ev.SummaryEvent:
    return ev.SummaryEvent(oracle, "max-tokens", "", steps[-1].totals, 1.0, 10.0)


def race(window, margin: float = 0.004, parts: bool = True, temperature: float = 0.0,
         plain_last: bool = False):
    """The first race's two lanes (plain decoding, prompt lookup) fed as the engine feeds
    them; the prompt-lookup lane's widget."""
    board = window.board
    plain_id, lane_id = board.lanes
    assert board.model.baseline() == plain_id
    board.read_header(plain_id, header("none", temperature))
    board.read_header(lane_id, header("prompt-lookup", temperature))
    feeds = [(lane_id, lane_steps(parts)), (plain_id, plain_steps(margin))]
    for lid, steps in reversed(feeds) if not plain_last else feeds:
        board.push_many(lid, steps)
        board.drain()
    return board.lanes[lane_id]


def marked_text(lane) -> str:
    """The characters of the lane's text drawn with the parting's wavy underline."""
    lane.view.flush()
    document = lane.view.editor.document()
    cursor = QTextCursor(document)
    marked = []
    for position in range(1, document.characterCount()):
        cursor.setPosition(position)  # charFormat(): the character left of the cursor
        if cursor.charFormat().underlineStyle() == WAVE:
            marked.append(document.characterAt(position - 1))
    return "".join(marked)


def parted_token() -> str:
    """The lane's emitted token at PARTED_AT."""
    return piece(PLAIN_IDS[PARTED_AT] + 100)


def test_a_near_tie_is_marked_at_that_token_with_its_words(window):
    lane = race(window, margin=0.004)
    assert marked_text(lane) == parted_token()
    assert lane.view.parted()[:2] == (1, 1)  # step 1, its second proposal
    tip = lane.view.tooltip(1, 1)
    assert tip.startswith("parted from plain decoding here: plain decoding's top two choices "
                          "were 0.004 logits apart, a near-tie that batched and one-token "
                          "passes round differently (backend numerics, not the method)")
    assert "step 1" in tip  # the token's own words follow
    assert "parted" not in lane.view.tooltip(1, 0) + lane.view.tooltip(1, 2)
    note = lane.message.text()
    assert "text parted from plain decoding's at token 4, a near-tie" in note


def test_a_wide_margin_gets_the_loud_words(window):
    lane = race(window, margin=4.1)
    assert marked_text(lane) == parted_token()
    assert lane.view.tooltip(1, 1).startswith(
        "parted from plain decoding here with a margin of 4.1: not a near-tie")
    assert "with a margin of 4.1: not a near-tie" in lane.message.text()


def test_a_margin_within_backends_noise_says_so_without_a_verdict(window):
    lane = race(window, margin=0.07)
    tip = lane.view.tooltip(1, 1)
    assert "were 0.07 logits apart, less than the 3 by which batched" in tip
    assert "not a near-tie" not in tip + lane.message.text()


def test_plain_decoding_arriving_last_marks_the_lane_once(window):
    lane = race(window, plain_last=True)
    assert marked_text(lane) == parted_token()
    plain_id, lane_id = window.board.lanes
    window.board.push(plain_id, summary("none", plain_steps(0.004)))
    window.board.push(lane_id, summary("prompt-lookup", lane_steps()))
    window.board.drain()
    assert lane.message.text().count("parted") == 1
    assert lane.message.text().startswith("ended: max-tokens")


def test_identical_texts_mark_nothing(window):
    lane = race(window, parts=False)
    assert lane.view.parted() is None and marked_text(lane) == ""
    assert "parted" not in lane.message.text()


def test_sampling_lanes_never_compare_texts(window):
    lane = race(window, temperature=0.8)
    assert lane.view.parted() is None and marked_text(lane) == ""
    assert "parted" not in lane.message.text()


def test_a_new_race_forgets_the_mark_and_marks_again(window):
    race(window)
    window.board.reset()  # what a new run does first
    lane = race(window, margin=4.1)
    assert marked_text(lane) == parted_token()
    assert lane.message.text().count("parted") == 1
    assert "not a near-tie" in lane.message.text()


def write_trace(path, oracle: str, steps: list[ev.StepEvent]):
    with TraceWriter(path, header(oracle)) as writer:
        for event in [*steps, summary(oracle, steps)]:
            writer.write(event)
    return path


def test_a_replay_of_two_traces_marks_the_parting(window, tmp_path):
    paths = [write_trace(tmp_path / "plain.jsonl", "none", plain_steps(0.004)),
             write_trace(tmp_path / "lookup.jsonl", "prompt-lookup", lane_steps())]
    window.open_replay(paths).finish()
    window.board.drain()
    plain, lane = window.board.lanes.values()
    assert marked_text(lane) == parted_token() and marked_text(plain) == ""
    assert "a near-tie that batched" in lane.view.tooltip(1, 1)
    assert lane.message.text().count("parted from plain decoding's at token 4") == 1
