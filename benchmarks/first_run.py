"""A newcomer's first ten minutes, timed: the README's install and quick start in a fresh
virtualenv, with a fresh specviz home (no model, no profile), then the window.

Steps, each timed and checked:
1. `python -m venv`, then the README's install (torch first: `--torch-spec` names the wheel
   this machine has, by default the README's own alternative `torch==2.13.0`), then
   `pip install -e .` of this checkout;
2. `specviz doctor --no-probe` (what a newcomer runs next);
3. the README's quick-start command, read from the README itself so the two stay in step
   (it fetches the model and measures the cost profile the first time): its speedup line;
4. the same command again (model and profile now present);
5. the window: `specviz shot` of the first race under xvfb-run (time from start to a saved
   picture, an upper bound on time to the first window), where xvfb-run exists;
6. with `--train KIND`: `specviz train-heads --kind KIND` with every default (its time and
   the held-out acceptance of the head's first guess).

    python benchmarks/first_run.py [--keep DIR] [--json FILE] [--train eagle|medusa]

Nothing outside the temporary folder is touched (SPECVIZ_HOME points into it); pip's own
cache is used, as on a person's machine that installed anything before.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def quick_start_command() -> list[str]:
    """The command of the README's quick start (its first code block)."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Quick start"):]
    block = re.search(r"```sh\n(.+?)```", section, re.S)
    if not block:
        raise SystemExit("the README's quick start has no ```sh block")
    lines = [ln for ln in block.group(1).splitlines() if ln.startswith("specviz ")]
    if len(lines) != 1:
        raise SystemExit(f"the quick start should be one specviz command, found {lines}")
    return shlex.split(lines[0])


def timed(label: str, command: list[str], env: dict, cwd: Path = REPO,
          timeout: float = 1800) -> dict:
    print(f"== {label}: {shlex.join(command)}", file=sys.stderr, flush=True)
    began = time.monotonic()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)
    seconds = round(time.monotonic() - began, 1)
    print(f"   {seconds} s, exit {done.returncode}", file=sys.stderr, flush=True)
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n", file=sys.stderr)
    return {"seconds": seconds, "exit": done.returncode, "stdout": done.stdout,
            "stderr": done.stderr}


def speedup_of(stderr: str) -> float | None:
    found = re.findall(r"speedup ([0-9.]+)x", stderr)
    return float(found[-1]) if found else None


def first_guess(stdout: str) -> float | None:
    """Held-out acceptance of a trained head's first guess, from train-heads' table (EAGLE:
    depth 1 accepted; Medusa: head 1's top-1)."""
    found = re.search(r"^\s+1\s+(?:2\s+)?([0-9.]+)%", stdout, re.M)
    return float(found.group(1)) / 100 if found else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--torch-spec", default="torch==2.13.0",
                   help="what `pip install` is given for torch (default: %(default)s)")
    p.add_argument("--keep", type=Path, help="work in this folder and keep it")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--train", choices=("eagle", "medusa"),
                   help="also train heads of this kind with train-heads' defaults")
    args = p.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="specviz-first-run-"))
    work.mkdir(parents=True, exist_ok=True)
    venv, home = work / "venv", work / "home"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPECVIZ_", "VIRTUAL_ENV", "PYTHON"))}
    env.update(SPECVIZ_HOME=str(home), PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
           "--disable-pip-version-check"]
    steps: dict[str, dict] = {}
    try:
        steps["venv"] = timed("venv", [sys.executable, "-m", "venv", str(venv)], env)
        steps["torch"] = timed("install torch", [*pip, args.torch_spec], env)
        steps["install"] = timed("install specviz", [*pip, "-e", str(REPO)], env)
        steps["doctor"] = timed("doctor", ["specviz", "doctor", "--no-probe"], env)
        command = quick_start_command()
        steps["first"] = timed("quick start (first time)", command, env)
        steps["again"] = timed("quick start (again)", command, env)
        if shutil.which("xvfb-run"):
            prompt = REPO / "assets" / "prompts" / "code-edit-logging.txt"
            steps["window"] = timed("the window's first race (shot)", [
                "xvfb-run", "-a", "specviz", "shot", str(work / "first-race.png"),
                "--prompt-file", str(prompt), "--max-tokens", "256"], env)
        if args.train:
            steps["train"] = timed(f"train-heads --kind {args.train} (defaults)",
                                   ["specviz", "train-heads", "--kind", args.train], env)
    finally:
        figures = {name: {"seconds": s["seconds"], "exit": s["exit"]}
                   for name, s in steps.items()}
        for name in ("first", "again"):
            if name in steps:
                figures[name]["speedup"] = speedup_of(steps[name]["stderr"])
                figures[name]["last_lines"] = steps[name]["stderr"].strip().splitlines()[-3:]
        if "train" in steps:
            figures["train"]["first_guess"] = first_guess(steps["train"]["stdout"])
            figures["train"]["report"] = steps["train"]["stdout"].strip().splitlines()[:3]
        print(json.dumps(figures, indent=1))
        if args.json:
            args.json.write_text(json.dumps(figures, indent=1) + "\n")
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if all(s["exit"] == 0 for s in steps.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
