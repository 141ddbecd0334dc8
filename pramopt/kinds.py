"""Kinds of design beyond the plain record-level one, and the registry the core dispatches through.

A kind (household designs, :mod:`pramopt.households`) has its own parameters that call for it,
its own result type and its own ``design.json`` format.  :func:`pramopt.design`, the releases,
:func:`pramopt.load_design`, :func:`pramopt.save_design` and the commands ``design`` and
``release`` find the kind here and call its :class:`DesignKind`, so that imports point one way:
the kind's package imports the core and registers itself with :func:`register_kind` (``pramopt``
imports it once), and no module of the core imports the kind's package.

This module imports nothing of pramopt, so that every layer can import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["KINDS", "DesignKind", "kind_for", "kind_of", "kind_of_format", "register_kind"]


@dataclass(frozen=True)
class DesignKind:
    """What the core calls for the designs of one kind.

    Attributes
    ----------
    name : str
        Named in messages ("not supported with a household design") and report titles.
    result_type : type
        The kind's result; :func:`kind_of` finds the kind of a result by it.
    formats : tuple of str
        The ``design.json`` format tags ``load`` reads (the first is the one ``save`` writes).
    files : tuple of str
        The files ``save`` writes into a design folder (named by the ``design`` command); a
        pattern such as ``matrix_*.csv`` stands for one file per identifying variable.
    applies : callable
        ``applies(params) -> bool``: whether a :class:`~pramopt.DesignParams` asks for this kind.
    design : callable
        ``design(data, qi, params, design, *, progress, client, owner) -> result``, called by
        :func:`pramopt.design` (passed as ``design``, so that the kind need not import it).
    check_releasable : callable
        ``check_releasable(result)``: raise :class:`~pramopt.DesignMismatchError` for a design
        not safe to release with (before any data is read).
    release : callable
        ``release(df, result, seed) -> DataFrame``, called by :func:`pramopt.release`.
    release_file : callable
        ``release_file(src, dst, result, seed, dialect, owner) -> FileRelease``, called by
        :func:`pramopt.release_file` (``dialect`` a :class:`pramopt._csv.CsvDialect`).
    load : callable
        ``load(record, path) -> result``: the result of a parsed ``design.json`` of one of
        ``formats``, called by :func:`pramopt.load_design`.
    save : callable
        ``save(result, folder, extra) -> Path``: write ``files`` into ``folder``, called by
        :func:`pramopt.save_design`.
    report : callable
        ``report(result, title) -> ReportData``, the design command's report.
    release_note : callable
        ``release_note(result) -> str``: what the release command adds to its summary line.
    example : callable
        ``example() -> (data, qi, options)``: a small problem of this kind that
        ``design(data, qi, **options)`` solves in seconds (the contract test designs it).
    estimate : callable or None
        ``estimate(released, result, by=None, *, nonnegative=False) -> DataFrame``: the
        unbiased estimate from a release, for a kind whose estimate :func:`pramopt.estimate`
        should call (None: the kind has none, and estimate refuses its designs).
    record_level_note : str
        What a command that takes only a record-level matrix (``assess --matrix``, and
        ``estimate`` for a kind without one) says of this kind's designs after refusing them.
    """

    name: str
    result_type: type
    formats: tuple
    files: tuple
    applies: Callable[[Any], bool]
    design: Callable[..., Any]
    check_releasable: Callable[[Any], None]
    release: Callable[..., Any]
    release_file: Callable[..., Any]
    load: Callable[[dict, Any], Any]
    save: Callable[..., Any]
    report: Callable[[Any, str], Any]
    release_note: Callable[[Any], str]
    example: Callable[[], tuple]
    estimate: Callable[..., Any] | None = None
    record_level_note: str = ""


#: Capabilities a kind may leave out (None).
OPTIONAL = ("estimate",)

#: The registered kinds, by name, in the order registered.
KINDS: dict[str, DesignKind] = {}


def register_kind(kind: DesignKind) -> DesignKind:
    """Register ``kind``, whose capabilities the core then calls; returns it.

    Raises
    ------
    TypeError
        If ``kind`` is not a :class:`DesignKind`.
    ValueError
        If it lacks a capability, or takes the result type or a format of another kind (a kind
        registered again under its name replaces the one before).
    """
    if not isinstance(kind, DesignKind):
        raise TypeError(f"register_kind needs a DesignKind; got {type(kind).__name__}.")
    data = ("name", "result_type", "formats", "files", "record_level_note")
    missing = [
        f.name
        for f in fields(kind)
        if f.name not in data
        and not callable(getattr(kind, f.name))
        and not (f.name in OPTIONAL and getattr(kind, f.name) is None)
    ]
    if missing or not kind.formats or not kind.files or not isinstance(kind.result_type, type):
        raise ValueError(
            f"The design kind {kind.name!r} lacks {missing or 'a result type, formats or files'}."
        )
    for other in KINDS.values():
        if other.name == kind.name:
            continue  # registered again (a reload): replaced
        if other.result_type is kind.result_type or set(other.formats) & set(kind.formats):
            raise ValueError(
                f"The design kind {kind.name!r} takes the result type or a format of "
                f"{other.name!r}."
            )
    KINDS[kind.name] = kind
    return kind


def kind_for(params) -> DesignKind | None:
    """The kind a :class:`~pramopt.DesignParams` asks for; None for a plain record-level design."""
    return next((k for k in KINDS.values() if k.applies(params)), None)


def kind_of(result) -> DesignKind | None:
    """The kind of a design result; None for a :class:`~pramopt.DesignResult`."""
    return next((k for k in KINDS.values() if isinstance(result, k.result_type)), None)


def kind_of_format(fmt) -> DesignKind | None:
    """The kind whose ``design.json`` format tag is ``fmt``; None for another format."""
    return next((k for k in KINDS.values() if fmt in k.formats), None)
