"""How responsive the window stays while its lanes generate.

Runs the real window on a live run, built, configured and awaited the way `specviz shot` does it
(throw-away settings, no dialogs), and measures on the GUI thread, from the moment the lanes
start generating until the run ends:

- stalls: a 5 ms QTimer heartbeat records when it ticks; a gap longer than 5 ms is time the
  GUI thread could not answer. Reports the longest stall (longest gap minus 5 ms), the 99th
  percentile gap and how many gaps exceeded 50 ms (goal: no stall over 50 ms). The GUI
  thread's CPU time within the longest gap tells its own work (close to the gap) from waiting
  for the GIL or a core (close to 0);
- paint rate: an event filter counts paint events on the lanes' token views and the graphs;
- memory: the window's resident set size before the run, its peak while generating (sampled
  every 100 ms) and at the end, its max RSS (getrusage), and the peak of the engine process,
  where the models are loaded (and stay for the next run).

With --headless, the same lanes then run again without the window (built by the same run
builder, stepped in turn as the engine process steps them) and each lane's tokens/s in the
window is printed beside its headless figure: on a loaded machine only that ratio, taken in
one run, compares.

With --anatomy, the Anatomy tab is in front and plays the newest step of the second lane
(re-fed every ANATOMY_EVERY_MS) while the race runs: what a talk shows beside a live race.

Traces are recorded as in any run. Works with QT_QPA_PLATFORM=offscreen and under xvfb-run:

    QT_QPA_PLATFORM=offscreen python benchmarks/gui_responsiveness.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, QSettings, Qt, QTimer

from specviz.app.cli.options import k_or_auto
from specviz.app.cli.shot import _live, lane_configs
from specviz.app.main_window import MainWindow
from specviz.app.qt_app import freeze_heap, make_app
from specviz.app.state.settings import AppSettings
from specviz.engines.backends import BACKENDS

HEARTBEAT_MS = 5
STALL_LIMIT_MS = 50.0
RSS_SAMPLE_MS = 100
ANATOMY_EVERY_MS = 2000
DEFAULT_PROMPT = Path(__file__).resolve().parent.parent / "assets/prompts/code-edit-scale.txt"


def rss_mib(pid: int | str = "self") -> float | None:
    """A process's resident set size now (Linux /proc), in MiB."""
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def max_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else 0.0


class PaintCounter(QObject):
    """Counts paint events of the widgets it is installed on, by kind."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}
        self.widgets: dict[str, int] = {}
        self._kinds: dict[QObject, str] = {}
        self.active = False

    def watch(self, widget: QObject, kind: str) -> None:
        self._kinds[widget] = kind
        self.counts.setdefault(kind, 0)
        self.widgets[kind] = self.widgets.get(kind, 0) + 1
        widget.installEventFilter(self)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        if self.active and event.type() == QEvent.Type.Paint:
            kind = self._kinds.get(obj)
            if kind is not None:
                self.counts[kind] += 1
        return False


class Probe(QObject):
    """Heartbeat, paint counter and RSS sampler, armed while the lanes generate."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.ticks: list[tuple[float, float]] = []  # (wall, GUI-thread CPU) seconds
        self.paints = PaintCounter()
        self.rss_before = rss_mib()
        self.rss_peak = self.rss_before
        self.engine_peak: float | None = None  # the engine process, where the models live
        self.started = self.ended = 0.0
        self._heartbeat = QTimer(self, interval=HEARTBEAT_MS, timerType=Qt.TimerType.PreciseTimer)
        self._heartbeat.timeout.connect(self._tick)
        self._sampler = QTimer(self, interval=RSS_SAMPLE_MS)
        self._sampler.timeout.connect(self._sample_rss)
        self._anatomy = QTimer(self, interval=ANATOMY_EVERY_MS)
        self._anatomy.timeout.connect(self._play_anatomy)
        self.anatomy = False  # --anatomy: the Anatomy tab plays beside the race
        window.runner.statusChanged.connect(self._on_status)

    def _play_anatomy(self) -> None:
        """The newest step of the second lane (the first that speculates), played."""
        board = self.window.board
        lanes = list(board.lanes.values())
        lane = lanes[min(1, len(lanes) - 1)]
        steps = board.state(lane.lane_id).steps
        if steps:
            dock = self.window.anatomy_dock
            dock.show_step(board, lane, len(steps) - 1)
            dock.view.set_playing(True)

    def _on_status(self, message: str, _busy: bool) -> None:
        if message == "running" and not self.started:  # models loaded, lanes start stepping
            self.start()

    def _tick(self) -> None:
        self.ticks.append((time.perf_counter(), time.thread_time()))

    def start(self) -> None:
        for lane in self.window.board.lanes.values():
            self.paints.watch(lane.view.editor.viewport(), "token views")
        for plot in self.window.graphs.plots.values():
            self.paints.watch(plot.viewport(), "graphs")
        self.paints.active = True
        self.ticks = []
        self._tick()
        self.started = self.ticks[0][0]
        self._heartbeat.start()
        self._sampler.start()
        if self.anatomy:
            self.window.anatomy_dock.show()
            self.window.anatomy_dock.raise_()
            self.paints.watch(self.window.anatomy_dock.view, "anatomy")
            self._anatomy.start()

    def stop(self) -> None:
        if not self.started:
            return
        self._tick()
        self.ended = self.ticks[-1][0]
        self._heartbeat.stop()
        self._sampler.stop()
        self._anatomy.stop()
        self.paints.active = False
        self._sample_rss()

    def _sample_rss(self) -> None:
        now = rss_mib()
        if now is not None and (self.rss_peak is None or now > self.rss_peak):
            self.rss_peak = now
        engine = self.window.runner.engine
        used = rss_mib(engine.pid) if engine is not None and engine.pid else None
        if used is not None and (self.engine_peak is None or used > self.engine_peak):
            self.engine_peak = used

    def report(self) -> dict:
        seconds = max(self.ended - self.started, 1e-9)
        gaps = [((b - a) * 1000, (cb - ca) * 1000)
                for (a, ca), (b, cb) in zip(self.ticks, self.ticks[1:])]
        walls = [wall for wall, _cpu in gaps]
        longest, longest_cpu = max(gaps, default=(0.0, 0.0))
        return {
            "generating_s": round(seconds, 3),
            "heartbeat": {
                "interval_ms": HEARTBEAT_MS,
                "ticks": len(gaps),
                "max_stall_ms": round(max(longest - HEARTBEAT_MS, 0.0), 2),
                "max_stall_gui_cpu_ms": round(longest_cpu, 2),
                "p99_gap_ms": round(percentile(walls, 99), 2),
                "gaps_over_50ms": sum(wall > STALL_LIMIT_MS for wall in walls),
                "gui_cpu_share": round(sum(cpu for _wall, cpu in gaps) / 1000 / seconds, 3),
            },
            "paints": {kind: {"widgets": self.paints.widgets[kind], "paints": count,
                              "per_s": round(count / seconds, 1)}
                       for kind, count in self.paints.counts.items()},
            "memory_mib": {"rss_before_run": _round(self.rss_before),
                           "rss_peak_generating": _round(self.rss_peak),
                           "rss_end": _round(rss_mib()),
                           "max_rss": _round(max_rss_mib()),
                           "engine_rss_peak": _round(self.engine_peak)},
            "lanes": [{"lane": lane_id, "oracle": lane.oracle_name(),
                       "tokens": lane.view.token_count, "message": lane.message.text(),
                       "tok_per_s": round(self.window.board.model.figures(lane_id)["tok_per_s"], 2)}
                      for lane_id, lane in self.window.board.lanes.items()],
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def measure(args: argparse.Namespace) -> tuple[int, dict]:
    app, loop = make_app()
    with tempfile.TemporaryDirectory() as tmp, loop:
        store = QSettings(str(Path(tmp) / "bench.ini"), QSettings.Format.IniFormat)
        window = MainWindow(AppSettings(store), interactive=False)
        window.resize(*args.size)
        window.show()
        app.processEvents()
        freeze_heap()
        probe = Probe(window)
        probe.anatomy = args.anatomy

        async def run() -> int:
            try:
                return await _live(window, args)
            finally:
                probe.stop()

        status = loop.run_until_complete(run())
        result = probe.report()
        window.close()
    return status, result


def headless(args: argparse.Namespace) -> dict[str, float]:
    """Each lane's tokens/s with no window: the window's lanes, stepped in turn, no Qt."""
    from specviz.app.cli.cmd_run import read_prompt
    from specviz.app.state.run_setup import gui_threads
    from specviz.engines import events as ev
    from specviz.engines.host.model_pool import ModelPool
    from specviz.engines.host.run_builder import build_lane
    from specviz.engines.host.run_spec import ModelChoice, RunRequest

    prompt = read_prompt(argparse.Namespace(prompt=None, prompt_file=args.prompt_file))
    model = ModelChoice(args.target, args.backend, args.device, args.threads or gui_threads())
    request = RunRequest(prompt, model, args.max_tokens, args.temperature)
    pool = ModelPool()  # lanes of one model share its weights, as in the engine process
    jobs = [build_lane(f"{i}", lane, request, pool)
            for i, lane in enumerate(lane_configs(args))]  # the window's lanes, as shot makes them

    runs, rates = {i: job.steps() for i, job in enumerate(jobs)}, {}
    while runs:
        for i in list(runs):
            event = next(runs[i])
            if isinstance(event, ev.SummaryEvent):
                rates[f"{i}:{jobs[i].header['oracle']}"] = round(event.tok_per_s, 2)
                jobs[i].close()
                del runs[i]
    return dict(sorted(rates.items(), key=lambda item: int(item[0].split(":")[0])))


def print_report(args: argparse.Namespace, result: dict) -> None:
    beat, mem = result["heartbeat"], result["memory_mib"]
    print(f"target {args.target}, draft {args.draft}, lanes {args.oracles}, K={args.k}, "
          f"max {args.max_tokens} tokens, threads {args.threads or 'all'}")
    print(f"generating for {result['generating_s']:.2f} s")
    print(f"heartbeat every {HEARTBEAT_MS} ms: {beat['ticks']} ticks, longest stall "
          f"{beat['max_stall_ms']:.1f} ms (GUI thread on CPU {beat['max_stall_gui_cpu_ms']:.1f} "
          f"ms of it), p99 gap {beat['p99_gap_ms']:.1f} ms, gaps over {STALL_LIMIT_MS:.0f} ms: "
          f"{beat['gaps_over_50ms']}; GUI thread busy {beat['gui_cpu_share']:.0%} of the time")
    for kind, paints in result["paints"].items():
        print(f"paints, {kind} ({paints['widgets']}): {paints['paints']} "
              f"= {paints['per_s']:.1f}/s")
    print(f"memory (MiB): window RSS before run {mem['rss_before_run']}, peak while "
          f"generating {mem['rss_peak_generating']}, at end {mem['rss_end']}; max RSS "
          f"{mem['max_rss']}; engine process peak {mem['engine_rss_peak']}")
    alone = list(result.get("headless", {}).values())
    for i, lane in enumerate(result["lanes"]):
        line = (f"{lane['lane']} {lane['oracle']}: {lane['tokens']} tokens, "
                f"{lane['tok_per_s']:.1f} tok/s in the window")
        if i < len(alone) and alone[i]:
            line += f", {alone[i]:.1f} headless (ratio {lane['tok_per_s'] / alone[i]:.2f})"
        print(f"{line} ({lane['message']})")
    verdict = "PASS" if beat["max_stall_ms"] <= STALL_LIMIT_MS else "FAIL"
    print(f"{verdict}: goal is no stall over {STALL_LIMIT_MS:.0f} ms")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="qwen2.5-coder-1.5b")
    p.add_argument("--draft", default="qwen2.5-coder-0.5b")
    p.add_argument("--oracles", default="none,prompt-lookup,draft")
    p.add_argument("--k", type=k_or_auto, default=4)
    p.add_argument("--max-tokens", type=int, default=2000)
    p.add_argument("--prompt-file", type=Path, default=DEFAULT_PROMPT)
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    p.add_argument("--backend", choices=BACKENDS, default="llama")
    p.add_argument("--device", default=None, help="cpu, cuda, mps (default: best available)")
    p.add_argument("--size", type=int, nargs=2, default=(1600, 1000), metavar=("W", "H"))
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results here")
    p.add_argument("--anatomy", action="store_true",
                   help="the Anatomy tab in front, playing the newest step beside the race")
    p.add_argument("--headless", action="store_true",
                   help="then run the same lanes without the window and compare tokens/s")
    args = p.parse_args()
    args.temperature = 0.0  # what shot's run reads
    args.server, args.medusa_heads, args.eagle_head = [], None, None
    return args


def main() -> int:
    args = parse_args()
    status, result = measure(args)
    if args.headless:
        result["headless"] = headless(args)
    print_report(args, result)
    if args.json:
        config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                  if k != "json"}
        args.json.write_text(json.dumps({"config": config, **result}, indent=2) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
