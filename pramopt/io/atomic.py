"""Files written whole or not at all: a temporary name next to the target, then a rename.

A reader never sees half a file, and an interrupted run leaves the old file (or nothing)
behind.  The temporary file and folder are created with the modes a plain ``open()`` or
``mkdir()`` would give (0o666 and 0o777 less the process's umask, which the operating system
applies), so outputs are not made private and the umask is never changed -- changing it and
restoring it would be unsafe with threads.  A temporary name carries the writer's process id,
so that the next write of the same target removes what a killed run (SIGKILL) left behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import socket
from pathlib import Path

from .._csv import CSV_SUFFIXES
from ..errors import InvalidParameterError

__all__ = [
    "atomic_write",
    "atomic_dir",
    "write_text",
    "check_out_file",
    "check_out_dir",
    "existing_output",
    "refuse_overwrite",
    "clean_stale",
    "file_sha256",
    "PARQUET_SUFFIXES",
]

PARQUET_SUFFIXES = (".parquet", ".pq")
#: Name of the machine-readable design file inside a design folder.
DESIGN_FILE = "design.json"


def _parent(p: Path) -> Path:
    return p.parent if str(p.parent) else Path(".")


def _host() -> str:
    """A short tag of this machine: a process id means something on its own machine only."""
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]


def _temp_name(p: Path, suffix: str) -> Path:
    # the writer's machine and process id in the name tell a later run whether it is gone
    return _parent(p) / f".{p.name}.{_host()}-{os.getpid()}-{secrets.token_hex(6)}{suffix}"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError, OSError):
        return True  # another user's process, or no such number: leave its files alone
    return True


def clean_stale(path) -> list[Path]:
    """Remove the temporary files and folders that a killed run left next to ``path`` (named
    as :func:`_temp_name` names them, on this machine, by a process that no longer exists); a
    design folder that such a run had moved aside is put back if nothing took its place.
    Returns what was removed."""
    p = Path(path)
    folder = _parent(p)
    pattern = re.compile(rf"^\.{re.escape(p.name)}\.{_host()}-(\d+)-[0-9a-f]{{12}}\.(tmp|old)$")
    gone: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return gone
    for e in entries:
        m = pattern.match(e.name)
        if m is None or _alive(int(m.group(1))):
            continue
        with contextlib.suppress(OSError):
            if m.group(2) == "old" and not p.exists():
                os.replace(e, p)
                continue
            if e.is_dir() and not e.is_symlink():
                shutil.rmtree(e)
            else:
                os.unlink(e)
            gone.append(e)
    return gone


def _not_writable(folder: Path) -> str | None:
    """Why no file can be created in ``folder`` (None when one can).

    Tried for real (a temporary file created and removed), because permissions do not tell:
    root passes every ``os.access`` check, and read-only or special file systems refuse anyway.
    """
    if not os.access(folder, os.W_OK):
        return f"the folder {str(folder)!r} is not writable"
    probe = folder / f".pramopt-probe.{secrets.token_hex(6)}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError as e:
        # the folder exists: the reason (e.g. ENOENT from /proc) is about the new file in it
        why = e.strerror or type(e).__name__
        return f"the folder {str(folder)!r} does not accept new files ({why})"
    with contextlib.suppress(OSError):
        os.unlink(probe)
    return None


def existing_output(path, marker: str | None = None) -> str | None:
    """What an output that is already there is, in words (``"a file"``, ``"a design folder"``);
    None when writing it would lose nothing: no such path, or an empty folder.

    ``marker``: the file that marks an output folder of pramopt's (``design.json``, or
    ``frontier.csv`` for a frontier); None for an output file.
    """
    p = Path(path)
    if p.is_symlink() and not p.exists():
        return "a link"  # a dangling link is a name someone made: replacing it loses it
    if not p.exists():
        return None
    if not p.is_dir():
        return "a file"
    if not any(p.iterdir()):
        return None
    if marker is not None and (p / marker).is_file():
        return f"{_kind_of_folder(marker)} folder"
    return "a folder"


def _kind_of_folder(marker: str) -> str:
    """``"a design"``, ``"an assessment"``: the kind of folder that ``marker`` marks."""
    kind = "design" if marker == DESIGN_FILE else Path(marker).stem
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def _remedy(flag: str | None, writer: str | None) -> str:
    """How to allow the overwrite: the command line's --force, or the library's parameter."""
    if flag:
        return f"Give --force to replace it, or another {flag}"
    return f"Give overwrite=True{f' to {writer}' if writer else ''} to replace it"


def refuse_overwrite(
    path,
    marker: str | None = None,
    *,
    name: str | None = None,
    remedy: str = "Give overwrite=True to replace it",
) -> None:
    """Refuse an output that is already there (:func:`existing_output`): a file that may have been
    published is never replaced unasked.

    Parameters
    ----------
    path : str or Path
    marker : str, optional
        The file that marks an output folder (None: an output file).
    name : str, optional
        How the message names the output (default: its path).
    remedy : str
        The sentence that says how to replace it anyway (a flag or a parameter).

    Raises
    ------
    InvalidParameterError
        When ``path`` exists (an empty folder excepted).
    """
    what = existing_output(path, marker)
    if what is not None:
        raise InvalidParameterError(
            f"Refusing to overwrite {name or repr(str(path))}: it exists ({what}). {remedy}."
        )


def check_out_file(
    path,
    kinds=CSV_SUFFIXES + PARQUET_SUFFIXES,
    param: str | None = None,
    owner: str | None = None,
    flag: str | None = None,
    *,
    force: bool = False,
    writer: str | None = None,
) -> Path:
    """Fail early (before any long work) on an output file that cannot be written, or that exists.

    ``flag``: the command-line option that named it, for the messages.  ``force``: an existing
    file may be replaced; without it one is refused, naming ``--force`` (with ``flag``) or the
    ``overwrite`` parameter of ``writer``.
    """
    p = Path(path)
    name = f"{flag} {str(p)!r}" if flag else repr(str(p))
    where = f"The {param!r} parameter of {owner} must be" if param and owner else None

    def bad(allowed: str, why: str):
        if where:
            raise InvalidParameterError(f"{where} {allowed}; got {str(p)!r} ({why}).")
        raise InvalidParameterError(f"Cannot write {name}: {why}.")

    if p.suffix.lower() not in kinds:
        bad(
            f"a file name ending in {', '.join(kinds)}",
            f"the file name must end in {', '.join(kinds)}",
        )
    folder = _parent(p)
    if not folder.is_dir():
        bad("a file in an existing folder", f"the folder {str(folder)!r} does not exist")
    if p.is_dir():
        bad("a file name, not a folder", "it is a folder")
    why = _not_writable(folder)
    if why:
        bad("a file in a writable folder", why)
    if not force:
        refuse_overwrite(p, name=name, remedy=_remedy(flag, writer))
    return p


def check_out_dir(
    path,
    marker: str = DESIGN_FILE,
    flag: str | None = None,
    *,
    force: bool = False,
    writer: str | None = None,
) -> Path:
    """Fail early on an output folder that cannot be written or holds something else than a design
    (a folder with ``marker`` in it: ``design.json``, or ``frontier.csv`` for a frontier).

    ``flag``: the command-line option that named it, for the messages.  ``force``: a folder of
    that kind may be replaced; without it any folder that is not empty is refused, naming
    ``--force`` (with ``flag``) or the ``overwrite`` parameter of ``writer``.
    """
    p = Path(path)
    name = f"{flag} {str(p)!r}" if flag else repr(str(p))
    parent = _parent(p)
    if not parent.is_dir():
        raise InvalidParameterError(
            f"Cannot write {name}: the folder {str(parent)!r} does not exist."
        )
    why = _not_writable(parent)
    if why:
        raise InvalidParameterError(f"Cannot write {name}: {why}.")
    if p.exists():
        if not p.is_dir():
            raise InvalidParameterError(
                f"Cannot write the folder {name}: a file of that name exists."
            )
        if any(p.iterdir()) and not (p / marker).is_file():
            # even when forced: a user's other folder is never wiped
            raise InvalidParameterError(
                f"Refusing to replace {name}: it is not {_kind_of_folder(marker)} folder (not "
                f"empty, and no {marker})."
            )
    if not force:
        refuse_overwrite(p, marker, name=name, remedy=_remedy(flag, writer))
    return p


@contextlib.contextmanager
def atomic_write(path, mode: str = "wb"):
    """Open a temporary file next to ``path``; rename it to ``path`` only if the block succeeds.

    On any exception (KeyboardInterrupt included) the temporary file is removed and ``path``
    is left as it was.
    """
    p = Path(path)
    clean_stale(p)
    while True:
        tmp = _temp_name(p, ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:  # pragma: no cover - 48 random bits collided
            continue
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text(text: str, path) -> Path:
    """Write a text file (UTF-8) atomically."""
    with atomic_write(path) as fh:
        fh.write(text.encode("utf-8"))
    return Path(path)


@contextlib.contextmanager
def atomic_dir(path, marker: str = DESIGN_FILE, *, force: bool = False, writer: str | None = None):
    """Build a folder in a temporary folder next to ``path``; put it in place at the end.

    Yields the temporary folder.  An existing ``path`` is replaced only if it is empty, or, with
    ``force``, holds a design (a ``design.json``; the file ``marker`` for another kind of folder),
    so that a user's other folder is never wiped; the old folder is moved aside first and deleted
    once the new one is in place.  ``writer``: the function whose ``overwrite`` parameter gives
    ``force``, named by the refusal.
    """
    p = check_out_dir(path, marker, force=force, writer=writer)
    clean_stale(p)
    tmp = _temp_name(p, ".tmp")
    os.mkdir(tmp, 0o777)
    old = None
    try:
        yield tmp
        if p.exists():
            old = _temp_name(p, ".old")
            os.replace(p, old)
        os.replace(tmp, p)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and old.exists() and not p.exists():
            os.replace(old, p)  # put the previous design back
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def file_sha256(path) -> str:
    """SHA-256 of a file's bytes, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
