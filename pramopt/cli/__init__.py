"""The ``pramopt`` command line: design, release, assess, baseline, frontier, estimate, sensitivity.

One module per command, each with ``add_parser(subparsers)`` and ``run(args)``; a new command
is one new module and one entry in :data:`COMMANDS`.

Exit codes: 0 on success, 1 for a design that failed (its status is not ``success``, or a
spec's expected figures were missed under ``--check``), 2 for bad input (the reason on stderr,
no traceback), 3 when a design folder was written but its report failed (the design is whole;
the reason on stderr), 130 when interrupted (Ctrl-C), 143 when terminated (SIGTERM), 141 when
the reader of standard output went away (``pramopt estimate ... | head -1``: the code a shell
gives a program that SIGPIPE stopped; nothing is said, as ``yes | head -1`` says nothing);
nothing partial is ever written, because every file is written to a temporary name and renamed
(a design folder is built next to its target, its reports are written into it after).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import warnings
from functools import partial

from .._csv import CSV_SUFFIXES
from ..errors import LargeProblemWarning, PramoptError
from ._common import PROG, REPORT_FAILED, ReportFailedError, formatter

__all__ = ["main", "build_parser", "COMMANDS"]

#: Exit code when standard output is a pipe whose reader has gone (128 + SIGPIPE, as a shell says).
CLOSED_PIPE = 141

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
        "failed,\n130 interrupted, 141 output pipe closed, 143 terminated.",
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
            code = int(args.func(args) or 0)
            if sys.stdout is not None:
                sys.stdout.flush()  # a closed pipe is found here, not at exit
            return code
    except BrokenPipeError:
        return _closed_pipe()
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


def _closed_pipe() -> int:
    """The reader of standard output has gone (``| head -1``): not bad input, and nothing to say.

    As Python's documentation of SIGPIPE advises, standard output is pointed at the null device,
    so that flushing what is left of it when the interpreter exits raises nothing more.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's stream)
        pass
    return CLOSED_PIPE


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
    "--out", "max_categories=100" "--max-categories 100" and a parameter named alone
    ("a lower max_categories") its flag."""
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

    message = re.sub(
        r"""(?:[Tt]he )?['"](\w+)(\[[^\]]*\])?['"] parameter(?: of \w+)?""", flag, message
    )
    # "missing='category'" is "--missing category" here (only a flag's own choices are
    # rewritten), and "max_categories=100" is "--max-categories 100" (a number, for any flag)
    choices = {a.dest: a.choices for a in sub._actions if a.option_strings}

    def option(m):
        f, value = flags.get(m.group(1)), m.group(2) or m.group(3)
        given = m.group(3) is not None or value in (choices.get(m.group(1)) or ())
        return f"{f} {value}" if f and given else m.group(0)

    message = re.sub(r"\b(\w+)=(?:'([\w.-]+)'|(-?\d[\d.e+-]*)\b)", option, message)
    # a parameter named alone in a sentence ("a lower max_categories"): its flag, where the name
    # cannot be a word of the sentence (it has an underscore), is not quoted (a column's name)
    # and its flag takes a value (--no-refine-loss would say the opposite of refine_loss)
    for a in sub._actions:
        if a.option_strings and a.nargs != 0 and "_" in a.dest:
            message = re.sub(
                rf"(?<![\w'\".-]){a.dest}(?![\w'\"=\[(])", a.option_strings[0], message
            )
    return message


#: Separators a CSV file is commonly written with, in the order a tie is broken.
_SEPARATORS = (",", ";", "\t", "|")


def _dialect_hint(message: str, args) -> str:
    """A sentence naming --sep or --encoding when a CSV data file was read with the wrong one
    (the reader's own message speaks of columns or bytes, not of the flag that fixes it)."""
    path = getattr(args, "data", None)
    if not isinstance(path, str) or not path.lower().endswith(CSV_SUFFIXES):
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
    sep = getattr(args, "sep", None) or ("\t" if path.lower().endswith(".tsv") else ",")
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
