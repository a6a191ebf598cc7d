"""The canonical MaxECC LP relaxation, built sparse and solved with HiGHS (method sheet, "LP").

    max  sum_e w_e z_e
    s.t. sum_{c} x_{v,c} <= 1              for every vertex v
         z_e - x_{v,c(e)} <= 0              for every edge e and every v in e
         0 <= x, z <= 1

Only *incident* pairs p = (v, c), where c colours some edge at v, get a variable x_p (the others
are 0 without loss); the model never has n*k columns. Columns: the P pairs (sorted by v, then c),
then the m edge variables z_e. Rows: one capacity row per vertex with at least two pairs (a vertex
with one pair is capped by the bound x <= 1), then one row per (edge, vertex) incidence.
:func:`build_model` writes this model once for both the LP and the ILP (``integer=True`` makes
the x columns integer).
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.io import display_name, load_npz, write_npz
from icmlkit.lib.solve_maxecc.config import DEFAULT_LP_METHOD as DEFAULT_METHOD, LP_METHODS as METHODS
from icmlkit.lib.solve_maxecc.hypergraph import Hypergraph

ROWGEN_TOL = 1e-9  # a row z_e <= x_{v,c(e)} counts as violated above this


@dataclass
class Pairs:
    """The incident (vertex, colour) pairs of ``H``: ``pair_v``, ``pair_c`` (int64 [P], sorted by
    (v, c)) and ``of_entry`` (int64 [nnz]): the pair of each entry of ``H.nodes``."""

    pair_v: np.ndarray
    pair_c: np.ndarray
    of_entry: np.ndarray

    @property
    def P(self) -> int:
        return len(self.pair_v)


def incident_pairs(H: Hypergraph) -> Pairs:
    """Pairs (v, c(e)) for every incidence v in e, deduplicated (vectorised with np.unique)."""
    keys = H.nodes * H.k + H.colour[H.edge_of]
    uniq, inv = np.unique(keys, return_inverse=True)
    return Pairs(uniq // H.k, uniq % H.k, inv.astype(np.int64).reshape(-1))


@dataclass
class Model:
    """A HiGHS LP (``lp``, a highspy.HighsLp) with the pair index it was built over."""

    lp: object
    pairs: Pairs
    num_x: int
    num_z: int


def _highspy():
    from icmlkit.lib.core.errors import require_module

    return require_module("highspy", "test", "highspy")


def _incidence_rows(H: Hypergraph, pairs: Pairs, entries: np.ndarray):
    """Rows z_e - x_p <= 0 for the given entries of ``H.nodes`` (columns sorted, p < P + e):
    (starts of each row relative to 0, column indices, values), two nonzeros a row."""
    k = len(entries)
    cols = np.empty(2 * k, dtype=np.int64)
    cols[0::2] = pairs.of_entry[entries]
    cols[1::2] = pairs.P + H.edge_of[entries]
    vals = np.empty(2 * k)
    vals[0::2] = -1.0
    vals[1::2] = 1.0
    return 2 * np.arange(k), cols, vals


def build_model(H: Hypergraph, integer: bool = False, entries: np.ndarray | None = None,
                pairs: Pairs | None = None) -> Model:
    """Build the LP (or, with ``integer``, the ILP with binary x) as a row-wise sparse HighsLp.

    ``entries`` (indices into ``H.nodes``) keeps only those incidence rows (row generation starts
    from a subset); by default every incidence row is in the model. All index arrays are made with
    numpy; no Python loop over vertices, edges or rows.
    """
    hs = _highspy()
    pairs = incident_pairs(H) if pairs is None else pairs
    P, m = pairs.P, H.m
    if entries is None:
        entries = np.arange(len(H.nodes))
    nnz = len(entries)

    # Capacity rows: vertices with >= 2 pairs; their pairs are contiguous because pairs are sorted by v.
    per_vertex = np.bincount(pairs.pair_v, minlength=H.n)
    in_cap = per_vertex[pairs.pair_v] >= 2
    cap_cols = np.flatnonzero(in_cap)
    cap_counts = per_vertex[per_vertex >= 2]
    n_cap = len(cap_counts)

    _, inc_cols, inc_vals = _incidence_rows(H, pairs, entries)
    start = np.concatenate([[0], np.cumsum(cap_counts), len(cap_cols) + 2 * np.arange(1, nnz + 1)])
    index = np.concatenate([cap_cols, inc_cols])
    value = np.concatenate([np.ones(len(cap_cols)), inc_vals])

    lp = hs.HighsLp()
    lp.num_col_ = P + m
    lp.num_row_ = n_cap + nnz
    lp.sense_ = hs.ObjSense.kMaximize
    lp.col_cost_ = np.concatenate([np.zeros(P), H.weight])
    lp.col_lower_ = np.zeros(P + m)
    lp.col_upper_ = np.ones(P + m)
    lp.row_lower_ = np.full(n_cap + nnz, -hs.kHighsInf)
    lp.row_upper_ = np.concatenate([np.ones(n_cap), np.zeros(nnz)])
    lp.a_matrix_.format_ = hs.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = P + m
    lp.a_matrix_.num_row_ = n_cap + nnz
    lp.a_matrix_.start_ = start.astype(np.int32)
    lp.a_matrix_.index_ = index.astype(np.int32)
    lp.a_matrix_.value_ = value
    if integer:
        lp.integrality_ = [hs.HighsVarType.kInteger] * P + [hs.HighsVarType.kContinuous] * m
    return Model(lp, pairs, P, m)


def new_highs(options: dict | None = None):
    """A silent ``highspy.Highs``. Its one-time banner is written by C code to file descriptor 1,
    so stdout is redirected at the descriptor level while it is created (stdout carries data)."""
    hs = _highspy()
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            h = hs.Highs()
            h.setOptionValue("output_flag", False)
            h.setOptionValue("log_to_console", False)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    for key, val in (options or {}).items():
        if h.setOptionValue(key, val) != hs.HighsStatus.kOk:
            raise UsageError(f"HiGHS rejected the option {key}={val!r}")
    return h


@dataclass
class LPSolution:
    """An LP solution: ``x`` per incident pair (``pair_v``, ``pair_c``), ``z`` per edge (both
    clipped to [0, 1]), ``value`` = sum w_e z_e, the HiGHS model status, and timings."""

    pair_v: np.ndarray
    pair_c: np.ndarray
    x: np.ndarray
    z: np.ndarray
    value: float
    status: str
    optimal: bool
    seconds_build: float
    seconds_solve: float
    method: str
    rows: np.ndarray | None = None  # rowgen: bool mask over H.nodes of the incidence rows it needed
    upper_bound: float | None = None  # pdhg: its dual certificate, an upper bound on the LP optimum


def colouring_from_x(H: Hypergraph, pair_v: np.ndarray, pair_c: np.ndarray, x: np.ndarray,
                     fallback: np.ndarray) -> np.ndarray:
    """The colouring of an integral x (sigma(v) = c where x_{v,c} > 1/2); vertices with no such
    pair take ``fallback``."""
    sigma = np.full(H.n, -1, dtype=np.int64)
    chosen = x > 0.5
    sigma[pair_v[chosen]] = pair_c[chosen]
    return np.where(sigma >= 0, sigma, fallback)


def highs_options(method: str | None, time_limit: float | None, threads: int | None,
                  tolerance: float | None = None) -> dict:
    """HiGHS options for the LP (``method`` one of :data:`METHODS`) or, with ``method=None``, the
    ILP (exact: mip_rel_gap 0); a positive time limit and a thread count when given. ``tolerance``
    loosens the optimality tolerance of ``ipm`` (crossover off: the interior point is returned) or
    ``pdlp`` to that value, for comparisons at an equal accuracy with a first-order solver."""
    if method is None:
        opts: dict = {"mip_rel_gap": 0.0}
    elif method not in METHODS or method == "rowgen":
        raise UsageError(f"LP method must be one of {', '.join(METHODS)}, not {method!r}")
    else:
        opts = {"solver": method}
    if tolerance is not None:
        if method not in ("ipm", "pdlp") or not tolerance > 0:
            raise UsageError("a tolerance needs method ipm or pdlp and a positive value")
        opts.update({"ipm_optimality_tolerance": float(tolerance), "run_crossover": "off"} if method == "ipm"
                    else {"pdlp_optimality_tolerance": float(tolerance)})
    if time_limit is not None:
        if time_limit <= 0:
            raise UsageError("the time limit must be positive")
        opts["time_limit"] = float(time_limit)
    if threads is not None:
        opts["threads"] = int(threads)
    return opts


def _edge_min_x(H: Hypergraph, pairs: Pairs, x: np.ndarray) -> np.ndarray:
    """min_{v in e} x_{v, c(e)} per edge (vectorised segment minimum)."""
    return np.minimum.reduceat(x[pairs.of_entry], H.ptr[:-1])


def first_rows(H: Hypergraph, pairs: Pairs) -> np.ndarray:
    """Row generation's start (bool mask over ``H.nodes``): per edge, the entry (v in e) whose
    pair (v, c(e)) carries the smallest share of v's incident weight, the vertex most likely to
    pull away from c(e)."""
    pw = np.bincount(pairs.of_entry, weights=H.weight[H.edge_of], minlength=pairs.P)
    vw = np.bincount(pairs.pair_v, weights=pw, minlength=H.n)
    share = (pw / vw[pairs.pair_v])[pairs.of_entry]
    order = np.lexsort((share, H.edge_of))
    mask = np.zeros(len(H.nodes), dtype=bool)
    mask[order[np.searchsorted(H.edge_of[order], np.arange(H.m))]] = True
    return mask


def run_rowgen(H: Hypergraph, h, model: Model, added: np.ndarray, time_limit: float | None) -> tuple[float, int]:
    """Cutting-plane loop on a model holding the incidence rows marked in ``added`` (bool [nnz],
    updated in place): solve, add every violated row z_e <= x_{v,c(e)}, re-solve (an LP keeps its
    basis: a dual simplex warm start; a MIP starts again on the larger model), until none is
    violated or HiGHS stops short of optimal. Exact: the model is a relaxation of the full one,
    so a solution satisfying every row is optimal for the full model. Returns the seconds spent
    in ``Highs.run`` and the number of rounds."""
    hs = _highspy()
    pairs, P = model.pairs, model.num_x
    t_run, rounds, t0 = 0.0, 0, time.perf_counter()
    while True:
        rounds += 1
        if time_limit is not None:
            # HiGHS compares time_limit with its own clock, which runs on across run() calls
            # (getRunTime): give it the clock so far plus what is left of ours
            left = max(1e-3, time_limit - (time.perf_counter() - t0))
            h.setOptionValue("time_limit", h.getRunTime() + left)
        t = time.perf_counter()
        h.run()
        t_run += time.perf_counter() - t
        if h.getModelStatus() != hs.HighsModelStatus.kOptimal:
            return t_run, rounds
        col = np.asarray(h.getSolution().col_value)
        viol = np.flatnonzero((col[P + H.edge_of] > col[pairs.of_entry] + ROWGEN_TOL) & ~added)
        if len(viol) == 0:
            return t_run, rounds
        added[viol] = True
        start, cols, vals = _incidence_rows(H, pairs, viol)
        k = len(viol)
        h.addRows(k, np.full(k, -hs.kHighsInf), np.zeros(k), 2 * k, start.astype(np.int32),
                  cols.astype(np.int32), vals)


def solve_lp(
    H: Hypergraph,
    method: str = DEFAULT_METHOD,
    time_limit: float | None = None,
    threads: int | None = None,
    device="cpu",
    tolerance: float | None = None,
) -> LPSolution:
    """Solve the LP with HiGHS.

    ``method``: ``rowgen`` (default) starts from one incidence row per edge and adds the violated
    ones until none is (exact: the last LP's optimum satisfies every row of the full LP, whose
    relaxation it is, so it is optimal for the full LP; each round re-solves from the previous
    basis with the dual simplex); ``ipm``, ``simplex``, ``pdlp`` or ``choose`` solve the full model
    with that HiGHS ``solver`` (pdlp is approximate); ``pdhg`` is icmlkit's restarted PDHG in torch
    (lib/solve_maxecc/pdhg.py, relative gap 1e-4 certified by its dual bound ``upper_bound``, runs on
    ``device``), for instances where row generation stops paying. Measured on DAWN (2 cores): rowgen 0.9 s,
    ipm 40 s, dual simplex 80 s.

    When HiGHS stops early (time limit) the best primal point it has is returned with its status;
    ``z`` is then lowered to min_v x_{v,c(e)} so (x, z) stays feasible and ``value`` is honest.
    ``seconds_solve`` is the bare ``Highs.run()`` time (summed over rowgen's rounds). ``tolerance``
    (ipm, pdlp): see :func:`highs_options`.
    """
    if method == "pdhg":
        from icmlkit.lib.solve_maxecc.pdhg import solve_lp_pdhg

        return solve_lp_pdhg(H, time_limit=time_limit, device=device)[0]
    rowgen = method == "rowgen"
    opts = highs_options("simplex" if rowgen else method, time_limit, threads, tolerance)
    t0 = time.perf_counter()
    pairs = incident_pairs(H)
    added = first_rows(H, pairs) if rowgen else None
    model = build_model(H, entries=np.flatnonzero(added) if rowgen else None, pairs=pairs)
    h = new_highs(opts)
    h.passModel(model.lp)
    t1 = time.perf_counter()
    if rowgen:
        seconds_run, _ = run_rowgen(H, h, model, added, time_limit)
    else:
        h.run()
        seconds_run = time.perf_counter() - t1
    status = h.getModelStatus()
    col = np.asarray(h.getSolution().col_value, dtype=np.float64)
    if col.shape != (model.num_x + model.num_z,):
        col = np.zeros(model.num_x + model.num_z)
    x = np.clip(col[: model.num_x], 0.0, 1.0)
    z = np.clip(col[model.num_x:], 0.0, 1.0)
    z = np.minimum(z, _edge_min_x(H, model.pairs, x))
    hs = _highspy()
    return LPSolution(
        pair_v=model.pairs.pair_v,
        pair_c=model.pairs.pair_c,
        x=x,
        z=z,
        value=float(H.weight @ z),
        status=h.modelStatusToString(status),
        optimal=status == hs.HighsModelStatus.kOptimal,
        seconds_build=t1 - t0,
        seconds_solve=seconds_run,
        method=method,
        rows=added,
    )


def save_lp(path, sol: LPSolution) -> None:
    """Save an LP solution as .npz (atomic)."""
    write_npz(
        path,
        pair_v=sol.pair_v, pair_c=sol.pair_c, x=sol.x, z=sol.z,
        value=np.float64(sol.value), status=np.str_(sol.status), optimal=np.bool_(sol.optimal),
        seconds_build=np.float64(sol.seconds_build), seconds_solve=np.float64(sol.seconds_solve),
        method=np.str_(sol.method), upper_bound=np.float64(np.nan if sol.upper_bound is None else sol.upper_bound),
    )


FEAS_TOL = 1e-6  # slack allowed in a loaded LP's rows and objective (solver tolerances)


def _check_feasible(H: Hypergraph, pairs: Pairs, x: np.ndarray, z: np.ndarray, value: float, name: str) -> None:
    """Refuse a loaded LP that is not a feasible point of the relaxation or whose stored value is
    not w.z: rounding an infeasible x would report factors the algorithms never proved."""
    load = np.bincount(pairs.pair_v, weights=x, minlength=H.n)
    if load.max(initial=0.0) > 1 + FEAS_TOL:
        v = int(np.argmax(load))
        raise InputError(f"infeasible LP: sum_c x[{H.node_ids[v]}, c] = {load[v]:.6g} > 1", name)
    slack = z[H.edge_of] - x[pairs.of_entry]
    if slack.size and slack.max() > FEAS_TOL:
        e = int(H.edge_of[np.argmax(slack)])
        raise InputError(f"infeasible LP: z of edge {e} exceeds x of one of its vertices by {slack.max():.3g}", name)
    wz = float(H.weight @ z)
    if abs(wz - value) > FEAS_TOL * max(1.0, abs(wz)):
        raise InputError(f"the stored value {value:.10g} is not w.z = {wz:.10g}", name)


def load_lp(path, H: Hypergraph) -> LPSolution:
    """Load an LP solution saved by :func:`save_lp`, checking it belongs to ``H``, is feasible
    (capacity and incidence rows to :data:`FEAS_TOL`) and that its value is w.z."""
    d = load_npz(path, required=("pair_v", "pair_c", "x", "z", "value", "status", "optimal"))
    name = display_name(path)
    pairs = incident_pairs(H)
    if not (np.array_equal(d["pair_v"], pairs.pair_v) and np.array_equal(d["pair_c"], pairs.pair_c)):
        raise InputError("the LP's (vertex, colour) pairs do not match the instance", name)
    if d["z"].shape != (H.m,):
        raise InputError(f"the LP has {d['z'].shape[0]} edge values, the instance {H.m} edges", name)
    x, z = d["x"].astype(np.float64), d["z"].astype(np.float64)
    if x.shape != pairs.pair_v.shape or not (np.all((x >= 0) & (x <= 1)) and np.all((z >= 0) & (z <= 1))):
        raise InputError("x and z must lie in [0, 1], one x per pair", name)
    _check_feasible(H, pairs, x, z, float(d["value"]), name)
    return LPSolution(
        pair_v=pairs.pair_v, pair_c=pairs.pair_c, x=x, z=z, value=float(d["value"]),
        status=str(d["status"]), optimal=bool(d["optimal"]),
        seconds_build=float(d.get("seconds_build", 0.0)), seconds_solve=float(d.get("seconds_solve", 0.0)),
        method=str(d.get("method", "")),
        upper_bound=None if np.isnan(float(d.get("upper_bound", np.nan))) else float(d["upper_bound"]),
    )
