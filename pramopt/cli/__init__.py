"""The ``pramopt`` command line: design, release, assess, baseline, frontier, estimate, sensitivity.

One module per command, each with ``add_parser(subparsers)`` and ``run(args)``; a new command
is one new module and one entry in :data:`COMMANDS`.

Exit codes: 0 on success, 1 for a design that failed (its status is not ``success``, or a
spec's expected figures were missed under ``--check``), 2 for bad input (the reason on stderr,
no traceback), 3 when a design folder was written but its report failed (the design is whole;
the reason on stderr), 130 when interrupted (Ctrl-C), 143 when terminated (SIGTERM); nothing
partial is ever written, because every file is written to a temporary name and renamed (a
design folder is built next to its target, its reports are written into it after).
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import warnings
from functools import partial

from ..errors import LargeProblemWarning, PramoptError
from ._common import PROG, REPORT_FAILED, ReportFailedError, formatter

__all__ = ["main", "build_parser", "COMMANDS"]

#: The commands, in the order ``pramopt --help`` lists them (module names in this package).
COMMANDS = (
    "design",
    "release",
    "assess",
    "baseline",
    "frontier",
    "estimate",
    "sensitivity",
    "advise",
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``pramopt`` command."""
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog=PROG,
        formatter_class=formatter,
        description="Optimal PRAM matrices under the C1 disclosure-risk bound of Cator, "
        "Hensbergen & Rozenholc.",
        epilog="Run 'pramopt COMMAND --help' for the options and an example of each command.\n"
        "Exit codes: 0 success, 1 failed design, 2 bad input, 3 design saved but its report "
        "failed,\n130 interrupted, 143 terminated.",
    )
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
    previous = _on_terminate()
    try:
        with warnings.catch_warnings():
            # pramopt's warnings (a large problem announced before the work) in the CLI's words
            warnings.simplefilter("always", LargeProblemWarning)
            warnings.showwarning = partial(_show_warning, args.command, warnings.showwarning)
            return int(args.func(args) or 0)
    except KeyboardInterrupt as e:
        done = "; ".join(getattr(e, "__notes__", ())) or "nothing was written"
        how = "terminated" if isinstance(e, _Terminated) else "interrupted"
        print(f"{PROG}: {how}; {done}.", file=sys.stderr)
        return 143 if isinstance(e, _Terminated) else 130
    except ReportFailedError as e:
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        return REPORT_FAILED
    except (PramoptError, OSError) as e:
        msg, hint = _in_flags(str(e), parser, args), _dialect_hint(str(e), args)
        if hint:
            msg = msg.rstrip() + ("" if msg.rstrip().endswith((".", "?", ")")) else ".") + hint
        print(f"{PROG} {args.command}: error: {msg}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _show_warning(command, shown, message, category, filename, lineno, file=None, line=None):
    if issubclass(category, LargeProblemWarning):
        print(f"{PROG} {command}: warning: {message}", file=sys.stderr)
    else:
        shown(message, category, filename, lineno, file, line)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so that temporary files are removed as on Ctrl-C."""


def _raise_terminated(signum, frame):
    raise _Terminated()


def _on_terminate():
    """Handle SIGTERM as an interrupt (the default would stop the process and leave temporary
    files behind); the previous handler, to put back (None: not the main thread)."""
    try:
        return signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # signals are only handled in the main thread
        return None


#: Library parameters that the command line spells otherwise.
_FLAG_OF = {
    "src": "--data",
    "dst": "--out",
    "path": "--data",
    "data": "--data",
    "df": "--data",
    "result": "--design",
    "combinations": "--combination",
    "combination_size": "--combinations",
}


def _in_flags(message: str, parser: argparse.ArgumentParser, args) -> str:
    """A library message in the user's words: "The 'dst' parameter of release_file" becomes
    "--out"."""
    import re

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[
        args.command
    ]
    flags = {a.dest: a.option_strings[0] for a in sub._actions if a.option_strings}

    def flag(m):
        name, entry = (
            m.group(1),
            m.group(2),
        )  # entry: "['v5']" of "The \"change_weights['v5']\" parameter"
        f = _FLAG_OF.get(name) if _FLAG_OF.get(name) in flags.values() else flags.get(name)
        return (f"{f} (entry {entry[1:-1]})" if entry else f"{f}") if f else m.group(0)

    message = re.sub(r"""[Tt]he ['"](\w+)(\[[^\]]*\])?['"] parameter of \w+""", flag, message)
    # "missing='category'" is "--missing category" here (only a flag's own choices are rewritten)
    choices = {
        a.dest: (a.option_strings[0], a.choices)
        for a in sub._actions
        if a.option_strings and a.choices
    }

    def option(m):
        f, allowed = choices.get(m.group(1), (None, ()))
        return f"{f} {m.group(2)}" if f and m.group(2) in allowed else m.group(0)

    return re.sub(r"\b(\w+)='([\w.-]+)'", option, message)


#: Separators a CSV file is commonly written with, in the order a tie is broken.
_SEPARATORS = (",", ";", "\t", "|")


def _dialect_hint(message: str, args) -> str:
    """A sentence naming --sep or --encoding when a CSV data file was read with the wrong one
    (the reader's own message speaks of columns or bytes, not of the flag that fixes it)."""
    path = getattr(args, "data", None)
    if not isinstance(path, str) or not path.lower().endswith(".csv"):
        return ""
    enc = (getattr(args, "encoding", None) or "utf-8").lower().replace("_", "-")
    if (
        enc in ("utf-8", "utf8")
        and ("UTF8" in message or "utf-8" in message.lower())
        and "decode" in message.lower()
        or "invalid UTF8" in message
    ):
        return (
            " The file is not valid utf-8 (the default --encoding): a file exported on Windows or "
            "by older software is often --encoding latin-1 or cp1252."
        )
    if not ("Cannot read" in message or "must name columns" in message):
        return ""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(1 << 16).decode(enc, errors="replace")
    except (OSError, LookupError):
        return ""
    sep = getattr(args, "sep", None) or ","
    sep = "\t" if sep == "\\t" else sep
    counts = {c: first.count(c) for c in _SEPARATORS}
    best = max(_SEPARATORS, key=lambda c: counts[c])
    if counts.get(sep, first.count(sep)) or not counts[best]:
        return ""
    shown = "\\t" if best == "\t" else best
    return (
        f" The file's first line has no {sep!r} but {counts[best]} {best!r}: "
        f"is it separated by {best!r} (--sep '{shown}')?"
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
