"""A step's anatomy for slides: `specviz anatomy TRACE --step N OUT.mp4|OUT.gif|OUT.html`.

The frames are the anatomy view's own drawing (widgets/anatomy.py), laid out as on a 1080p
screen and drawn at the size asked, as the race's video is (video.layout_size, picture);
each stage is held `stage_s` seconds, the last one `hold_s` more. MP4, WebM and GIF go
through the race video's writers; the HTML page holds every stage as a picture and steps
through them with the same keys as the view, offline. Every file is written whole or not at
all (engines.atomic).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QImage, QPainter, QPixmap

from ...board.anatomy_stages import (
    Anatomy,
    anatomy,
    context_pieces,
    plain_cost,
    profile_cost,
    prompt_tokens,
)
from ...board.describe import streams_words
from ...board.palette import THEMES
from ...engines.atomic import written_atomically
from ...engines.batch_events import BatchStep
from ...engines.errors import SpecvizError
from ...engines.trace import Trace, read_trace
from ...widgets.anatomy import AnatomyView
from .files import png_bytes
from .race_window import picture
from .video import AvWriter, ExportCancelled, GifWriter, VideoSettings, check, layout_size

FORMATS = (".mp4", ".webm", ".gif", ".html")
MAX_STEPS = 20  # a run of steps for a slide, not a whole trace (each step is ~10 stages)

Progress = Callable[[int, int], bool]  # (frames done, frames in all) -> go on?


@dataclass(frozen=True)
class AnatomySettings:
    video: VideoSettings
    stage_s: float = 2.0  # each stage's time on screen


def parse_steps(step: int | None, steps: str | None) -> tuple[int, int]:
    """The first and last step asked (`--step N` or `--steps A-B`, both inclusive)."""
    if steps is None:
        return (0, 0) if step is None else (step, step)
    first, sep, last = steps.partition("-")
    try:
        a, b = int(first), int(last if sep else first)
    except ValueError:
        raise SpecvizError(f"steps '{steps}': give A-B, e.g. 3-5") from None
    if a > b or a < 0:
        raise SpecvizError(f"steps '{steps}': the first step must be 0 or more and not after "
                           "the last")
    return a, b


def trace_anatomies(path: Path, first: int, last: int, profile=None,
                    baseline: Path | None = None, stream: int = 0) -> list[Anatomy]:
    """The anatomies of steps first..last of a trace (of a batch of streams, of stream
    `stream + 1`). A plain step's cost: a plain trace's steps (`baseline`, the same machine's
    race, of as many streams), else a cost profile's pass of a token a live stream at each
    step's context (an engines.cost.profile.Profile), else the trace's own steps that guessed
    nothing."""
    whole = read_trace(path)
    trace = whole.stream(stream)
    if trace.problem is not None and not trace.steps:
        raise SpecvizError(f"corrupt trace: {trace.problem}")
    steps = trace.steps
    if not steps:
        raise SpecvizError(f"{path}: no steps (an empty trace)")
    if first < 0:
        raise SpecvizError(f"step {first}: steps are counted from 0")
    if last >= len(steps):
        raise SpecvizError(f"{path} has steps 0 to {len(steps) - 1}: there is no step {last}")
    if last - first + 1 > MAX_STEPS:
        raise SpecvizError(f"{last - first + 1} steps: at most {MAX_STEPS} in one export")
    plain = plain_cost(steps, _plain_steps(baseline, whole.streams) if baseline else ())
    rows = live_streams(whole, stream) or [1] * len(steps)
    prompt, tokens = trace.header.get("prompt") or "", prompt_tokens(trace.header)
    batch = f"stream {stream + 1} of {whole.streams}" if whole.streams > 1 else ""
    return [anatomy(steps[n], context_pieces(prompt, steps[:n], prompt_tokens=tokens),
                    profile_cost(profile, steps[n].position, rows[n])
                    if profile is not None and baseline is None else plain, batch)
            for n in range(first, last + 1)]


def live_streams(trace: Trace, stream: int) -> list[int]:
    """Of a trace of a batch, how many streams were in the batch at each of stream
    `stream + 1`'s steps (a plain step of the batch is a pass of a token each)."""
    return [len(b.steps) for b in trace.batches if isinstance(b, BatchStep)
            for i, _ in b.steps if i == stream]


def _plain_steps(path: Path, streams: int) -> list:
    trace = read_trace(path)
    if not trace.steps:
        raise SpecvizError(f"{path}: no steps to price a plain step with")
    if any(step.proposed or step.tree for step in trace.steps):
        raise SpecvizError(f"{path} is not a plain-decoding trace: its steps guessed tokens")
    if trace.streams != streams:
        raise SpecvizError(f"{path} decoded {streams_words(trace.streams)} at once and the trace "
                           f"{streams_words(streams)}: a plain step's cost is of as many")
    return trace.steps


# ---------------------------------------------------------------- pictures


def stage_pictures(anatomies: Sequence[Anatomy], size: tuple[int, int],
                   theme: str) -> Iterator[QImage]:
    """Every stage of every step, drawn by an anatomy view that is never shown."""
    view = AnatomyView(THEMES[theme])
    view.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen)
    view.resize(*layout_size(size))
    view.set_anatomies(list(anatomies))
    try:
        for index in range(view.stage_count):
            view.go(index)
            yield picture(view, size)
    finally:
        view.deleteLater()


def check_output(out: Path, settings: AnatomySettings) -> str:
    """The format's suffix, once the output and the settings are known to be good."""
    suffix = Path(out).suffix.lower()
    if suffix not in FORMATS:
        raise SpecvizError(f"unknown format '{Path(out).suffix or Path(out).name}': give "
                           "OUT.mp4, OUT.webm, OUT.gif or OUT.html")
    check(settings.video, ".mp4" if suffix == ".html" else suffix)
    if not 0.2 <= settings.stage_s <= 30:
        raise SpecvizError(f"stage time {settings.stage_s:g} s: give 0.2 to 30 seconds")
    return suffix


# ---------------------------------------------------------------- files


def export_anatomy(anatomies: Sequence[Anatomy], out: Path, settings: AnatomySettings,
                   progress: Progress | None = None) -> Path:
    """Write the stages of these steps to `out` (its suffix picks the format)."""
    out = Path(out)
    suffix = check_output(out, settings)
    if suffix == ".html":
        return write_anatomy_page(anatomies, out, settings)
    video = settings.video
    stages = sum(len(a.stages) for a in anatomies)
    palette = None
    if suffix == ".gif":  # a frame a stage, shown stage_s (held stages merge in a GIF anyway)
        video = replace(video, fps=1.0 / settings.stage_s)
        palette = _palette_image(stage_pictures(anatomies, video.size, video.theme))
    per_stage = max(1, round(settings.stage_s * video.fps))
    repeats = [per_stage] * stages
    repeats[-1] += round(video.hold_s * video.fps)
    writer = GifWriter if suffix == ".gif" else AvWriter
    with written_atomically(out) as temp:
        with writer(temp, suffix, video, palette) as sink:  # pictures drawn as they are written
            _write_frames(sink, stage_pictures(anatomies, video.size, video.theme), repeats,
                          progress)
    return out


def _write_frames(sink, pictures: Iterator[QImage], repeats: list[int],
                  progress: Progress | None) -> None:
    total, done = sum(repeats), 0
    for image, times in zip(pictures, repeats):
        for _ in range(times):
            sink.write(image)
            done += 1
            if progress is not None and not progress(done, total):
                raise ExportCancelled


def _palette_image(pictures: Iterator[QImage]) -> QImage:
    """Every stage side by side, small: a GIF's one palette must hold every colour the
    stages show (a guess's source colour is gone once it is refused). Scaled without
    smoothing, so no colour is a blend of two."""
    tiles = [image.scaled(max(1, image.width() // 4), max(1, image.height() // 4))
             for image in pictures]
    sheet = QImage(tiles[0].width() * len(tiles), tiles[0].height(),
                   QImage.Format.Format_RGB32)
    painter = QPainter(sheet)
    for i, tile in enumerate(tiles):
        painter.drawImage(i * tile.width(), 0, tile)
    painter.end()
    return sheet


def write_anatomy_page(anatomies: Sequence[Anatomy], out: Path,
                       settings: AnatomySettings) -> Path:
    """One offline HTML page: every stage as a PNG inlined, stepped with the keys of the
    view (Right, Left, Space, Home, End) or its buttons."""
    video = settings.video
    slides = []
    for (made, index), image in zip(_stage_owners(anatomies),
                                    stage_pictures(anatomies, video.size, video.theme)):
        data = base64.b64encode(png_bytes(QPixmap.fromImage(image))).decode("ascii")
        stage = made.stages[index]
        slides.append(f'<img src="data:image/png;base64,{data}" alt="'
                      f'{html.escape(stage.title + ": " + stage.caption)}">')
    page = _PAGE.format(title=html.escape(_page_title(anatomies)),
                        background=THEMES[video.theme].background, slides="\n".join(slides),
                        stage_ms=round(settings.stage_s * 1000))
    with written_atomically(out) as temp:
        temp.write_text(page, encoding="utf-8")
    return out


def _stage_owners(anatomies: Sequence[Anatomy]) -> Iterator[tuple[Anatomy, int]]:
    for made in anatomies:
        for index in range(len(made.stages)):
            yield made, index


def _page_title(anatomies: Sequence[Anatomy]) -> str:
    first, last = anatomies[0].event, anatomies[-1].event
    steps = f"step {first.step}" if first is last else f"steps {first.step}-{last.step}"
    return f"specviz: the anatomy of {steps} ({first.oracle})"


# No script from elsewhere, no request: the page opens from a mail attachment.
_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
html,body{{margin:0;height:100%;background:{background};}}
main{{height:100%;display:flex;align-items:center;justify-content:center;}}
main img{{display:none;max-width:100%;max-height:100%;}}
main img.on{{display:block;}}
nav{{position:fixed;bottom:8px;right:12px;font:14px sans-serif;opacity:.6;}}
</style></head>
<body><main>
{slides}
</main>
<nav><button id="back">◀</button> <button id="play">▶</button>
<button id="next">▶|</button> <span id="where"></span></nav>
<script>
const slides=[...document.querySelectorAll("main img")];
let at=0,timer=null;
function show(i){{at=Math.max(0,Math.min(i,slides.length-1));
slides.forEach((s,k)=>s.classList.toggle("on",k===at));
document.getElementById("where").textContent=(at+1)+"/"+slides.length;}}
function play(on){{clearInterval(timer);timer=null;
if(on){{if(at===slides.length-1)show(0);
timer=setInterval(()=>{{if(at===slides.length-1)play(false);else show(at+1);}},{stage_ms});}}}}
document.addEventListener("keydown",e=>{{
if(["ArrowRight","PageDown","n"].includes(e.key))show(at+1);
else if(["ArrowLeft","PageUp","p"].includes(e.key))show(at-1);
else if(e.key===" "){{play(timer===null);e.preventDefault();}}
else if(e.key==="Home")show(0);else if(e.key==="End")show(slides.length-1);}});
document.getElementById("back").onclick=()=>show(at-1);
document.getElementById("next").onclick=()=>show(at+1);
document.getElementById("play").onclick=()=>play(timer===null);
show(0);
</script></body></html>
"""
