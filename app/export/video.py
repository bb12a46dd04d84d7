"""A race as a video for a talk: `specviz export TRACE... OUT.mp4|OUT.webm|OUT.gif`.

The frames are the window's own drawing (a replay in presentation mode, laid out as on a
1080p screen and drawn at the size asked), one per frame time on the traces' compute-time
clock, so the lanes race as fairly as in the window; the last frame is held a moment.

MP4 and WebM are encoded with PyAV, whose wheels carry FFmpeg's libraries: nothing depends
on an `ffmpeg` program being installed. H.264 in yuv420p, what slides software and browsers
play; WebM as VP9. A GIF is written with Pillow on one palette taken from the final frame
(it holds every colour the race shows), and Pillow stores only what changed between frames.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
from PySide6.QtGui import QImage

from ...engines.atomic import written_atomically
from ...engines.errors import SpecvizError
from .page import read_race
from .race_window import GRAPHS, WindowClass, picture, race_window, settle

LAYOUT_HEIGHT = 1080  # the window is laid out as on this screen, then drawn at the size asked
SIZES = {"720p": (1280, 720), "1080p": (1920, 1080)}
MAX_SIZE = (3840, 2160)  # 4K: what H.264 and VP9 players take everywhere
MAX_GIF_SIZE = (1920, 1080)  # a larger GIF is tens of megabytes a second
FORMATS = (".mp4", ".webm", ".gif")
# Encoders in order of preference for each container (PyAV's wheels may carry one or other).
CODECS = {".mp4": ("libx264", "h264", "libopenh264", "mpeg4"),
          ".webm": ("libvpx-vp9", "libvpx")}
CODEC_OPTIONS = {"libx264": {"crf": "18", "preset": "veryfast"},  # crisp text, quick
                 "libvpx-vp9": {"crf": "32", "b": "0", "deadline": "realtime", "cpu-used": "8",
                                "row-mt": "1"},
                 "libvpx": {"crf": "10", "b": "2M", "deadline": "realtime", "cpu-used": "8"}}

Progress = Callable[[int, int], bool]  # (frames done, frames in all) -> go on?


class ExportCancelled(Exception):
    """The person stopped the export; nothing was written."""


@dataclass(frozen=True)
class VideoSettings:
    size: tuple[int, int] = SIZES["1080p"]
    fps: float = 30.0
    speed: float = 1.0  # compute seconds a video second; 0.5 shows the race at half speed
    hold_s: float = 2.0  # the final frame stays this long
    theme: str = "light"
    graphs: tuple[str, ...] = ("race",)
    stream: int = 0  # of traces of a batch of streams, the one each lane follows (0: the first)

    @classmethod
    def for_format(cls, suffix: str, **given) -> VideoSettings:
        """The defaults for this format (a GIF smaller and slower), then what was given."""
        defaults = {"size": (960, 540), "fps": 10.0} if suffix == ".gif" else {}
        return cls(**{**defaults, **{k: v for k, v in given.items() if v is not None}})


def parse_size(text: str) -> tuple[int, int]:
    """720p, 1080p or WIDTHxHEIGHT."""
    if text.lower() in SIZES:
        return SIZES[text.lower()]
    try:
        width, height = (int(n) for n in text.lower().split("x"))
    except ValueError:
        raise SpecvizError(f"size '{text}': give 720p, 1080p or WIDTHxHEIGHT") from None
    return width, height


def check(settings: VideoSettings, suffix: str) -> None:
    """One line for what the encoder would refuse or choke on."""
    width, height = settings.size
    biggest = MAX_GIF_SIZE if suffix == ".gif" else MAX_SIZE
    if width < 320 or height < 180:
        raise SpecvizError(f"size {width}x{height} is too small: at least 320x180")
    if width > biggest[0] or height > biggest[1]:
        raise SpecvizError(f"size {width}x{height} is too large for a {suffix[1:].upper()}: "
                           f"at most {biggest[0]}x{biggest[1]}")
    if suffix != ".gif" and (width % 2 or height % 2):
        raise SpecvizError(f"size {width}x{height}: a video's width and height must be even")
    if not 1 <= settings.fps <= 60:
        raise SpecvizError(f"frame rate {settings.fps:g}: give 1 to 60 frames a second")
    if not 0.05 <= settings.speed <= 20:
        raise SpecvizError(f"speed {settings.speed:g}: give 0.05 to 20 (0.5 is half speed)")
    if not 0 <= settings.hold_s <= 30:
        raise SpecvizError(f"hold {settings.hold_s:g} s: give 0 to 30 seconds")
    unknown = [name for name in settings.graphs if name not in GRAPHS]
    if unknown:
        raise SpecvizError(f"unknown graph '{unknown[0]}': pick from {', '.join(GRAPHS)}")


def frame_times(end_ms: float, settings: VideoSettings) -> list[float]:
    """The compute time each frame shows: the race at the chosen speed, then the hold."""
    racing = max(1, math.ceil(end_ms / 1000.0 / settings.speed * settings.fps))
    step_ms = 1000.0 * settings.speed / settings.fps
    held = 1 + round(settings.hold_s * settings.fps)
    return [i * step_ms for i in range(racing)] + [end_ms] * held


def layout_size(size: tuple[int, int]) -> tuple[int, int]:
    """The window's size: the video's shape at LAYOUT_HEIGHT, so text has the same share of
    the picture at 720p as at 1080p."""
    width, height = size
    return round(width * LAYOUT_HEIGHT / height), LAYOUT_HEIGHT


def checked_race(trace_paths: Sequence[Path], out: Path, settings: VideoSettings) -> list:
    """The traces of the race, once the format and the settings are known to be good."""
    suffix = Path(out).suffix.lower()
    if suffix not in FORMATS:
        raise SpecvizError(f"unknown video format '{Path(out).suffix}': give .mp4, .webm or "
                           ".gif")
    check(settings, suffix)
    return read_race(list(trace_paths), settings.stream)


def export_video(trace_paths: Sequence[Path], out: Path, settings: VideoSettings,
                 window_class: WindowClass, progress: Progress | None = None,
                 on_screen: bool = True) -> Path:
    """Write the race of these traces as a video to `out` (its suffix picks the format),
    drawn by a window of `window_class` (race_window says why it is passed in)."""
    out = Path(out)
    suffix = out.suffix.lower()
    traces = checked_race(trace_paths, out, settings)
    paths = [trace.path for trace in traces]
    times = frame_times(max(t.events[-1].totals.compute_ms for t in traces), settings)
    writer = GifWriter if suffix == ".gif" else AvWriter
    with written_atomically(out) as temp:
        palette = None
        if suffix == ".gif":
            palette = final_frame(window_class, paths, settings, on_screen)
        drawn = frames(window_class, paths, times, settings, on_screen)
        with writer(temp, suffix, settings, palette) as sink:
            for done, image in enumerate(drawn, start=1):
                sink.write(image)
                if progress is not None and not progress(done, len(times)):
                    raise ExportCancelled
    return out


def frames(window_class: WindowClass, paths: Sequence[Path], times: Sequence[float],
           settings: VideoSettings, on_screen: bool) -> Iterator[QImage]:
    """The window at each of these compute times (never going back)."""
    with race_window(window_class, paths, layout_size(settings.size), settings.theme,
                     graphs=settings.graphs, on_screen=on_screen,
                     stream=settings.stream) as (window, player):
        for ms in times:
            player.advance_to(ms)
            settle(window)
            yield picture(window, settings.size)


def final_frame(window_class: WindowClass, paths: Sequence[Path], settings: VideoSettings,
                on_screen: bool) -> QImage:
    with race_window(window_class, paths, layout_size(settings.size), settings.theme,
                     graphs=settings.graphs, on_screen=on_screen,
                     stream=settings.stream) as (window, player):
        player.finish()
        settle(window)
        return picture(window, settings.size)


def rgb_array(image: QImage) -> np.ndarray:
    """The image's pixels as a height x width x 3 array (a copy: Qt owns the buffer)."""
    image = image.convertToFormat(QImage.Format.Format_RGB888)
    width, height, stride = image.width(), image.height(), image.bytesPerLine()
    rows = np.frombuffer(image.constBits(), np.uint8, count=stride * height)
    return rows.reshape(height, stride)[:, : width * 3].reshape(height, width, 3).copy()


# ---------------------------------------------------------------- writers


class AvWriter:
    """MP4 (H.264) or WebM (VP9) through PyAV."""

    def __init__(self, path: Path, suffix: str, settings: VideoSettings, _palette=None) -> None:
        try:
            import av
        except ModuleNotFoundError:
            raise SpecvizError("video export needs PyAV: pip install av") from None
        self._av = av
        self.path, self.settings = path, settings
        self.codec = pick_codec(suffix)
        self.format = suffix[1:]

    def __enter__(self) -> AvWriter:
        av = self._av
        try:
            self.container = av.open(str(self.path), mode="w", format=self.format)
        except av.FFmpegError as exc:
            raise OSError(str(exc)) from None
        stream = self.container.add_stream(self.codec, rate=Fraction(self.settings.fps)
                                           .limit_denominator(1001))
        stream.width, stream.height = self.settings.size
        stream.pix_fmt = "yuv420p"
        stream.options = CODEC_OPTIONS.get(self.codec, {})
        self.stream = stream
        return self

    def write(self, image: QImage) -> None:
        frame = self._av.VideoFrame.from_ndarray(rgb_array(image), format="rgb24")
        self._mux(self.stream.encode(frame))

    def _mux(self, packets) -> None:
        try:
            self.container.mux(packets)
        except self._av.FFmpegError as exc:  # a full disk, a file too large
            raise OSError(exc.strerror or str(exc)) from None

    def __exit__(self, kind, error, trace) -> None:
        try:
            if kind is None:
                self._mux(self.stream.encode())  # what the encoder still holds
        finally:
            try:
                self.container.close()
            except self._av.FFmpegError as exc:
                if kind is None:
                    raise OSError(exc.strerror or str(exc)) from None


def pick_codec(suffix: str) -> str:
    import av

    for name in CODECS[suffix]:
        try:
            av.codec.Codec(name, "w")
        except (av.codec.codec.UnknownCodecError, ValueError):
            continue
        return name
    raise SpecvizError(f"this PyAV build has no encoder for {suffix[1:].upper()}: "
                       f"try OUT.webm or OUT.gif")


class GifWriter:
    """A looping GIF: frames mapped to one palette without dithering (flat colours and text
    stay flat, and unchanged areas compress to nothing)."""

    def __init__(self, path: Path, suffix: str, settings: VideoSettings,
                 palette: QImage) -> None:
        from PIL import Image

        self._Image = Image
        self.path, self.settings = path, settings
        self.palette = Image.fromarray(rgb_array(palette)).quantize(
            colors=256, method=Image.Quantize.MEDIANCUT)
        self.frames: list = []

    def __enter__(self) -> GifWriter:
        return self

    def write(self, image: QImage) -> None:
        rgb = self._Image.fromarray(rgb_array(image))
        self.frames.append(rgb.quantize(palette=self.palette, dither=self._Image.Dither.NONE))

    def __exit__(self, kind, error, trace) -> None:
        if kind is not None or not self.frames:
            return
        first, *rest = self.frames
        first.save(self.path, format="GIF", save_all=True, append_images=rest, loop=0,
                   duration=round(1000 / self.settings.fps), disposal=1, optimize=False)
