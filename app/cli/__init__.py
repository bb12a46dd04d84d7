"""The command line: `specviz` and its subcommands, printing on a terminal.
"""
