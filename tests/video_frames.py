"""Reading back what an export wrote: a video's frames, a GIF's frames and their times."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
from PIL import Image


def decoded(path: Path) -> list[np.ndarray]:
    """Every frame of a video, as RGB arrays."""
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


@dataclass(frozen=True)
class Gif:
    size: tuple[int, int]
    loop: int | None  # 0: forever; None: the GIF does not loop
    durations: tuple[int, ...]  # each frame's time on screen, in ms


def gif_frames(path: Path) -> Gif:
    with Image.open(path) as gif:
        size, loop = gif.size, gif.info.get("loop")  # the first frame's (seeking moves on)
        durations = []
        for index in range(gif.n_frames):
            gif.seek(index)
            durations.append(gif.info["duration"])
        return Gif(size, loop, tuple(durations))
