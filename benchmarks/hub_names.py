"""A pair named by Hub names, fetched and run from the command line, timed.

By default the Hub is the test suite's stand-in (tests/hub_server.py) on 127.0.0.1, serving the
registry's GGUFs found in this machine's specviz cache under their official repositories' names
(only those files: the real repositories hold more quants); with `--endpoint URL` (say
https://huggingface.co) the real Hub is asked and nothing is served here. Either way the Hub
cache is a fresh temporary folder, so the fetch is timed from nothing.

    python benchmarks/hub_names.py [--endpoint URL] [--json FILE]
        [--target Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M]
        [--draft Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q4_K_M]
        [--prompt-file assets/prompts/code-edit-logging.txt] [--max-tokens 160]

Prints, and writes with --json: seconds to fetch each model (`specviz models pull`), and the
run's speedup against plain decoding, accepted tokens a step and whether the texts are identical.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specviz.engines.models import is_present, load_registry, model_path  # noqa: E402


def stand_in(names: list[str]):
    """The stand-in Hub serving the registry files those names need, from the local cache."""
    from tests.hub_server import HubServer, Repo

    repos = {}
    for spec in load_registry().values():
        if any(name.startswith(spec.hf.repo) for name in names):
            if not is_present(spec):
                sys.exit(f"{spec.name} is not in the specviz cache: `specviz models pull "
                         f"{spec.name}` first (or pass --endpoint)")
            repos[spec.hf.repo] = Repo({spec.hf.filename: model_path(spec).read_bytes(),
                                        "README.md": b"# stand-in\n"})
    return HubServer(repos)


def specviz(*args: str, env: dict) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "specviz"]
    return subprocess.run([*command, *args], env=env,
                          capture_output=True, text=True, cwd=REPO)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--endpoint", default=None, help="a real Hub (default: the stand-in)")
    parser.add_argument("--target", default="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M")
    parser.add_argument("--draft", default="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q4_K_M")
    parser.add_argument("--prompt-file", default="assets/prompts/code-edit-logging.txt")
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    names = [args.target, args.draft]
    server = contextlib.nullcontext() if args.endpoint else stand_in(names)
    with server as hub, tempfile.TemporaryDirectory() as cache:
        endpoint = args.endpoint or hub.url
        env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HUB_CACHE": cache,
               "SPECVIZ_NO_FETCH": "1"}
        result = {"endpoint": "stand-in on 127.0.0.1" if not args.endpoint else endpoint,
                  "target": args.target, "draft": args.draft, "fetch_s": {}}
        for name in names:
            started = time.perf_counter()
            pulled = specviz("models", "pull", name, env=env)
            if pulled.returncode != 0:
                sys.exit(pulled.stderr.strip())
            result["fetch_s"][name] = round(time.perf_counter() - started, 1)
        run = specviz("run", "--target", args.target, "--oracle", "draft", "--draft", args.draft,
                      "--k", "auto", "--baseline", "--json", "--prompt-file", args.prompt_file,
                      "--max-tokens", str(args.max_tokens), env=env)
        if run.returncode != 0:
            sys.exit(run.stderr.strip())
    summary = json.loads(run.stdout)
    keys = ("speedup", "steps", "proposed", "accepted", "acceptance_rate", "mean_accepted_tokens",
            "identical_to_baseline", "backend")
    result.update({k: summary.get(k) for k in keys})
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
