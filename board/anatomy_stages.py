"""One verification step taken apart into stages a listener can follow (no Qt here).

The anatomy view (widgets/anatomy.py) draws one `Stage` at a time, napari's way: this module
is the model, the view only observes it. Every number and word it draws comes from here, and
everything here from the step event, plus one plain step's measured cost where one is known
(`PlainCost`). A field the event lacks is left out, never estimated: a server's step names no
p_draft nor the drafts it refused, and its clock does not split guessing from checking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..engines import events as ev
from ..engines.oracles.registry import SERVER_KINDS, head_sources, is_plain
from .describe import node_why, prob, shown, why
from .kinds import KIND_TARGET, kind_of, words

# What each stage shows; the view draws by these names.
CONTEXT = "context"  # the text so far
PROPOSE = "propose"  # the guesses appear (one per stage, or a tree level per stage)
PASS = "pass"  # the target's one forward pass over every position, with its time
CHECK = "check"  # one position (or tree level) judged
STRIKE = "strike"  # what came after the first refusal is thrown away (a tree: faded)
OWN = "own"  # the target's own token: the bonus, the correction, or a plain step's token
TALLY = "tally"  # tokens kept for the time spent, joined to the text

# A guess's verdict, drawn once its stage has judged it.
KEPT = "kept"
REFUSED = "refused"
DROPPED = "dropped"  # after a refusal (or below a refused tree node): never judged

FADED_WORDS = "faded: a branch not taken"  # a tree's legend once a branch has faded

CONTEXT_PIECES = 10  # the context's last tokens shown
PROMPT_TAIL_CHARS = 48  # the prompt's end, where the run has fewer tokens than that


@dataclass(frozen=True, slots=True)
class PlainCost:
    """What one plain step (one token of the target) costs, and how that was measured."""

    ms: float
    where: str


@dataclass(frozen=True, slots=True)
class Piece:
    """One guessed token (a chain's proposal or a tree's node) as the anatomy draws it."""

    text: str  # whitespace made visible
    kind: str  # the colour kind of its source (palette)
    source: str  # the source's words: "prompt copy", "draft model"...
    verdict: str  # KEPT, REFUSED or DROPPED once judged
    check: str  # why it was kept or refused, in words, with the event's numbers
    p_draft: float | None = None
    p_target: float | None = None
    accept_prob: float | None = None
    draw: float | None = None
    detail: str | None = None  # the oracle's label ("2-gram match", "head 2") or provenance
    parent: int = -1  # a tree's parent node (-1: the root); a chain's previous token
    depth: int = 0
    wanted: str | None = None  # greedy, refused: the token the target chose in its place


@dataclass(frozen=True, slots=True)
class ResidualBar:
    """One token of the residual a sampled correction was drawn from, as a bar."""

    text: str  # whitespace made visible
    p: float  # its probability in the residual, normalised
    rank: int  # 0: the residual's likeliest (the drawn one may rank further down)
    drawn: bool  # the correction the target drew


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    title: str  # the headline a listener reads
    caption: str  # one or two sentences under it
    visible: frozenset[int] = frozenset()  # guesses drawn
    judged: frozenset[int] = frozenset()  # guesses whose verdict is drawn
    focus: tuple[int, ...] = ()  # guesses this stage is about
    pass_drawn: bool = False
    own_shown: bool = False
    tally_shown: bool = False
    residual_shown: bool = False  # the residual's bars beside a sampled correction


@dataclass(frozen=True, slots=True)
class Look:
    """How one guess is drawn at one stage: what the view needs beyond the piece itself."""

    faded: bool = False  # no longer in play (a branch not taken): faded, with a light border
    emphasis: bool = False  # a heavy border: what the stage judges now, or the path taken
    lit: bool = False  # shaded: kept (on the path taken)
    struck: bool = False  # refused (or thrown away after a refusal): the refused colour, struck


@dataclass(frozen=True)
class Anatomy:
    event: ev.StepEvent
    context: tuple[str, ...]  # the last pieces of text before the step, visible
    pieces: tuple[Piece, ...]  # the proposals, or a tree's nodes, in the event's order
    own: str  # the target's own token, visible
    own_words: str  # what kind of token it is and why
    plain: PlainCost | None
    server: str | None  # the serving engine that judged the step, for a server lane
    sampling: bool  # judged by p_target/p_draft against a uniform draw
    # A sampled correction: the residual's likeliest tokens it was drawn from (the event's);
    # () where the event keeps none (greedy, a server, a trace older than the field).
    residual: tuple[ResidualBar, ...] = ()
    stages: tuple[Stage, ...] = field(default=())
    batch: str = ""  # of a batch of streams, which stream's step this is ("stream 2 of 4")

    @property
    def is_tree(self) -> bool:
        return bool(self.event.tree)  # a tree step that guessed nothing is drawn as a chain

    def look(self, stage: Stage, index: int) -> Look:
        """How guess `index` is drawn at `stage`. A tree's branch not taken (a refused node
        once its level is judged, and every node below or beside the path never judged) fades
        with a light border, so that only the path taken and what is being judged stand out;
        a chain's refusal stays in view, what came after it fades once struck."""
        if index not in stage.judged:
            return Look(emphasis=index in stage.focus)
        verdict = self.pieces[index].verdict
        if verdict == KEPT:
            return Look(emphasis=self.is_tree or index in stage.focus, lit=True)
        if self.is_tree:
            faded = verdict == DROPPED or index not in stage.focus
            return Look(faded=faded, emphasis=not faded, struck=verdict == REFUSED)
        faded = verdict == DROPPED
        return Look(faded=faded, emphasis=not faded and index in stage.focus, struck=True)

    @property
    def residual_words(self) -> str:
        """The residual's bars in one line: why the correction was drawn from them."""
        drawn_from = self.event.target.residual
        if drawn_from is None:
            return ""
        refused = next((t for t in self.event.proposed
                        if t.reject_reason == ev.REJECT_SAMPLED), None)
        said = f"{shown(refused.text)!r} refused" if refused else "refused"
        if drawn_from.mass <= 0:  # nothing of p_target lay above p_draft: p_target itself
            return f"{said}: drawn again from the target's own distribution"
        return (f"{said}: drawn again from what the target wanted more than the guess "
                f"(residual, {percent(drawn_from.mass)} of the mass)")

    @property
    def heads(self) -> tuple[str, ...]:
        """Medusa's heads, one a level (a tree's depth, a chain's position): the head that
        guessed that level's tokens, as the event names it; () where it names none."""
        raw = self.event.tree or self.event.proposed
        by_heads = head_sources()
        if not raw or any(t.source not in by_heads or not t.detail for t in raw):
            return ()
        levels: dict[int, set[str]] = {}
        for piece, t in zip(self.pieces, raw):
            levels.setdefault(piece.depth, set()).add(t.detail)
        if any(len(named) != 1 for named in levels.values()):
            return ()
        return tuple(next(iter(levels[d])) for d in sorted(levels))

    @property
    def positions(self) -> int:
        """Rows the target's one pass scored: the pending token's and one per guess."""
        return len(self.pieces) + 1

    @property
    def tokens(self) -> int:
        """Tokens the step wrote: the kept guesses and the target's own."""
        return self.event.n_accepted + 1

    @property
    def kept_texts(self) -> tuple[tuple[str, str], ...]:
        """(visible text, colour kind) of what joins the text: kept guesses, then the own."""
        kept = tuple((shown(t.text), kind_of(t.source)) for t in self.event.accepted)
        return (*kept, (self.own, KIND_TARGET))

    @property
    def plain_steps(self) -> float | None:
        """The step's time in plain steps (None where no plain step was measured)."""
        if self.plain is None or self.plain.ms <= 0:
            return None
        return self.event.timing.total_ms / self.plain.ms

    @property
    def plain_ms_for_tokens(self) -> float | None:
        """What plain decoding spends on as many tokens as the step wrote."""
        return None if self.plain is None else self.tokens * self.plain.ms

    @property
    def tally(self) -> str:
        n = self.tokens
        tokens = f"{n} token{'s' if n != 1 else ''}"
        steps = self.plain_steps
        if steps is None:
            return f"{tokens} from one pass of the target ({ms(self.event.timing.total_ms)})"
        return f"{tokens} for the time of {steps:.1f} plain step{'s' if steps != 1 else ''}"

    @property
    def tally_words(self) -> str:
        kept = self.event.n_accepted
        base = (f"{kept} guess{'es' if kept != 1 else ''} kept + 1 token of the target's own, "
                f"in {ms(self.event.timing.total_ms)}")
        steps = self.plain_steps
        if steps is None:
            return base + " (no plain step measured to compare with)"
        pace = self.tokens / steps
        verdict = ("faster than plain decoding" if pace > 1 else
                   "slower than plain decoding" if pace < 1 else "as fast as plain decoding")
        return f"{base}: {pace:.2f}× the pace of plain decoding, {verdict} in this step"


def ms(value: float) -> str:
    return f"{value:.1f} ms" if value >= 10 else f"{value:.2f} ms"


def percent(share: float) -> str:
    """A share of probability mass as a listener reads it: whole percent, finer below 10%."""
    value = 100 * share
    if 0 < value < 0.1:
        return "<0.1%"
    if 99.9 < value < 100:  # not all of it: rounding must not say so
        return ">99.9%"
    return f"{value:.0f}%" if 10 <= value < 99.5 or value in (0, 100) else f"{value:.1f}%"


# ---------------------------------------------------------------- building


def anatomy(event: ev.StepEvent, context: Sequence[str] = (),
            plain: PlainCost | None = None, batch: str = "") -> Anatomy:
    """The stages of `event`; `context` the visible pieces before it (`context_pieces`);
    `batch` which stream of a batch it is ("stream 2 of 4"), if it is one."""
    server = _server(event)
    sampling = any(p.draw is not None for p in _judged_fields(event))
    pieces = _tree_pieces(event) if event.tree else _chain_pieces(event)
    own, own_words = shown(event.target.text), _own_words(event, sampling, server)
    made = Anatomy(event, tuple(context), pieces, own, own_words, plain, server, sampling,
                   _residual_bars(event), batch=batch)
    return replace(made, stages=tuple(_tree_stages(made) if made.is_tree
                                      else _chain_stages(made)))


def context_pieces(prompt: str, before: Sequence[ev.StepEvent], count: int = CONTEXT_PIECES,
                   prompt_tokens: Sequence[str] = ()) -> tuple[str, ...]:
    """The last `count` tokens written before a step (its earlier steps' kept tokens), with
    the prompt's last tokens in front where the run has written fewer (`prompt_tokens`, where
    the trace says how the prompt was cut, else the prompt's end as one piece)."""
    pieces: list[str] = []
    for step in reversed(before):
        pieces[:0] = [*(t.text for t in step.accepted), step.target.text]
        if len(pieces) >= count:
            break
    if len(pieces) < count:
        if prompt_tokens:
            pieces[:0] = prompt_tokens[-(count - len(pieces)):]
        elif prompt:
            tail = prompt[-PROMPT_TAIL_CHARS:]
            pieces.insert(0, ("…" if len(prompt) > len(tail) else "") + tail)
    return tuple(shown(p) for p in pieces[-count:])


def prompt_tokens(header: dict) -> tuple[str, ...]:
    """The rendered prompt cut into its tokens, where a trace's header says how (the
    `token_chars` offsets of its `prompt_text`); else nothing."""
    text, chars = header.get("prompt_text"), header.get("token_chars")
    if not isinstance(text, str) or not isinstance(chars, list):
        return ()
    try:
        spans = [(int(a), int(b)) for a, b in chars]
    except (TypeError, ValueError):  # a header this version cannot read: no tokens
        return ()
    # Older traces gave control tokens no characters: their offsets do not tile the text.
    ends = [0, *(b for _a, b in spans)]
    if not spans or ends[-1] != len(text) or any(a != e for (a, _b), e in zip(spans, ends)):
        return ()
    return tuple(text[a:b] for a, b in spans)


def plain_cost(steps: Sequence[ev.StepEvent],
               baseline: Sequence[ev.StepEvent] = ()) -> PlainCost | None:
    """One plain step's measured cost: a plain lane's mean step where there is one (the same
    race, the same machine), else the mean of this lane's steps that guessed nothing (one
    token per pass, as plain decoding), else None."""
    if baseline:
        totals = baseline[-1].totals
        if totals.steps:
            return PlainCost(totals.compute_ms / totals.steps,
                             f"mean of the plain lane's {totals.steps} steps")
    plain = [s.timing.total_ms for s in steps if not s.proposed and s.tree is None]
    if plain:
        n = len(plain)
        return PlainCost(sum(plain) / n,
                         f"mean of this run's {n} step{'s' if n != 1 else ''} that guessed "
                         "nothing")
    return None


def profile_cost(profile, position: int, streams: int = 1) -> PlainCost:
    """A plain step's forward at this context on a measured cost profile
    (engines.cost.profile.Profile): one token, or a token of each of a batch's `streams`."""
    tokens = "1 token" if streams == 1 else f"{streams} tokens (one a stream)"
    return PlainCost(profile.cost_ms(streams, position),
                     f"cost profile {profile.backend}/{profile.device}: {tokens} at context "
                     f"{position}")


def _server(event: ev.StepEvent) -> str | None:
    judge = next((t.verified_by for t in event.proposed if t.verified_by), None)
    if judge:
        return judge
    return "the server" if event.oracle in SERVER_KINDS else None


def _judged_fields(event: ev.StepEvent):
    return event.tree or event.proposed


def _source_words(source: str) -> str:
    return words(kind_of(source))


def _detail(detail: str | None, span: ev.Span | None) -> str | None:
    """The oracle's own label and, for a copy, where it was copied from (in words: the token
    offsets are the Step dock's)."""
    where = None
    if span is not None:
        where = ("from an earlier run" if span.run is not None else
                 "copied from the prompt" if span.chr_start is not None else
                 "copied from earlier output")
    return " · ".join(d for d in (detail, where) if d) or None


def _chain_pieces(event: ev.StepEvent) -> tuple[Piece, ...]:
    wanted = shown(event.target.text)  # a chain's first refusal: the target's own token
    return tuple(
        Piece(shown(t.text), kind_of(t.source), _source_words(t.source),
              KEPT if t.accepted else DROPPED if t.reject_reason == ev.REJECT_AFTER else REFUSED,
              _chain_check(event, t), t.p_draft, t.p_target, t.accept_prob, t.draw,
              _detail(t.detail, t.span), i - 1, i,
              wanted if t.reject_reason == ev.REJECT_MISMATCH else None)
        for i, t in enumerate(event.proposed))


def _chain_check(event: ev.StepEvent, token: ev.ProposedToken) -> str:
    """The check of one position in words a listener follows; the numbers are the event's."""
    if token.verified_by or token.reject_reason == ev.REJECT_AFTER:
        return why(token)
    if token.accept_prob is None:  # greedy: the target's choice against the guess
        if token.accepted:
            return f"the target's choice here is {shown(token.text)!r} too: kept"
        return (f"the target's choice here is {shown(event.target.text)!r}, not "
                f"{shown(token.text)!r}: refused")
    if token.draw is None:  # typical acceptance (lossy): a threshold, no draw
        return why(token)
    return _drawn(token, "kept", "refused")


def _drawn(judged, kept: str, refused: str) -> str:
    """A sampled verdict: the chance of keeping the guess and the uniform draw against it."""
    keep = _keep_chance(judged.p_target, judged.p_draft, judged.accept_prob)
    accepted = (judged.state == ev.NODE_ACCEPTED if isinstance(judged, ev.TreeNode)
                else judged.accepted)
    if accepted:
        return f"{keep}; the draw {prob(judged.draw)} fell below it: {kept}"
    return f"{keep}; the draw {prob(judged.draw)} did not fall below it: {refused}"


def _keep_chance(p_target: float | None, p_draft: float | None, accept: float | None) -> str:
    """min(1, p_target/p_draft) spelled out where the event's chance is that; a tree's later
    sibling is judged against what its refused siblings left of p_target, and a guess without
    p_draft counts as certain: then the chance alone."""
    if (p_draft and p_target is not None and accept is not None
            and abs(min(1.0, p_target / p_draft) - accept) <= 1e-6 * max(1.0, accept)):
        return (f"kept with chance min(1, p_target/p_draft) = min(1, {prob(p_target)}/"
                f"{prob(p_draft)}) = {prob(accept)}")
    return f"kept with chance {prob(accept)}"


def _tree_pieces(event: ev.StepEvent) -> tuple[Piece, ...]:
    tree = event.tree or ()
    depths: list[int] = []
    for node in tree:  # a parent comes before its children
        depths.append(0 if node.parent < 0 else depths[node.parent] + 1)
    verdicts = {ev.NODE_ACCEPTED: KEPT, ev.NODE_REJECTED: REFUSED}
    return tuple(
        Piece(shown(n.text), kind_of(n.source), _source_words(n.source),
              verdicts.get(n.state, DROPPED), _node_check(event, i), n.p_draft, n.p_target,
              n.accept_prob, n.draw, _detail(n.detail, n.span), n.parent, depths[i],
              _chosen_after(event, n.parent) if n.state == ev.NODE_REJECTED else None)
        for i, n in enumerate(tree))


def _node_check(event: ev.StepEvent, index: int) -> str:
    """Why a tree node's branch was taken or not, in the chain's words."""
    tree = event.tree or ()
    node = tree[index]
    if node.state == ev.NODE_ACCEPTED and node.draw is None:
        return "the target's choice here too: taken"
    if node.state == ev.NODE_REJECTED and node.draw is None:
        return f"the target's choice here is {_chosen_after(event, node.parent)!r}: not taken"
    if node.state in (ev.NODE_ACCEPTED, ev.NODE_REJECTED):
        return _drawn(node, "taken", "not taken")
    return node_why(event, index)  # never judged: below the refused node it names


def _chosen_after(event: ev.StepEvent, parent: int) -> str:
    """The token the step kept after `parent` (-1: the root): the path's next node, or the
    target's own token where the path ends there."""
    tree = event.tree or ()
    taken = next((i for i in event.path or () if tree[i].parent == parent), None)
    return shown(tree[taken].text if taken is not None else event.target.text)


def _residual_bars(event: ev.StepEvent) -> tuple[ResidualBar, ...]:
    """The residual a chain's sampled correction was drawn from, where the event keeps it."""
    drawn_from = event.target.residual
    if drawn_from is None or event.tree or event.target.kind != ev.TARGET_CORRECTION:
        return ()
    return tuple(ResidualBar(shown(t.text) or "∅", t.p, t.rank, t.id == event.target.id)
                 for t in drawn_from.top)


def _own_words(event: ev.StepEvent, sampling: bool, server: str | None) -> str:
    target, kind = event.target, event.target.kind
    p = "" if target.p_target is None else f" (p_target {prob(target.p_target)})"
    if kind == ev.TARGET_BONUS:
        return (f"every guess was kept, and the same pass already scored the next position: "
                f"the target adds {shown(target.text)!r}{p} for free")
    if kind == ev.TARGET_PLAIN:
        return f"the pass gives the target's next token, {shown(target.text)!r}{p}"
    if server:
        return f"{server} writes its own token instead: {shown(target.text)!r}"
    if sampling and target.residual is not None and target.residual.mass > 0:
        return (f"in place of the refused guess the target draws {shown(target.text)!r}{p} from "
                "what it wanted more than the guesser did, norm(max(0, p_target − p_draft)): "
                f"{percent(target.residual.mass)} of p_target lay above p_draft")
    if sampling:
        return (f"in place of the refused guess the target draws {shown(target.text)!r}{p} from "
                "what it wanted more than the guesser did: norm(max(0, p_target − p_draft))")
    return (f"in place of the refused guess the target writes its own choice, "
            f"{shown(target.text)!r}{p}")


# ---------------------------------------------------------------- stages


def _first_stages(made: Anatomy) -> list[Stage]:
    batch = (f" This is {made.batch}, decoded together: one pass of the target gives every "
             "stream its next token, and each stream's guesses ride in the same pass."
             if made.batch else "")
    return [Stage(CONTEXT, "The text so far",
                  f"{made.event.position} tokens so far, the prompt included. Plain decoding "
                  f"runs the big model (the target) once for every next token.{batch}")]


def _guess_caption(made: Anatomy) -> str:
    e = made.event
    if made.server:
        return (f"{made.server} guesses ahead with its own drafter (it does not say how sure the "
                "drafter was)")
    cost = f"in {ms(e.timing.draft_ms)}, without running the big model"
    heads = (f" ({', '.join(made.heads)}: a head for each position ahead, every one reading "
             "the big model's last hidden state)" if made.heads else "")
    return f"{e.oracle} guesses what comes next, {cost}{heads}"


def _chain_stages(made: Anatomy) -> list[Stage]:
    e, pieces = made.event, made.pieces
    stages = _first_stages(made)
    every = frozenset(range(len(pieces)))
    if not pieces:
        said = ("plain decoding never guesses" if is_plain(e.oracle) else
                f"{e.oracle} proposed nothing: {ev.DECLINE_WORDS.get(e.declined, e.declined)}"
                if e.declined else f"{e.oracle} proposed nothing")
        stages.append(Stage(PROPOSE, "No guess this step", said))
    for i in range(len(pieces)):
        source = pieces[i].source
        stages.append(Stage(PROPOSE, f"A cheap guess: {i + 1} of {len(pieces)} ({source})",
                            _guess_caption(made), frozenset(range(i + 1)), focus=(i,)))
    stages.append(Stage(PASS, _pass_title(made), _pass_caption(made), every, pass_drawn=True))
    judged: set[int] = set()
    for i, piece in enumerate(pieces):
        judged.add(i)
        title = f"Position {i + 1}: {'kept' if piece.verdict == KEPT else 'refused'}"
        stages.append(Stage(CHECK, title, piece.check, every, frozenset(judged), (i,), True))
        if piece.verdict != KEPT:  # the first refusal decides the rest
            break
    rest = tuple(range(len(judged), len(pieces)))
    if rest:
        stages.append(Stage(STRIKE, "The first refusal strikes the rest",
                            _strike_caption(made, rest), every, every, rest, True))
    return [*stages, *_last_stages(made, every)]


def _strike_caption(made: Anatomy, rest: tuple[int, ...]) -> str:
    if all(made.pieces[i].verdict == DROPPED for i in rest):
        return ("Each guess builds on the one before it: after a refused token the rest are "
                "thrown away unchecked")
    # A server counts its refused drafts and names none of them.
    return f"{made.server or 'The judge'} refused {len(rest) + 1} drafts in all"


def _pass_title(made: Anatomy) -> str:
    n = made.positions
    if n == 1:
        return "One pass of the big model gives the next token"
    return f"ONE pass of the big model checks all {n} positions at once"


def _pass_caption(made: Anatomy) -> str:
    t = made.event.timing
    if made.server:
        said = f"{made.server} took {ms(t.total_ms)} for the step, by its own clock"
    else:
        said = f"the pass took {ms(t.verify_ms)}"
    if made.event.lookahead is not None:
        said += " (lookahead's Jacobi window rode along in the same pass)"
    if made.plain is None:
        return f"{said}; no plain step was measured to compare with"
    return f"{said}; one plain step (1 token) costs {ms(made.plain.ms)} ({made.plain.where})"


def _last_stages(made: Anatomy, every: frozenset[int]) -> list[Stage]:
    own_title = {ev.TARGET_BONUS: "Bonus: one more token of the target's own",
                 ev.TARGET_CORRECTION: "Correction: the target's own token",
                 ev.TARGET_PLAIN: "The target's own token"}
    title = own_title.get(made.event.target.kind, "The target's own token")
    return [Stage(OWN, title, made.own_words, every, every, (), True, True,
                  residual_shown=bool(made.residual)),
            Stage(TALLY, made.tally, made.tally_words, every, every, (), True, True, True)]


def _level_caption(pieces: tuple[Piece, ...], level: tuple[int, ...], taken: int | None,
                   most: int = 3) -> str:
    """Why the taken node was taken and why its siblings were not (the first few)."""
    said = [f"{pieces[taken].text!r}: {pieces[taken].check}"] if taken is not None else []
    others = [i for i in level if i != taken]
    said += [f"{pieces[i].text!r}: {pieces[i].check}" for i in others[:most]]
    if len(others) > most:
        said.append(f"and {len(others) - most} more not taken")
    return "; ".join(said)


def _tree_stages(made: Anatomy) -> list[Stage]:
    pieces = made.pieces
    every = frozenset(range(len(pieces)))
    stages = [*_first_stages(made), *_growing(made),
              Stage(PASS, _pass_title(made), _pass_caption(made), every, pass_drawn=True),
              *_walk(made, every)]
    dropped = tuple(i for i, p in enumerate(pieces) if p.verdict == DROPPED)
    if dropped:
        stages.append(Stage(STRIKE, "The branches not taken fade", _fade_caption(made, dropped),
                            every, every, dropped, True))
    return [*stages, *_last_stages(made, every)]


def _fade_caption(made: Anatomy, dropped: tuple[int, ...]) -> str:
    """Why the nodes never judged were not: a refused node above them, or (sampling tries
    siblings in turn) a sibling on their branch's way taken before them."""
    pieces = made.pieces

    def below_refusal(i: int) -> bool:
        while i >= 0 and pieces[i].verdict != REFUSED:
            i = pieces[i].parent
        return i >= 0

    below = [below_refusal(i) for i in dropped]
    reasons = (["below a refused node"] if any(below) else []) + (
        ["on a branch passed by once a sibling was taken"] if not all(below) else [])
    return ("Scored in the same pass but never checked, as their branch was not taken: "
            + ", or ".join(reasons))


def _growing(made: Anatomy) -> list[Stage]:
    """The tree's guesses appear a level at a time."""
    pieces = made.pieces
    levels = 1 + max((p.depth for p in pieces), default=-1)
    caption = (f"{_guess_caption(made)}: {len(pieces)} candidates, branching where it is "
               "unsure")
    return [Stage(PROPOSE, f"A tree of guesses: level {d + 1} of {levels}", caption,
                  frozenset(i for i, p in enumerate(pieces) if p.depth <= d),
                  focus=tuple(i for i, p in enumerate(pieces) if p.depth == d))
            for d in range(levels)]


def _walk(made: Anatomy, every: frozenset[int]) -> list[Stage]:
    """Verification walks down from the root: at each level the children of the last node
    taken are judged, one is taken or none is (then the walk ends)."""
    pieces, stages, judged, parent = made.pieces, [], set(), -1
    for node in (*(made.event.path or ()), None):
        level = tuple(i for i, p in enumerate(pieces)
                      if p.parent == parent and p.verdict != DROPPED)
        if not level:
            break
        judged.update(level)
        depth = pieces[level[0]].depth + 1
        title = (f"Level {depth}: {pieces[node].text!r} taken" if node is not None
                 else f"Level {depth}: no branch taken")
        stages.append(Stage(CHECK, title, _level_caption(pieces, level, node), every,
                            frozenset(judged), level, True))
        if node is None:
            break
        parent = node
    return stages
