"""A model's first run with an empty specviz home, timed as a person waits: from the command
to its cost profile's start and end, to the first coloured token, to the speedup line; quiet
and beside a busy process (issue #83, points 2 and 4).

The model is copied into the fresh home first (the time from "the model is on disk"); with
`--fetch` the home starts empty and the run fetches it too. Runs of each condition alternate.

    python benchmarks/first_race.py --runs 3                      # the README's quick start
    python benchmarks/first_race.py --runs 2 --conditions quiet,busy
    python benchmarks/first_race.py --target qwen2.5-coder-1.5b --conditions quiet,busy \\
        -- --oracle prompt-lookup --k auto --max-tokens 16 \\
        --prompt-file assets/prompts/code-edit-logging.txt
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUSY = [sys.executable, "-c", "while True: pass"]
sys.path.insert(0, str(REPO / "benchmarks"))


def quick_start() -> list[str]:
    from first_run import quick_start_command

    return quick_start_command()[2:]  # without "specviz run"


def model_file(target: str) -> Path:
    from specviz.engines.models import resolve

    return resolve(target)


def one(args_run: list[str], target: str, busy: bool, fetch: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="specviz-first-") as home:
        models = Path(home) / "models"
        models.mkdir()
        if not fetch:
            src = model_file(target)
            shutil.copy2(src, models / src.name)
            verified = src.with_name(src.name + ".verified")
            if verified.exists():
                shutil.copy2(verified, models / verified.name)
        hog = subprocess.Popen(BUSY) if busy else None
        try:
            return _timed([sys.executable, "-m", "specviz", "run", *args_run],
                          {**os.environ, "SPECVIZ_HOME": home})
        finally:
            if hog:
                hog.kill()


def _timed(cmd: list[str], env: dict) -> dict:
    began = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    lines: list[tuple[float, str]] = []
    first_out: list[float] = []

    def errors() -> None:
        for raw in proc.stderr:
            lines.append((time.monotonic() - began, raw.decode(errors="replace").rstrip()))

    reader = threading.Thread(target=errors, daemon=True)
    reader.start()
    out = b""
    while chunk := proc.stdout.read1(4096):
        if not first_out and chunk.strip() and not chunk.startswith(b"{"):
            first_out.append(time.monotonic() - began)
        out += chunk
    proc.wait()
    reader.join()
    total = time.monotonic() - began
    return {"seconds": round(total, 1), "first_token_s": round(first_out[0], 1) if first_out
            else None, **_profile_span(lines, first_out[:1]), "last": _last(lines, out)}


def _profile_span(lines: list[tuple[float, str]], first_out: list[float]) -> dict:
    """From "measuring the cost profile" to the next thing the run said or wrote."""
    start = next((t for t, line in lines if "measuring the cost profile" in line), None)
    if start is None:
        return {"profile_s": 0.0}
    after = [t for t, line in lines if t > start and not re.search(r"cost profile of .*: \d+%",
                                                                   line)]
    end = min([*after[:1], *first_out], default=None)
    return {"profile_start_s": round(start, 1),
            "profile_s": round(end - start, 1) if end else None,
            "profile_note": next((line for t, line in lines if t > start
                                  and "cost profile" in line and "%" not in line), "")}


def _last(lines: list[tuple[float, str]], out: bytes) -> str:
    text = out.decode(errors="replace").strip()
    if text.startswith("{"):
        data = json.loads(text.splitlines()[-1])
        return f"{data.get('speedup')} {data.get('interval')} {data.get('verdict')}"
    speed = [line for _, line in lines if "speedup" in line or "tokens in" in line]
    return speed[-1][-160:] if speed else (lines[-1][1] if lines else "")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--conditions", default="quiet")
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--fetch", action="store_true", help="the home starts without the model")
    p.add_argument("--json", type=Path)
    p.add_argument("run", nargs="*", help="after --: the run's arguments (default: the "
                                         "README's quick start)")
    args = p.parse_args()
    run_args = args.run or quick_start()
    if args.target != "smollm2-135m" and "--target" not in run_args:
        run_args = ["--target", args.target, *run_args]
    results = []
    for _ in range(args.runs):
        for condition in args.conditions.split(","):
            r = {"condition": condition, "load": os.getloadavg()[0],
                 **one(run_args, args.target, condition == "busy", args.fetch)}
            results.append(r)
            print(json.dumps(r), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
