"""An argparse parser whose errors are one line, as every other specviz error is: argparse
prints the whole usage (27 lines for `run`) before its message; this says the message and
where the options are listed, and exits 2."""

from __future__ import annotations

import argparse
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """Used for the root parser and, as `parser_class`, for every subcommand's."""

    def error(self, message: str) -> NoReturn:
        line = " ".join(message.split())
        self.exit(2, f"specviz: {line} (see {self.prog} --help)\n")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but options no parser knows are named by the subcommand's parser
        (its --help lists what it takes) instead of the root's."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            _innermost(self, parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def _innermost(parser: argparse.ArgumentParser, parsed: argparse.Namespace):
    """The parser of the deepest subcommand `parsed` chose."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
            if chosen is not None:
                return _innermost(chosen, parsed)
    return parser

