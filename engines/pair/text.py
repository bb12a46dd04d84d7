"""A pair report as a person reads it, from its dict form: what `specviz pair` prints and
what the window shows behind a lane's one-line verdict (the engine process sends the dict)."""

from __future__ import annotations


def render(report: dict) -> str:
    """Tokenizers item by item, acceptance, the speedup by K, the verdict."""
    vocab = report["vocab"]
    lines = [f"target {report['target']}, draft {report['draft']}", "", "tokenizers:"]
    width = max((len(i["name"]) for i in vocab["items"]), default=0)
    for item in vocab["items"]:
        mark = "ok" if item["ok"] else "DIFFERS"
        same = item["target"] == item["draft"]
        values = item["target"] if same else f"{item['target']} | {item['draft']}"
        note = f" ({item['note']})" if item["note"] else ""
        lines.append(f"  {item['name'].ljust(width)}  {mark:7}  {values}{note}")
    lines.append(f"  -> {vocab['verdict']}: {vocab['reason']}")
    if report["predictions"]:
        lines += ["", _acceptance_line(report), "by draft position: " + " ".join(
            "-" if a is None else f"{a:.2f}" for a in report["by_position"][:8]), "",
            "K  tokens/step  speedup  break-even acceptance"]
        for p in report["predictions"]:
            even = "never pays" if p["break_even"] is None else f"{p['break_even']:.2f}"
            best = "  <- best" if p["k"] == report["best_k"] else ""
            lines.append(f"{p['k']:<2} {p['tokens_per_step']:11.2f}  {p['speedup']:6.2f}x  "
                         f"{even}{best}")
        costs = report["costs"]
        lines.append(f"(costs: the {costs.get('profile')} profile, scaled to forwards timed "
                     f"now; a plain step {costs.get('plain_step_ms')} ms, a draft token "
                     f"{costs.get('draft_ms')} ms; {report['note']})")
    lines += ["", f"verdict: {report['verdict']}"]
    return "\n".join(lines)


def _acceptance_line(report: dict) -> str:
    line = (f"acceptance over {report['answer_tokens']} tokens of {report['prompts']} answers: "
            f"greedy agreement {report['greedy_agreement']:.0%}")
    if report["alpha"] is not None:
        line += f", alpha {report['alpha']:.2f} at temperature {report['temperature']:g}"
    return line
