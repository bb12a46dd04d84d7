"""`specviz doctor`: what this machine offers, what works, and what to install."""

from __future__ import annotations

import argparse
import json
import sys

from ...engines import doctor


def register(sub) -> None:
    p = sub.add_parser("doctor", help="what this machine offers and what works on it",
                       description="The CPU and its features, the backends' builds and "
                       "devices, each backend tried in a child process on smollm2-135m (kept "
                       "until its build changes), the models and cost profiles here, and the "
                       "command for what is missing.")
    p.add_argument("--json", action="store_true", help="print the facts as JSON")
    p.add_argument("--no-probe", action="store_true",
                   help="skip trying the backends (a few seconds to a minute)")
    p.add_argument("--refresh", action="store_true",
                   help="probe the backends again, where an earlier doctor's probes of the "
                   "same builds are kept")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    facts = doctor.gather(run_probes=not args.no_probe, say=say, refresh=args.refresh)
    print(json.dumps(facts, indent=1) if args.json else doctor.render(facts))
    return 0
