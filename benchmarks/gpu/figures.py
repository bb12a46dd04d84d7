"""The figures of issue #45, as a list of commands with a time cap each (gpu_run.py figures).

Most valuable first: the whole list must fit one 10-minute call on the GPU, and a step that
would overrun the call's budget is cut short (or skipped) so the later ones still get a turn.
Every step writes into the results folder, which gpu_run.py archives after each step.

Only smollm2-135m travels, so:
- `draft` and `tree` draft with smollm2 itself ("self-draft"): every guess is accepted, which
  measures the machinery's cost on this device, not a realistic pair's speedup;
- EAGLE and Medusa run with the heads trained here (`pack.py --heads`: a third call), where
  they travelled;
- early-exit runs on transformers only (llama.cpp cannot stop after a layer);
- larger targets are profiled as random-weight models of their shape (shapes.py): a batch's
  cost does not depend on the weights' values.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

TARGET = "smollm2-135m"
# Plain decoding's figures time a prompt whose answer is long (code-edit-scale's ended after 30
# tokens compiled on the H200: too few to time).
LONG_ANSWER = "assets/prompts/code-edit-logging.txt"
PROMPTS = Path("benchmarks/prompts")
SHOT_PROMPT = "assets/prompts/code-edit-scale.txt"
SPECULATORS = "none,prompt-lookup,ngram,suffix"
LEFT_OUT = {
    "early-exit on llama": "llama.cpp cannot exit after a layer (transformers only)",
}


@dataclass
class Step:
    name: str
    commands: list[list[str]]  # run in turn; "{results}" is replaced by the results folder
    cap_s: int  # the longest this step may take on the GPU
    needs: tuple[str, ...] = ()  # "model", "llama" (a llama.cpp build), "qt"
    note: str = ""
    stdout_to: str | None = None  # file (in results) that receives the first command's stdout
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Sizes:
    """How much work: the GPU's figures, or a quick rehearsal on the CPU."""

    code_limit: int
    spec_limit: int
    code_tokens: int
    spec_tokens: int
    shot_tokens: int
    profile: tuple[str, ...]  # extra `specviz profile` arguments
    shapes: tuple[str, ...]  # shapes.py's shapes profiled with random weights, smallest first
    rounds: int  # interleaved rounds of the compiled path's comparisons


GPU = Sizes(code_limit=5, spec_limit=2, code_tokens=256, spec_tokens=128, shot_tokens=200,
            profile=(), shapes=("qwen2.5-1.5b", "llama3.1-8b"), rounds=3)
QUICK = Sizes(code_limit=1, spec_limit=1, code_tokens=32, spec_tokens=16, shot_tokens=24,
              profile=("--batches", "1,2,4,8", "--contexts", "128", "--repeats", "1"),
              shapes=("tiny",), rounds=2)
TOKENIZER = "{home}/models/SmolLM2-135M-Instruct.Q4_1.gguf"  # smollm2's, for shapes.py


def specviz(*args: str) -> list[str]:
    return [sys.executable, "-m", "specviz", *args]


def model_args(backend: str, device: str) -> list[str]:
    return ["--target", TARGET, "--backend", backend, "--device", device, "--no-fetch"]


def bench(backend: str, device: str, prompts: str, limit: int, tokens: int, oracles: str,
          tag: str, extra: tuple[str, ...] = ()) -> list[str]:
    out = f"{{results}}/bench-{backend}-{tag}"
    return specviz("bench", *model_args(backend, device), "--questions",
                   str(PROMPTS / f"{prompts}.jsonl"), "--limit", str(limit), "--max-tokens",
                   str(tokens), "--oracles", oracles, "--k", "auto", *extra,
                   "--json", out + ".json", "--markdown", out + ".md")


def shape_steps(backend: str, shape: str, device: str, sizes: Sizes) -> list[Step]:
    """Write a random-weight model of `shape` (not into the results: it is gigabytes), then
    profile it."""
    fmt, path = (("gguf", f"{{home}}/shapes/{shape}.gguf") if backend == "llama"
                 else ("hf", f"{{home}}/shapes/{shape}-hf"))
    write = [sys.executable, "benchmarks/gpu/shapes.py", fmt, "--shape", shape,
             "--tokenizer-from", TOKENIZER, "--out", path, "--device", device]
    profile = specviz("profile", "--target", path, "--backend", backend, "--device", device,
                      "--json", *sizes.profile)
    tag = f"{backend}-{shape}"
    return [Step(f"write-{tag}", [write], cap_s=120, needs=("model",),
                 note="random weights of a realistic shape"),
            Step(f"profile-{tag}", [profile], cap_s=120,
                 needs=("model", "llama") if backend == "llama" else ("model",),
                 stdout_to=f"profile-{tag}.json", note="a realistic shape's forward times")]


def steps(device: str, sizes: Sizes) -> list[Step]:
    """Issue #64's compiled path first (what no session has measured yet), then llama.cpp's
    figures (seconds each there), then transformers' (minutes); what two H200 sessions
    measured already (the shapes' profiles, generate()) last."""
    s = sizes
    out = [*compiled_steps(device, s), *padded_steps(device, s)]
    out.append(profile_step("llama", device, s))
    out.append(Step(
        "shot",
        [specviz("shot", "{results}/shot.png", "--prompt-file", SHOT_PROMPT, "--oracles",
                 "none,prompt-lookup,ngram", "--k", "auto", "--max-tokens",
                 str(s.shot_tokens), "--size", "1600x1000", *model_args("llama", device))],
        cap_s=90, needs=("model", "llama", "qt"), env={"QT_QPA_PLATFORM": "offscreen"},
        note="three lanes, auto K, the window offscreen"))
    out.append(traces_step("llama", device, s))
    out.append(Step(
        "bench-llama-selfdraft",
        [bench("llama", device, "code_edit_dev", min(s.code_limit, 2), s.code_tokens,
               "none,draft,tree", "selfdraft", ("--draft", TARGET))],
        cap_s=90, needs=("model", "llama"), note="draft = target: the machinery's cost"))
    out.append(profile_step("transformers", device, s))
    out.append(why_slow_step(device, s))
    out.append(bench_step("transformers", device, "code", s))
    out.append(traces_step("transformers", device, s))
    out.append(Step(
        "bench-transformers-heads",
        [bench("transformers", device, "code_edit_dev", s.code_limit, s.code_tokens,
               "none,eagle,medusa", "heads")],
        cap_s=150, needs=("model", "heads"),
        note="EAGLE and Medusa with the heads trained on the CPU here"))
    out.append(bench_step("transformers", device, "spec", s))
    out.append(Step(
        "bench-transformers-extra",
        [bench("transformers", device, "code_edit_dev", min(s.code_limit, 2), s.code_tokens,
               "none,early-exit,draft,tree", "extra", ("--draft", TARGET))],
        cap_s=120, needs=("model",), note="early-exit; draft = target"))
    for shape in s.shapes:
        out += shape_steps("llama", shape, device, s)
        out += shape_steps("transformers", shape, device, s)
    out.append(Step(
        "hf-generate",
        [[sys.executable, "benchmarks/peers_transformers.py", "--questions",
          str(PROMPTS / "code_edit_dev.jsonl"), "--limit", str(min(s.code_limit, 2)),
          "--target", TARGET, "--draft", TARGET, "--methods", "none,prompt-lookup,draft",
          "--k", "4", "--max-tokens", str(s.code_tokens), "--device", device,
          "--markdown", "{results}/hf-generate.md", "--json", "{results}/hf-generate.json"]],
        cap_s=120, needs=("model",),
        note="the same work through transformers' generate(): plain, prompt lookup, assisted"))
    return out


def padded_steps(device: str, sizes: Sizes) -> list[Step]:
    """Issue #64, point 4: llama.cpp's verifications padded to fixed widths (on a GPU by
    default: engines/backends/llama_widths.py) against unpadded, code edits and prose, each
    pair back to back; each measures its own cost profile (stored apart)."""
    out = []
    for prompts in ("code", "spec"):
        for padded in (False, True):
            step = bench_step("llama", device, prompts, sizes,
                              tag=f"{prompts}-{'padded' if padded else 'unpadded'}")
            step.env = {"SPECVIZ_LLAMA_PAD": "on" if padded else "off"}
            out.append(step)
    return out


def traces_step(backend: str, device: str, sizes: Sizes) -> Step:
    """The window's three lanes as traces (`specviz shot --replay` makes the shot anywhere):
    on transformers, where a batch costs what a token does, auto K drafting long."""
    folder = "traces" if backend == "llama" else f"traces-{backend}"
    return Step(
        "traces" if backend == "llama" else f"traces-{backend}",
        [specviz("run", "--prompt-file", SHOT_PROMPT, "--oracle", oracle, "--k", "auto",
                 "--max-tokens", str(sizes.shot_tokens), *model_args(backend, device),
                 "--trace", f"{{results}}/{folder}/{oracle}.jsonl", "--json")
         for oracle in ("none", "prompt-lookup", "ngram")],
        cap_s=60 if backend == "llama" else 90,
        needs=("model", "llama") if backend == "llama" else ("model",),
        note="the window's lanes as traces, for `specviz shot --replay`")


def profile_step(backend: str, device: str, sizes: Sizes) -> Step:
    return Step(f"profile-{backend}",
                [specviz("profile", *model_args(backend, device), "--json", *sizes.profile)],
                cap_s=90, needs=("model", "llama") if backend == "llama" else ("model",),
                stdout_to=f"profile-{backend}.json",
                note="forward time per batch size: K+1 tokens against one")


def bench_step(backend: str, device: str, prompts: str, sizes: Sizes,
               tag: str | None = None) -> Step:
    """Code edits, or Spec-Bench prose; transformers decodes a token in ~20 ms on a GPU (a
    Python call per layer), several times llama.cpp's: half the prose questions there."""
    s = sizes
    if prompts == "code":
        work = ("code_edit_dev", s.code_limit, s.code_tokens)
    else:
        limit = s.spec_limit if backend == "llama" else max(1, s.spec_limit // 2)
        work = ("spec_bench_dev", limit, s.spec_tokens)
    tag = tag or prompts
    return Step(f"bench-{backend}-{tag}",
                [bench(backend, device, *work, SPECULATORS, tag)],
                cap_s=120 if backend == "llama" else 150,
                needs=("model", "llama") if backend == "llama" else ("model",))


def why_slow_step(device: str, sizes: Sizes) -> Step:
    """On the H200 the bench's plain transformers steps took 35-63 ms where the profile's
    forward and the generate() comparison's plain run took 18-19 ms: the same plain decoding
    through `run` and through `bench`, each under cProfile with the collector's pauses
    counted (why_slow.py), to see where the rest goes."""
    why = [sys.executable, "benchmarks/gpu/why_slow.py"]
    tokens = str(sizes.spec_tokens)
    return Step("why-transformers-slow", [
        [*why, "{results}/run-plain", "-m", "specviz", "run", "--prompt-file", SHOT_PROMPT,
         "--oracle", "none", "--max-tokens", tokens, *model_args("transformers", device),
         "--json"],
        [*why, "{results}/bench-plain", "-m", "specviz", "bench",
         *model_args("transformers", device), "--questions",
         str(PROMPTS / "code_edit_dev.jsonl"), "--limit", "2", "--max-tokens", tokens,
         "--oracles", "none,ngram", "--k", "auto", "--json", "{results}/bench-plain.json"]],
        cap_s=120, needs=("model",), note="plain decoding through run and bench, profiled")


def compiled_steps(device: str, sizes: Sizes) -> list[Step]:
    """Issue #64, point 3: the transformers backend compiled (a static cache, the widths'
    graphs captured as CUDA graphs) on the card. Its CUDA graphs against eager on the tiny
    model first (are the figures after it lossless?); plain decoding compiled against eager
    and llama.cpp; against transformers' own generate() at its best; a 9-token verification
    against one token on an 8B shape, against the memory's limit; then the oracles' ratios over
    the compiled baseline."""
    s = sizes
    py = sys.executable
    return [
        Step("test-compiled",
             [[py, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "-o", "addopts=",
               "-m", "gpu", "tests/test_hf_compiled.py",
               "--junitxml={results}/tests-compiled.xml"]],
             cap_s=150, env={"SPECVIZ_TEST_DEVICE": device},
             note="CUDA graphs against eager: chains, padding, rollback, tree, hidden rows"),
        Step("compiled-plain",
             [[py, "benchmarks/compiled_plain.py", "--target", TARGET, "--device", device,
               "--ways", "eager,compiled,compiled-sdpa,llama", "--rounds", str(s.rounds),
               "--max-tokens", str(s.code_tokens), "--prompt-file", LONG_ANSWER,
               "--json", "{results}/compiled-plain.json",
               "--markdown", "{results}/compiled-plain.md"]],
             cap_s=180, needs=("model",),
             note="plain decoding: compiled, eager and llama.cpp, interleaved (llama.cpp "
                  "left out where it is not built)"),
        Step("hf-generate-static",
             [[py, "benchmarks/gpu/hf_generate_peer.py", "--target", TARGET, "--device",
               device, "--rounds", str(s.rounds), "--max-tokens", str(s.code_tokens),
               "--prompt-file", LONG_ANSWER,
               "--json", "{results}/hf-generate-static.json",
               "--markdown", "{results}/hf-generate-static.md"]],
             cap_s=180, needs=("model",),
             note="generate() with a static cache and torch.compile, against specviz compiled"),
        Step(f"verify-width-{s.shapes[-1]}",
             [[py, "benchmarks/gpu/verify_width.py", "--shape", s.shapes[-1], "--device",
               device, "--dtype", "bfloat16" if device == "cuda" else "float32",
               "--widths", "1,9", "--repeats", str(5 * s.rounds),
               "--json", f"{{results}}/verify-width-{s.shapes[-1]}.json"]],
             cap_s=300, note="9 tokens against 1, compiled and eager, against bytes/bandwidth"),
        Step("bench-transformers-compiled-code",
             [bench("transformers", device, "code_edit_dev", s.code_limit, s.code_tokens,
                    SPECULATORS, "compiled-code", ("--compile", "on"))],
             cap_s=240, needs=("model",), note="the oracles' ratios over the compiled baseline"),
        Step("bench-transformers-compiled-spec",
             [bench("transformers", device, "spec_bench_dev", s.spec_limit, s.spec_tokens,
                    SPECULATORS, "compiled-spec", ("--compile", "on"))],
             cap_s=180, needs=("model",), note="the same on Spec-Bench prose"),
    ]
