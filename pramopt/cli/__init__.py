"""The ``pramopt`` command line: design, release, assess, baseline, frontier, estimate, sensitivity.

One module per command, each with ``add_parser(subparsers)`` and ``run(args)``; a new command
is one new module and one entry in :data:`COMMANDS`.

Exit codes: 0 on success, 1 for a design that failed (its status is not ``success``, or a
spec's expected figures were missed under ``--check``), 2 for bad input (the reason on stderr,
no traceback), 130 when interrupted (Ctrl-C); nothing partial is ever written, because every
file is written to a temporary name and renamed (a design folder is built next to its target).
"""
from __future__ import annotations

import argparse
import importlib
import sys

from ..errors import PramoptError
from ._common import PROG, formatter

__all__ = ["main", "build_parser", "COMMANDS"]

#: The commands, in the order ``pramopt --help`` lists them (module names in this package).
COMMANDS = ("design", "release", "assess", "baseline", "frontier", "estimate", "sensitivity")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``pramopt`` command."""
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=formatter,
        description="Optimal PRAM matrices under the C1 disclosure-risk bound of Cator, Hensbergen & Rozenholc.",
        epilog="Run 'pramopt COMMAND --help' for the options and an example of each command.\n"
               "Exit codes: 0 success, 1 failed design, 2 bad input, 130 interrupted.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").add_parser(sub)
    return parser


def main(argv=None) -> int:
    """Entry point of the ``pramopt`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return int(e.code or 0)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing was written.", file=sys.stderr)
        return 130
    except (PramoptError, OSError) as e:
        print(f"{PROG} {args.command}: error: {_in_flags(str(e), parser, args)}", file=sys.stderr)
        return 2


#: Library parameters that the command line spells otherwise.
_FLAG_OF = {"src": "--data", "dst": "--out", "path": "--data", "data": "--data", "df": "--data",
            "result": "--design", "combinations": "--combination", "combination_size": "--combinations"}


def _in_flags(message: str, parser: argparse.ArgumentParser, args) -> str:
    """A library message in the user's words: "The 'dst' parameter of release_file" becomes "--out"."""
    import re

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
    flags = {a.dest: a.option_strings[0] for a in sub._actions if a.option_strings}

    def flag(m):
        name, entry = m.group(1), m.group(2)  # entry: "['v5']" of "The \"change_weights['v5']\" parameter"
        f = _FLAG_OF.get(name) if _FLAG_OF.get(name) in flags.values() else flags.get(name)
        return (f"{f} (entry {entry[1:-1]})" if entry else f"{f}") if f else m.group(0)
    return re.sub(r"""[Tt]he ['"](\w+)(\[[^\]]*\])?['"] parameter of \w+""", flag, message)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
