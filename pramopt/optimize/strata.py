"""Designs per stratum of the fixed variables: solved independently, merged, checked once.

With ``fixed=[...]`` no record ever leaves its stratum (the cells sharing one combination of the
fixed values).  The joint design still couples the strata: a group k0 of a combination π without
the fixed variables spans several strata, and C1's denominator D_g sums over all of them.  Here
each stratum s is designed on its own table under C1 *within the stratum* (every combination π
extended by the fixed variables, π ∪ F; on the stratum's table the fixed values are constant, so
its combinations are the same index tuples).  That implies the full C1: a record of m moves only
within m's stratum, so S[m, g] = S[m, g ∩ s] <= alpha D_s(g ∩ s) <= alpha D_g.  It is also the
risk an intruder faces who sees the fixed values, which are released unchanged.  It is a stronger
condition than the joint design's and can cost loss (``benchmarks/strata.py`` measures it).

The strata are independent programs, so they run in parallel: local processes
(:class:`concurrent.futures.ProcessPoolExecutor`, 'spawn' context) or a Dask cluster
(``client.submit``), each running :func:`pramopt.design` on one stratum's table
(:func:`design_stratum`, a picklable top-level function).  The matrices are merged block-diagonally
into the full cell order, the merged matrix is checked against the full, unreduced C1
(:func:`pramopt.verified_result.verify_stage`), and one :class:`~pramopt.DesignResult` is finished:
SUCCESS only when every stratum succeeded and the merged check passes.  The L2 loss of a
block-diagonal P is sum_s (n_s / n)^2 loss_s (P^-1 is block diagonal too), so it is not recomputed.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import time
from dataclasses import dataclass
from typing import cast

import numpy as np
import scipy.sparse as sp

from .._labels import short_label
from ..errors import InvalidParameterError
from ..frequency.table import FrequencyTable, cells_of
from ..params import DesignParams
from ..result import DesignResult, Status
from ..verified_result import finish, verify_stage
from .problem import Trace, _keep_rows

__all__ = ["Stratum", "split_strata", "design_stratum", "design_strata", "check_client"]


@dataclass(frozen=True)
class Stratum:
    """One stratum: its label (``"sex=F"``), its cells in the full table, its own table (same
    variables and categories, so codes stay comparable) and the options of its design."""

    label: str
    cells: np.ndarray
    table: FrequencyTable
    options: dict

    @property
    def n(self) -> int:
        return self.table.n


def check_client(client, owner: str = "design"):
    """``client`` must be a ``distributed.Client`` (or None)."""
    if client is None:
        return None
    try:
        import distributed
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("A Dask client needs distributed: pip install 'pramopt[dask]'.") from e
    if not isinstance(client, distributed.Client):
        raise InvalidParameterError(
            f"The 'client' parameter of {owner} must be a distributed.Client; got "
            f"{type(client).__name__}."
        )
    return client


def split_strata(
    table: FrequencyTable, params: DesignParams, owner: str = "design"
) -> list[Stratum]:
    """One :class:`Stratum` per combination of the fixed values present, in the order of the
    codes."""
    qi = list(table.qi)
    # the joint design's checks (fixed names, keep_cells present), before any work
    bad = [f for f in params.fixed or () if f not in qi]
    if bad:
        raise InvalidParameterError(
            f"The 'fixed' parameter of {owner} must name identifying variables {qi!r}; got {bad!r}."
        )
    _keep_rows(table, params.keep_cells, owner)
    fixed_idx = [qi.index(f) for f in params.fixed or ()]
    if fixed_idx:
        keys, inv = np.unique(table.codes[:, fixed_idx], axis=0, return_inverse=True)
        inv = np.asarray(inv).ravel()
    else:
        keys, inv = np.zeros((1, 0), dtype=np.int64), np.zeros(table.n_cells, dtype=np.int64)
    keep = list(params.keep_cells or ())
    keep_at = np.empty(0, dtype=np.int64)
    if keep:
        import pandas as pd

        keep_at = cells_of(
            pd.DataFrame([dict(r) for r in keep]), table
        )  # every one present (checked)
    base = params.to_dict()
    base["workers"] = None  # each stratum is one joint design
    out = []
    for s, key in enumerate(keys):
        cells = np.flatnonzero(inv == s)
        sub = table.subset(cells)
        opts = dict(base)
        mine = [dict(r) for r, at in zip(keep, keep_at) if inv[at] == s]
        opts["keep_cells"] = mine or None
        label = (  # for people: a long value shortened
            ", ".join(
                f"{short_label(str(qi[j]))}={short_label(str(table.categories[j][c]))}"
                for j, c in zip(fixed_idx, key)
            )
            or "all"
        )
        out.append(Stratum(label, cells, sub, opts))
    return out


@dataclass(frozen=True)
class StratumDesign:
    """What a stratum's design sends back (small: its matrix and figures, not its table)."""

    status: Status
    message: str
    matrix: sp.csr_matrix
    loss: float
    max_risk: float
    gamma: float | None
    solver: str | None
    structure: str | None
    seconds: float


def design_stratum(design, table: FrequencyTable, options: dict) -> StratumDesign:
    """``design(table, **options)`` on one stratum's table (run in a worker process or on a Dask
    worker); the designer hands its own ``design`` in, so this module does not import it."""
    t0 = time.perf_counter()
    res = design(table, **options)
    structure = res.reduction.structure if res.reduction is not None else None
    return StratumDesign(
        res.status,
        res.message,
        sp.csr_matrix(res.matrix),
        float(res.loss),
        float(res.max_risk),
        res.gamma,
        res.solver,
        structure,
        time.perf_counter() - t0,
    )


def _run_local(design, strata: list[Stratum], workers: int, done) -> list[StratumDesign]:
    out: list[StratumDesign | None] = [None] * len(strata)
    if workers == 1 or len(strata) == 1:
        for i, s in enumerate(strata):
            out[i] = design_stratum(design, s.table, s.options)
            done(i, out[i])
        return cast(list[StratumDesign], out)  # every slot filled
    # 'spawn': no fork of a process that may hold solver or Dask threads; largest strata first
    order = sorted(range(len(strata)), key=lambda i: -strata[i].table.n_cells)
    ex = cf.ProcessPoolExecutor(
        max_workers=min(workers, len(strata)), mp_context=multiprocessing.get_context("spawn")
    )
    try:
        futures = {
            ex.submit(design_stratum, design, strata[i].table, strata[i].options): i for i in order
        }
        for f in cf.as_completed(futures):
            i = futures[f]
            out[i] = f.result()
            done(i, out[i])
    finally:
        ex.shutdown(wait=True, cancel_futures=True)
    return cast(list[StratumDesign], out)  # every slot filled (or raised)


def _run_dask(design, strata: list[Stratum], client, done) -> list[StratumDesign]:
    from distributed import as_completed

    out: list[StratumDesign | None] = [None] * len(strata)
    futures = [
        client.submit(design_stratum, design, s.table, s.options, pure=False) for s in strata
    ]
    index = {f.key: i for i, f in enumerate(futures)}
    try:
        for f in as_completed(futures):
            i = index[f.key]
            out[i] = f.result()
            done(i, out[i])
    finally:
        client.cancel([f for f in futures if not f.done()])
    return cast(list[StratumDesign], out)  # every slot filled (or raised)


def _merge(strata: list[Stratum], designs: list[StratumDesign], K: int) -> sp.csr_array:
    """The block-diagonal matrix on the full table's cells (row and column s.cells[i] for cell i
    of stratum s)."""
    rows, cols, vals = [], [], []
    for s, d in zip(strata, designs):
        P = d.matrix.tocoo()
        rows.append(s.cells[P.row])
        cols.append(s.cells[P.col])
        vals.append(P.data)
    return sp.csr_array(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(K, K)
    )


def design_strata(
    design,
    table: FrequencyTable,
    combos,
    params: DesignParams,
    *,
    client=None,
    progress=None,
    owner: str = "design",
) -> DesignResult | None:
    """The per-stratum design of ``table`` with ``design`` (:func:`pramopt.design`, a top-level and
    so picklable function) on each stratum; None when there is a single stratum: the joint design
    is then the same, and the caller makes it."""
    trace = Trace(progress)
    with trace.stage("strata") as info:
        strata = split_strata(table, params, owner)
        info["detail"] = (
            f"{len(strata)} strata of {', '.join(params.fixed or ()) or 'no fixed variable'}"
        )
    if len(strata) <= 1:
        return None
    stored = params.to_dict()
    stored["workers"] = (
        params.workers or 1
    )  # design(result.table, **result.params) repeats it locally
    alpha = params.alpha
    K = table.n_cells
    assert alpha is not None  # fixed variables are refused with epsilon and k, so C1 is on
    assert params.fixed  # strata come from the fixed variables
    workers = params.workers or 1  # None only with a client
    # records never leave their stratum: the U0-weighted mean of C1's left-hand sides within a
    # stratum is 1/n_s for every group, so no matrix meets C1 there when n_s < 1/alpha
    small = [s for s in strata if s.n * alpha < 1 - 1e-12]
    if small:
        names = "; ".join(f"{s.label} ({s.n} records)" for s in small)
        return finish(
            sp.identity(K, format="csr"),
            table,
            combos,
            alpha,
            Status.INFEASIBLE,
            f"C1 cannot hold for any matrix in stratum {names}: fewer than 1/alpha = {1 / alpha:g} "
            "records, and the fixed variables keep every record in its stratum.",
            stages=trace.stages,
            params=stored,
        )
    where = _where(client, params.workers, len(strata))
    count = {"done": 0}

    def done(i: int, d: StratumDesign) -> None:
        s = strata[i]
        count["done"] += 1
        trace.add(
            f"stratum {s.label}",
            d.seconds,
            0,
            f"{s.table.n_cells} cells, {s.n} records: {d.status.value}"
            + (f", {d.structure} design, loss {d.loss:.4g}" if d.status is Status.SUCCESS else ""),
        )
        trace.progress("strata", count["done"], d.loss, d.max_risk)

    t0 = time.perf_counter()
    designs = (
        _run_dask(design, strata, client, done)
        if client is not None
        else _run_local(design, strata, workers, done)
    )
    trace.add("designs", time.perf_counter() - t0, 0, f"{len(strata)} strata {where}")
    P = _merge(strata, designs, K)
    rep, st = verify_stage(P, table, combos, "verify merged")
    trace.add(st.name, st.seconds, 0, f"max risk {rep.max_risk:.6g}")
    n = table.n
    loss = float(sum((s.n / n) ** 2 * d.loss for s, d in zip(strata, designs)))
    status, message = _merged_status(strata, designs, rep.max_risk, alpha, params.fixed, where)
    gammas = [d.gamma for d in designs if d.gamma is not None]
    solvers = sorted({d.solver for d in designs if d.solver})
    details = {"strata": _stratum_rows(strata, designs)}
    return finish(
        P,
        table,
        combos,
        alpha,
        status,
        message,
        stages=trace.stages,
        gamma=min(gammas) if gammas else None,
        solver="; ".join(solvers) or None,
        report=rep,
        params=stored,
        loss=loss,
        details=details,
    )


def _where(client, workers, n_strata: int) -> str:
    """Where the strata are designed, in words."""
    return (
        "on the Dask cluster"
        if client is not None
        else (
            "one after the other"
            if workers == 1
            else f"in {min(workers, n_strata)} local processes"
        )
    )


def _merged_status(strata, designs, max_risk, alpha, fixed, where: str) -> tuple:
    """Status and message of the merged design: the first failed stratum's, else C1's verdict."""
    failed = [(s, d) for s, d in zip(strata, designs) if d.status is not Status.SUCCESS]
    if failed:
        s, d = failed[0]
        others = f" ({len(failed) - 1} more strata failed.)" if len(failed) > 1 else ""
        status, message = (
            d.status,
            (
                f"Stratum {s.label} ({s.n} records, {s.table.n_cells} cells) failed: "
                f"{d.message}{others}"
            ),
        )
    elif max_risk <= alpha:
        status = Status.SUCCESS
        message = (
            f"Designed per stratum of {', '.join(fixed)} ({len(strata)} strata, {where}), "
            "each under C1 within its stratum (every combination extended by the fixed "
            "variables). "
            "Full C1 verified on the merged matrix."
        )
    else:
        status = Status.UNVERIFIED
        message = (
            f"Every stratum was verified, but the merged matrix fails the full C1 "
            f"(max risk {max_risk:.8g} > {alpha:g})."
        )
    return status, message


def _stratum_rows(strata, designs) -> list[dict]:
    """One row of ``details["strata"]`` per stratum."""
    return [
        {
            "stratum": s.label,
            "records": s.n,
            "cells": s.table.n_cells,
            "status": d.status.value,
            "structure": d.structure,
            "loss": d.loss,
            "max_risk": d.max_risk,
            "gamma": d.gamma,
            "seconds": d.seconds,
            "message": d.message,
        }
        for s, d in zip(strata, designs)
    ]
