"""The anatomy of a step: its stages from one StepEvent, and the view that plays them.

Chains come from a recorded trace (smollm2-135m, prompt lookup, greedy), a server's step from
the server lanes' own step builder; sampling and tree steps are built as the session records
them. Whatever is drawn, every number in it must be one of the event's."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow

from specviz.board import anatomy_stages as st
from specviz.board.describe import prob, span_text
from specviz.engines import events as ev
from specviz.engines.servers.chunks import Chunk
from specviz.engines.servers.steps import StepBuilder
from specviz.engines.trace import read_trace
from specviz.widgets import anatomy as view_module
from specviz.widgets.anatomy import AnatomyView

pytestmark = pytest.mark.gui

DATA = Path(__file__).parent / "data"
TRACE = DATA / "small_trace.jsonl"  # smollm2-135m, prompt-lookup, K=4, greedy
PLAIN = DATA / "small_trace_plain.jsonl"  # the same prompt decoded plainly
OLDER = (DATA / "trace_before_inputs_ngram.jsonl", DATA / "trace_before_inputs_early_exit.jsonl")
# prompt lookup at temperature 0.8, written before a correction kept the residual it came from
BEFORE_RESIDUAL = DATA / "trace_before_residual.jsonl"


@pytest.fixture(scope="module")
def steps() -> list[ev.StepEvent]:
    return read_trace(TRACE).steps


@pytest.fixture(scope="module")
def plain() -> st.PlainCost:
    return st.plain_cost([], read_trace(PLAIN).steps)


def sampled_step() -> ev.StepEvent:
    """A draft model's chain at temperature > 0: kept, refused by the draw, then dropped."""
    proposed = (
        ev.ProposedToken(5, " the", "draft", True, p_draft=0.5, p_target=0.6, accept_prob=1.0,
                         draw=0.2),
        ev.ProposedToken(6, " cat", "draft", False, p_draft=0.75, p_target=0.3,
                         reject_reason=ev.REJECT_SAMPLED, accept_prob=0.4, draw=0.91),
        ev.ProposedToken(7, " sat", "draft", False, p_draft=0.6, p_target=0.2,
                         reject_reason=ev.REJECT_AFTER),
    )
    return ev.StepEvent(7, "draft", 3, 40, proposed,
                        ev.TargetToken(8, " dog", ev.TARGET_CORRECTION, 0.125, 0.75),
                        " the dog", ev.Timing(3.25, 41.5, 0.5),
                        ev.Totals(20, 8, 24, 12, 20.0, 300.0, 4.0))


def residual_step(drawn_rank: int = 0) -> ev.StepEvent:
    """sampled_step as the session now records it: ' dog' drawn from the residual (mass 0.25:
    p_target 0.125 of ' dog' over it is 0.5), or, with `drawn_rank`, from further down."""
    top = [ev.ResidualToken(9, " bird", 0.25, 1), ev.ResidualToken(10, " mat", 0.125, 2),
           ev.ResidualToken(11, " hat", 0.0625, 3)]
    dog = ev.ResidualToken(8, " dog", 0.5, drawn_rank)
    if drawn_rank:  # the head's first place then goes to another token
        top = [ev.ResidualToken(12, " cow", 0.5, 0), *top, dataclasses.replace(dog, p=0.03125)]
    else:
        top = [dog, *top]
    step = sampled_step()
    target = dataclasses.replace(step.target, residual=ev.Residual(0.25, tuple(top)))
    return dataclasses.replace(step, target=target)


def tree_step(lookahead: ev.Lookahead | None = None, source: str = "tree") -> ev.StepEvent:
    """Two levels: ' the' taken (over ' a'), then ' cat' refused below it; ' dog' under the
    refused ' a' never judged. `proposed` is the path and its last node's refused children,
    as tree_step records it."""
    tree = (
        ev.TreeNode(-1, 5, " the", source, ev.NODE_ACCEPTED, 0.625, 0.75),
        ev.TreeNode(-1, 6, " a", source, ev.NODE_REJECTED, 0.25, 0.125, ev.REJECT_MISMATCH),
        ev.TreeNode(0, 7, " cat", source, ev.NODE_REJECTED, 0.5, 0.0625, ev.REJECT_MISMATCH),
        ev.TreeNode(1, 8, " dog", source, ev.NODE_UNREACHED, 0.875, 0.375,
                    ev.REJECT_UNREACHED),
    )
    proposed = (ev.ProposedToken(5, " the", source, True, 0.625, 0.75),
                ev.ProposedToken(7, " cat", source, False, 0.5, 0.0625, ev.REJECT_MISMATCH))
    return ev.StepEvent(3, source, 2, 10, proposed,
                        ev.TargetToken(9, " cow", ev.TARGET_CORRECTION, 0.5, 1.0), " the cow",
                        ev.Timing(1.5, 22.25, 0.25), ev.Totals(2, 1, 4, 1, 1.5, 22.25, 0.25),
                        tree=tree, path=(0,), lookahead=lookahead)


def medusa_tree_step() -> ev.StepEvent:
    """tree_step as Medusa's candidate tree records it: each node named by its head."""
    step = tree_step(source="medusa")
    tree = tuple(dataclasses.replace(n, detail=f"head {1 if n.parent < 0 else 2}")
                 for n in step.tree)
    return dataclasses.replace(step, tree=tree)


def server_steps() -> list[ev.StepEvent]:
    """What a llama-server lane records: counts of drafts, none of the refused ones named,
    no p_draft, one clock for the whole step."""
    builder = StepBuilder("server", "draft", "llama-server", 4, speculates=True)
    chunks = [Chunk("Hello", 0, (1,), tokens=1, drafted=0, accepted=0, gen_ms=10.0),
              Chunk(" wor", 1, (2,), tokens=2, drafted=4, accepted=2, gen_ms=31.5),
              Chunk("ld", 1, (3,), tokens=3, drafted=4, accepted=2, gen_ms=31.5),
              Chunk("!", 1, (4,), tokens=4, drafted=4, accepted=2, gen_ms=31.5),
              Chunk(".", 2, (5,), tokens=5, drafted=4, accepted=2, gen_ms=40.0, finish="stop")]
    out = []
    for chunk in chunks:
        out += builder.feed(chunk, 0.0)
    return out + builder.finish(0.0)


def drawn(view: AnatomyView) -> list[str]:
    view.grab()  # paints
    return view.texts


def played(made: st.Anatomy, qtbot) -> tuple[AnatomyView, list[list[str]]]:
    """A 1080p view of `made` and what each of its stages wrote."""
    view = AnatomyView()
    qtbot.addWidget(view)
    view.resize(1920, 1080)
    view.set_anatomy(made)
    pages = []
    for index in range(view.stage_count):
        view.go(index)
        pages.append(drawn(view))
    return view, pages


NUMBER = re.compile(r"\d+(?:\.\d+)?")


def numbers(texts) -> set[str]:
    return set(NUMBER.findall(" ".join(texts)))


def event_numbers(made: st.Anatomy) -> set[str]:
    """Every number the event holds, as the views write it; the step's own counts; and what
    the tally derives from the plain step's cost (the ratio, the pace, plain decoding's time
    for as many tokens)."""
    e = made.event
    words = [e.oracle, str(e.step), str(e.k), str(e.position), str(made.positions),
             str(made.tokens), str(len(made.pieces)), made.own]
    for t in (*e.proposed, *(e.tree or ())):
        words += [t.text, t.detail or "", span_text(t.span) if t.span else ""]
        words += [prob(v) for v in (t.p_draft, t.p_target, t.accept_prob, t.draw)
                  if v is not None]
    words += [prob(e.target.p_target)] if e.target.p_target is not None else []
    if e.target.residual is not None:
        words.append(st.percent(e.target.residual.mass))
        words += [f"{prob(t.p)} #{t.rank + 1} {t.text}" for t in e.target.residual.top]
    t = e.timing
    words += [st.ms(v) for v in (t.draft_ms, t.verify_ms, t.other_ms, t.total_ms)]
    if made.plain is not None:
        words += [st.ms(made.plain.ms), made.plain.where, f"{made.plain_steps:.1f}",
                  f"{made.tokens / made.plain_steps:.2f}", st.ms(made.plain_ms_for_tokens)]
    if e.lookahead is not None:
        words += [str(e.lookahead.pool_size), str(e.lookahead.new_ngrams),
                  *(x for row in e.lookahead.window for x in row)]
    counters = {str(n) for n in range(len(made.stages) + 2)}  # stage, position, level
    return numbers(words) | counters | {"1"}  # min(1, p/q); "1 token" of a plain step


# ---------------------------------------------------------------- stages


def test_a_chain_with_a_rejection_checks_up_to_the_refusal_and_keeps_the_correction(steps,
                                                                                     plain):
    e = steps[10]  # three copies kept, ' said' refused: the target wrote ' asked'
    made = st.anatomy(e, st.context_pieces("", steps[:10]), plain)
    names = [s.name for s in made.stages]
    assert names == [st.CONTEXT, *[st.PROPOSE] * 4, st.PASS, *[st.CHECK] * 4, st.OWN,
                     st.TALLY]
    assert [p.verdict for p in made.pieces] == [st.KEPT, st.KEPT, st.KEPT, st.REFUSED]
    refused = made.stages[9]
    assert refused.title == "Position 4: refused"
    assert refused.caption == (f"the target's choice here is {made.own!r}, not '␣said': "
                               "refused")
    assert made.own == e.target.text.replace(" ", "␣")
    assert made.stages[-2].title == "Correction: the target's own token"
    # the tally: the step's time over the plain lane's mean step
    mean = read_trace(PLAIN).steps[-1].totals.compute_ms / read_trace(PLAIN).steps[-1].totals.steps
    assert made.plain.ms == pytest.approx(mean)
    assert made.tally == f"4 tokens for the time of {e.timing.total_ms / mean:.1f} plain steps"
    assert made.kept_texts[-1] == (made.own, "target")
    assert made.context[-1] == st.shown(steps[9].target.text)


def test_the_first_refusal_strikes_the_rest(steps):
    e = steps[0]  # the first guess refused, three after it never judged
    made = st.anatomy(e)
    names = [s.name for s in made.stages]
    assert names.count(st.CHECK) == 1 and st.STRIKE in names
    strike = made.stages[names.index(st.STRIKE)]
    assert strike.focus == (1, 2, 3)
    assert [p.verdict for p in made.pieces] == [st.REFUSED, *[st.DROPPED] * 3]
    # what the refusal struck fades with a light border; the refusal stays in view
    assert [made.look(strike, i) for i in range(4)] == [st.Look(struck=True),
                                                       *[st.Look(True, struck=True)] * 3]
    assert made.plain is None and "no plain step" in made.tally_words


def test_a_step_that_guessed_nothing_is_one_pass_for_one_token(steps, plain):
    made = st.anatomy(steps[21], plain=plain)
    assert [s.name for s in made.stages] == [st.CONTEXT, st.PROPOSE, st.PASS, st.OWN, st.TALLY]
    assert made.stages[1].title == "No guess this step"
    assert made.stages[2].title == "One pass of the big model gives the next token"
    assert made.tally.startswith("1 token for the time of ")


def test_a_full_acceptance_ends_with_the_bonus(steps):
    made = st.anatomy(steps[1], plain=st.plain_cost(steps))
    assert all(p.verdict == st.KEPT for p in made.pieces)
    assert made.stages[-2].title.startswith("Bonus")
    assert "for free" in made.own_words
    # this lane's only step that guessed nothing prices a plain step
    assert made.plain.ms == pytest.approx(steps[21].timing.total_ms)
    assert "1 step that guessed nothing" in made.plain.where


def test_a_sampling_step_says_the_draw_against_p_target_over_p_draft():
    made = st.anatomy(sampled_step())
    assert made.sampling
    kept, refused = (s for s in made.stages if s.name == st.CHECK)
    assert kept.caption == ("kept with chance min(1, p_target/p_draft) = min(1, 0.600/0.500) "
                            "= 1.000; the draw 0.200 fell below it: kept")
    assert refused.caption == ("kept with chance min(1, p_target/p_draft) = min(1, 0.300/"
                               "0.750) = 0.400; the draw 0.910 did not fall below it: refused")
    own = next(s for s in made.stages if s.name == st.OWN)
    assert "'␣dog' (p_target 0.125)" in own.caption and "max(0, p_target − p_draft)" in own.caption


def test_a_sampled_correction_shows_the_residual_it_was_drawn_from():
    made = st.anatomy(residual_step())
    assert made.residual == (st.ResidualBar("␣dog", 0.5, 0, True),
                             st.ResidualBar("␣bird", 0.25, 1, False),
                             st.ResidualBar("␣mat", 0.125, 2, False),
                             st.ResidualBar("␣hat", 0.0625, 3, False))
    assert made.residual_words == ("'␣cat' refused: drawn again from what the target wanted "
                                   "more than the guess (residual, 25% of the mass)")
    own = next(s for s in made.stages if s.name == st.OWN)
    assert own.residual_shown and "25% of p_target lay above p_draft" in own.caption
    assert [s.name for s in made.stages if s.residual_shown] == [st.OWN]
    below = st.anatomy(residual_step(drawn_rank=11)).residual
    assert [b.drawn for b in below] == [False] * 4 + [True] and below[-1].rank == 11


def test_without_a_residual_the_correction_keeps_its_words(qtbot):
    """Older traces, greedy steps and servers keep none: the words alone, no bars."""
    trace = read_trace(BEFORE_RESIDUAL)
    step = next(s for s in trace.steps if any(t.reject_reason == ev.REJECT_SAMPLED
                                              for t in s.proposed))
    made = st.anatomy(step)
    assert made.residual == () and made.residual_words == ""
    own = next(s for s in made.stages if s.name == st.OWN)
    assert not own.residual_shown
    assert own.caption.endswith("from what it wanted more than the guesser did: "
                                "norm(max(0, p_target − p_draft))")
    _view, pages = played(made, qtbot)
    assert not any("residual" in t for page in pages for t in page)


def test_the_view_draws_the_residuals_bars_at_the_correction(qtbot):
    made = st.anatomy(residual_step())
    view, pages = played(made, qtbot)
    own = pages[made.stages.index(next(s for s in made.stages if s.name == st.OWN))]
    assert made.residual_words in own
    assert {"␣dog", "0.500  ◀ drawn", "␣bird", "0.250", "␣hat", "0.062"} <= set(own)
    assert not any("◀ drawn" in t for t in pages[-1])  # the tally takes over
    below = st.anatomy(residual_step(drawn_rank=11))
    view.set_anatomy(below, len(below.stages) - 2)
    assert "#12 ␣dog" in drawn(view) and "0.031  ◀ drawn" in view.texts


def test_a_tree_is_walked_level_by_level_and_what_was_never_judged_fades():
    made = st.anatomy(tree_step())
    names = [s.name for s in made.stages]
    assert names == [st.CONTEXT, st.PROPOSE, st.PROPOSE, st.PASS, st.CHECK, st.CHECK,
                     st.STRIKE, st.OWN, st.TALLY]
    assert made.stages[1].visible == {0, 1} and made.stages[2].visible == {0, 1, 2, 3}
    first, second = made.stages[4], made.stages[5]
    assert first.title == "Level 1: '␣the' taken" and first.focus == (0, 1)
    assert first.caption == ("'␣the': the target's choice here too: taken; '␣a': the target's "
                             "choice here is '␣the': not taken")
    assert second.title == "Level 2: no branch taken" and second.focus == (2,)
    assert second.caption == "'␣cat': the target's choice here is '␣cow': not taken"
    assert made.pieces[1].wanted == "␣the" and made.pieces[2].wanted == "␣cow"
    assert made.stages[6].focus == (3,)  # ' dog', below the refused ' a'
    assert [p.depth for p in made.pieces] == [0, 0, 1, 1]
    assert made.positions == 5  # every node and the pending token, in one pass


def test_a_branch_not_taken_fades_with_a_light_border_and_only_the_path_stands_out():
    made = st.anatomy(tree_step())  # ' the' taken; ' a' and ' cat' refused; ' dog' below ' a'
    stages = {(s.name, s.title): s for s in made.stages}

    def looks(name: str, title: str = "") -> dict[int, st.Look]:
        stage = next(s for (n, t), s in stages.items() if n == name and t.startswith(title))
        return {i: made.look(stage, i) for i in range(len(made.pieces))}

    level1 = looks(st.CHECK, "Level 1")  # the two judged are in play, the refusal struck
    assert level1[1] == st.Look(emphasis=True, struck=True)
    assert level1[0] == st.Look(emphasis=True, lit=True)
    level2 = looks(st.CHECK, "Level 2")  # ' a' said, so it fades; ' dog' not yet judged
    assert level2[1] == st.Look(faded=True, struck=True) and level2[3] == st.Look()
    fading = looks(st.STRIKE)  # the stage is about ' dog', yet it fades: no heavy border
    assert fading[3] == st.Look(faded=True)
    assert {i for i, look in fading.items() if look.faded} == {1, 2, 3}
    for name in (st.STRIKE, st.OWN, st.TALLY):
        assert [i for i, look in looks(name).items() if look.emphasis or look.lit] == [0]
    strike = next(s for s in made.stages if s.name == st.STRIKE)
    assert strike.caption.endswith("their branch was not taken: below a refused node")


def test_a_sibling_never_judged_fades_for_its_own_reason(qtbot):
    """Sampling tries siblings in turn: once one is taken the rest are passed by, unjudged,
    with no refused node above them."""
    tree = (ev.TreeNode(-1, 5, " the", "tree", ev.NODE_ACCEPTED, 0.25, 0.375, None, 1.0, 0.125),
            ev.TreeNode(-1, 6, " a", "tree", ev.NODE_UNREACHED, 0.5, 0.25, ev.REJECT_UNREACHED))
    made = st.anatomy(dataclasses.replace(tree_step(), tree=tree, path=(0,), proposed=()))
    strike = next(s for s in made.stages if s.name == st.STRIKE)
    assert strike.caption.endswith("not taken: on a branch passed by once a sibling was taken")
    assert made.look(strike, 1) == st.Look(faded=True)
    _view, pages = played(made, qtbot)
    fading = made.stages.index(strike)
    assert st.FADED_WORDS in pages[fading] and st.FADED_WORDS in pages[-1]
    assert st.FADED_WORDS not in pages[fading - 1]  # nothing had faded yet


def test_a_sampled_tree_spells_p_over_q_only_where_that_is_the_chance():
    """SpecInfer tries siblings in turn: after a refusal the next is judged against what
    is left of p_target, so its chance is not p_target/p_draft and is said alone."""
    tree = (ev.TreeNode(-1, 5, " a", "tree", ev.NODE_REJECTED, 0.5, 0.25, ev.REJECT_SAMPLED,
                        0.5, 0.75),
            ev.TreeNode(-1, 6, " the", "tree", ev.NODE_ACCEPTED, 0.25, 0.375, None, 0.625,
                        0.125))
    step = dataclasses.replace(tree_step(), tree=tree, path=(1,), proposed=())
    first, second = st.anatomy(step).pieces
    assert first.check == ("kept with chance min(1, p_target/p_draft) = min(1, 0.250/0.500) "
                           "= 0.500; the draw 0.750 did not fall below it: not taken")
    assert second.check == "kept with chance 0.625; the draw 0.125 fell below it: taken"


def test_a_server_step_shows_only_what_the_server_reports(qtbot):
    e = server_steps()[1]
    assert e.proposed[2].text == "?" and e.proposed[2].p_draft is None
    made = st.anatomy(e)
    assert made.server == "llama-server" and not made.sampling
    texts = [s.title + s.caption for s in made.stages]
    assert not any("p_draft" in t for t in texts)
    passing = next(s for s in made.stages if s.name == st.PASS)
    assert passing.caption.startswith(f"llama-server took {st.ms(e.timing.total_ms)} for the "
                                      "step, by its own clock")
    strike = next(s for s in made.stages if s.name == st.STRIKE)
    assert strike.caption == "llama-server refused 2 drafts in all"
    _view, pages = played(made, qtbot)
    assert not any("p_draft" in text or "guess " in text for page in pages for text in page)


def test_older_traces_play_every_step(qtbot):
    for path in (*OLDER, BEFORE_RESIDUAL):
        trace = read_trace(path)
        assert trace.steps, path
        for n, step in enumerate(trace.steps):
            made = st.anatomy(step, st.context_pieces(
                trace.header.get("prompt", ""), trace.steps[:n],
                prompt_tokens=st.prompt_tokens(trace.header)), st.plain_cost(trace.steps))
            _view, pages = played(made, qtbot)
            assert numbers(t for page in pages for t in page) <= event_numbers(made), (path, n)


def test_the_context_is_the_prompts_last_tokens_then_the_runs(steps):
    header = {"prompt_text": "def add(a, b):", "token_chars": [[0, 3], [3, 7], [7, 14]]}
    tokens = st.prompt_tokens(header)
    assert tokens == ("def", " add", "(a, b):")
    assert st.context_pieces("", [], 2, tokens) == ("␣add", "(a,␣b):")
    assert st.context_pieces("", steps[:1], 3, tokens) == ("␣add", "(a,␣b):", "The")
    # an older trace's offsets leave its control tokens out: the prompt's end instead
    assert st.prompt_tokens(read_trace(TRACE).header) == ()
    assert st.context_pieces("x" * 60, [], 3) == ("…" + "x" * 48,)
    assert st.prompt_tokens({"prompt_text": "ab", "token_chars": "bad"}) == ()


# ---------------------------------------------------------------- what the view draws


@pytest.mark.parametrize("name", ["chain", "bonus", "nothing guessed", "sampling", "residual",
                                  "tree", "lookahead", "server", "medusa"])
def test_every_number_drawn_is_the_events(name, steps, plain, qtbot):
    event = {"chain": lambda: steps[10], "bonus": lambda: steps[1],
             "nothing guessed": lambda: steps[21], "sampling": sampled_step,
             "residual": lambda: residual_step(drawn_rank=11),
             "tree": tree_step, "server": lambda: server_steps()[1], "medusa": medusa_tree_step,
             "lookahead": lambda: tree_step(ev.Lookahead(42, (("a", "b"), ("c", "d")), 3),
                                            "lookahead")}[name]()
    made = st.anatomy(event, st.context_pieces("def f():", []), plain)
    _view, pages = played(made, qtbot)
    shown = numbers(t for page in pages for t in page)
    assert shown <= event_numbers(made)
    last = " ".join(pages[-1])
    assert made.tally in last and st.ms(event.timing.total_ms) in last


def test_the_view_draws_each_guess_with_its_p_draft_and_its_verdict(qtbot):
    made = st.anatomy(sampled_step())
    _view, pages = played(made, qtbot)
    first_guess = pages[1]
    assert "draft model\np_draft 0.500" in first_guess and "✓ kept" not in first_guess
    verdicts = pages[made.stages.index(next(s for s in made.stages if s.name == st.OWN))]
    assert {"✓ kept", "✗ refused", "— thrown away"} <= set(verdicts)
    assert "p_target 0.300\nchance 0.400\ndraw 0.910" in verdicts
    assert "'␣dog'" not in " ".join(pages[0])  # the own token only once it is written


def test_medusas_heads_name_the_levels_they_guessed(qtbot):
    made = st.anatomy(medusa_tree_step())
    assert made.heads == ("head 1", "head 2")
    grow = [s for s in made.stages if s.name == st.PROPOSE]
    assert "(head 1, head 2: a head for each position ahead" in grow[0].caption
    _view, pages = played(made, qtbot)
    first, second = (pages[made.stages.index(s)] for s in grow)
    assert "head 1" in first and "head 2" not in first  # a head with its level
    assert {"head 1", "head 2"} <= set(second)
    # a head named on only some of a level's guesses, or another oracle: no heads
    mixed = dataclasses.replace(medusa_tree_step(), tree=(
        *medusa_tree_step().tree[:3], dataclasses.replace(medusa_tree_step().tree[3],
                                                          detail="head 3")))
    assert st.anatomy(mixed).heads == () and st.anatomy(tree_step()).heads == ()
    chain = dataclasses.replace(sampled_step(), proposed=tuple(
        dataclasses.replace(t, source="medusa", detail=f"head {i + 1}")
        for i, t in enumerate(sampled_step().proposed)))
    assert st.anatomy(chain).heads == ("head 1", "head 2", "head 3")


def test_lookahead_shows_its_pool_and_window(qtbot):
    made = st.anatomy(tree_step(ev.Lookahead(42, (("a", "b"), ("c", "d")), 3), "lookahead"))
    _view, pages = played(made, qtbot)
    assert any("n-gram pool 42 (3 new this step)" in t and "a b / c d" in t for t in pages[0])


# ---------------------------------------------------------------- keys and playing


def test_keys_step_play_and_change_speed_even_where_the_window_owns_them(qtbot):
    window = QMainWindow()
    qtbot.addWidget(window)
    stolen = []
    replay_step = QAction("Step forward", window)
    replay_step.setShortcut(QKeySequence("Right"))
    replay_step.triggered.connect(lambda: stolen.append(1))
    window.addAction(replay_step)
    view = AnatomyView()
    window.setCentralWidget(view)
    view.set_anatomy(st.anatomy(sampled_step()))
    window.show()
    qtbot.waitExposed(window)
    view.setFocus()
    for key in (Qt.Key.Key_Right, Qt.Key.Key_PageDown, Qt.Key.Key_N):
        qtbot.keyClick(view, key)
    assert view.index == 3 and stolen == []
    qtbot.keyClick(view, Qt.Key.Key_Left)
    assert view.index == 2
    qtbot.keyClick(view, Qt.Key.Key_End)
    assert view.index == view.stage_count - 1
    qtbot.keyClick(view, Qt.Key.Key_Home)
    assert view.index == 0
    qtbot.keyClick(view, Qt.Key.Key_Plus)
    assert view.speed == 2.0
    qtbot.keyClick(view, Qt.Key.Key_Minus)
    qtbot.keyClick(view, Qt.Key.Key_Minus)
    assert view.speed == 0.5
    qtbot.keyClick(view, Qt.Key.Key_Space)
    assert view.playing
    qtbot.keyClick(view, Qt.Key.Key_Space)
    assert not view.playing


def test_playing_walks_every_stage_and_stops_at_the_last(qtbot, monkeypatch):
    monkeypatch.setattr(view_module, "STAGE_MS", 5)
    view = AnatomyView()
    qtbot.addWidget(view)
    view.set_anatomies([st.anatomy(sampled_step()), st.anatomy(tree_step())])
    seen = []
    view.stageChanged.connect(seen.append)
    view.set_playing(True)
    qtbot.waitUntil(lambda: not view.playing, timeout=5000)
    assert seen == list(range(1, view.stage_count))
    assert view.anatomy.is_tree and view.stage.name == st.TALLY
