"""What the process is working on now, and a heartbeat that says so during long silences.

The stages of a design (:class:`pramopt.optimize.problem.Trace`), the household designer and the
strata's workers mark what they are doing with :func:`activity`; a stage may say how many steps it
has and how many are done (:meth:`Activity.advance`).  Nothing is printed by this module: the
:class:`Heartbeat`, which only the command line starts, logs one line on the ``pramopt.design``
logger whenever nothing has been said for ``every`` seconds: the stage that is running, for how
long, its step count (which never goes backwards) and, when the stage knows its number of steps,
the time left at the rate so far.

This module imports nothing of pramopt, so that every layer can mark its work.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["Activity", "Heartbeat", "activity", "current", "note_output"]

LOG = logging.getLogger("pramopt.design")

_lock = threading.Lock()
_stack: list[Activity] = []
_last_output = [time.monotonic()]


@dataclass
class Activity:
    """One piece of work in progress: its name, when it started, its steps done (and total)."""

    name: str
    total: int | None = None
    done: int = 0
    started: float = field(default_factory=time.monotonic)

    def advance(self, steps: int = 1) -> None:
        """Count ``steps`` more steps done (the count only grows)."""
        with _lock:
            self.done += max(int(steps), 0)

    def describe(self, now: float) -> str:
        """``"<name> for 65 s, step 12 of 40, about 150 s left"`` (the parts that are known)."""
        elapsed = now - self.started
        text = f"{self.name} for {elapsed:.0f} s"
        if self.total:
            text += f", step {self.done} of {self.total}"
            if 0 < self.done < self.total:
                left = elapsed / self.done * (self.total - self.done)
                text += f", about {left:.0f} s left"
        elif self.done:
            text += f", step {self.done}"
        return text


@contextlib.contextmanager
def activity(name: str, total: int | None = None) -> Iterator[Activity]:
    """Mark ``name`` as the work in progress for the duration of the block."""
    act = Activity(name, total)
    with _lock:
        _stack.append(act)
    try:
        yield act
    finally:
        with _lock:
            if act in _stack:
                _stack.remove(act)


def current() -> tuple[Activity, ...]:
    """The work in progress, outermost first."""
    with _lock:
        return tuple(_stack)


def note_output() -> None:
    """Say that something was just shown to the user (the heartbeat waits ``every`` s from now)."""
    _last_output[0] = time.monotonic()


class _NoteOutput(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        note_output()


class Heartbeat:
    """A daemon thread that logs what is running after every ``every`` seconds of silence.

    Use as a context manager.  Silence is measured from the last record of the ``pramopt.design``
    logger (a finished stage, or the heartbeat's own line) or :func:`note_output`.
    """

    def __init__(self, every: float = 30.0):
        self.every = float(every)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pramopt-heartbeat", daemon=True)
        self._handler = _NoteOutput()
        self.lines = 0

    def __enter__(self) -> Heartbeat:
        note_output()
        LOG.addHandler(self._handler)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        LOG.removeHandler(self._handler)

    def beat(self) -> str | None:
        """Log the line for now if ``every`` seconds have passed in silence; return it."""
        now = time.monotonic()
        if now - _last_output[0] < self.every:
            return None
        work = current()
        if not work:
            return None
        line = "still working: " + " > ".join(a.describe(now) for a in work)
        self.lines += 1
        LOG.info("%s", line)
        note_output()
        return line

    def _run(self) -> None:
        while not self._stop.wait(min(self.every / 4, 1.0)):
            self.beat()
