"""The derive-docalc procedure as a Python API (what the command line calls).

1. parse G and Q = P(y | do(x), w);
2. enumerate Q's equivalence class (exact BFS on the derivation graph, with a cap);
3. run IDC on every member (members with X' = {} are also kept as the observational estimand
   they already are);
4. deduplicate the estimands: canonical form first, then a numerical fingerprint on a random joint
   distribution (same functional = same estimand);
5. optionally estimate every estimand on data (discrete plug-in or linear-Gaussian), bootstrap its
   variance and rank the estimands by it (:func:`estimate`: ``derive-docalc estimate``).

``projections=True`` adds an extension that is NOT part of the paper: the estimands that ID/IDC
returns for the class members in the latent projections of G that drop one observed variable
outside the query (valid because a latent projection is a causal model of the marginal; it is how
the front-door estimand of the front-door + back-door graph appears).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from icmlkit.lib.causal.admg import ADMG, latent_projection
from icmlkit.lib.causal.parse import Query
from icmlkit.lib.core.errors import CheckFailed, InputError, UsageError
from icmlkit.lib.docalc.config import EstimateConfig
from icmlkit.lib.docalc import expr as E
from icmlkit.lib.docalc.derivation import EquivalenceClass, RuleOracle, canonical_test, equivalence_class
from icmlkit.lib.docalc.estimate import (DiscreteTables, GaussianMoments, bootstrap_tables, counts_table,
                                         evaluate_table, fingerprint, gaussian_effect, rank)
from icmlkit.lib.docalc.identify import NotIdentifiable, identify


def validate_query(G: ADMG, q: Query) -> None:
    unknown = sorted((q.Y | q.X | q.W) - set(G.nodes))
    if unknown:
        raise UsageError(f"query variable {unknown[0]!r} is not in the graph")


@dataclass
class Estimand:
    expr: E.Expr
    members: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    plain_id: bool = False

    @property
    def text(self) -> str:
        return E.text(self.expr)

    def row(self) -> dict:
        return {"estimand": self.text, "latex": E.latex(self.expr), "members": self.members,
                "sources": sorted(set(self.sources)), "plain_id": self.plain_id}


@dataclass
class ClassEstimands:
    cls: EquivalenceClass
    estimands: list[Estimand]
    plain_id: E.Expr | None
    members: list[dict]
    hedge: str | None = None

    @property
    def identifiable(self) -> bool:
        return bool(self.estimands)


def _free_target(q: Query, e: E.Expr, G: ADMG) -> list[str]:
    vs = set(q.Y | q.X | q.W) | set(E.free(e))
    return [v for v in G.nodes if v in vs]


def check_equivalence(G: ADMG, q1: Query, q2: Query, exhaustive: bool = False) -> dict:
    """Decide whether ``q1`` and ``q2`` are equal under the do-calculus (a summary dict).

    1. different outcome sets are never equivalent (the calculus never changes Y);
    2. otherwise the four d-separation tests of the canonical path R2 up, R3 up, R3 down, R2 down
       (Theorem 6 / Corollary 1; the step sets are reconstructed); the non-empty steps of a passing
       path are the witness;
    3. with ``exhaustive``, also by membership in the breadth-first class (the reference), and
       whether the two routes agree.
    A non-equivalent pair is an answer (``equivalent: false``), not an error.
    """
    summary = {"query1": q1.text(G.nodes), "query2": q2.text(G.nodes)}
    if q1.Y != q2.Y:
        summary.update({"equivalent": False, "tests": [], "witness": [],
                        "reason": "different outcome sets: the do-calculus never changes the outcome"})
    else:
        o = RuleOracle(G, q1.Y)
        eq, tests = canonical_test(o, (o.mask_of(q1.X), o.mask_of(q1.W)), (o.mask_of(q2.X), o.mask_of(q2.W)))
        summary.update({"equivalent": bool(eq), "tests": tests,
                        "witness": [{k: t[k] for k in ("rule", "Z", "from", "to")} for t in tests
                                    if eq and not t["empty"]]})
    if exhaustive:
        ex = False
        if q1.Y == q2.Y:
            o = RuleOracle(G, q1.Y)
            ex = (o.mask_of(q2.X), o.mask_of(q2.W)) in set(equivalence_class(G, q1).members)
        summary["exhaustive_equivalent"] = bool(ex)
        summary["agree"] = bool(ex) == summary["equivalent"]
    return summary


def class_estimands(G: ADMG, q: Query, cap: int = 200_000, rules=(1, 2, 3), projections: bool = False,
                    dedupe_numeric: bool = True) -> ClassEstimands:
    validate_query(G, q)
    cls = equivalence_class(G, q, rules=rules, cap=cap)
    out: list[Estimand] = []
    by_text: dict[str, Estimand] = {}
    members = []
    plain = None
    hedge = None

    def add(e: E.Expr, member: str, source: str, is_plain=False):
        e = E.canonical(e)
        t = E.text(e)
        est = by_text.get(t)
        if est is None:
            est = Estimand(e)
            by_text[t] = est
            out.append(est)
        if member not in est.members:
            est.members.append(member)
        est.sources.append(source)
        est.plain_id |= is_plain
        return est

    queries = [cls.query(m) for m in cls.members]
    for i, mq in enumerate(queries):
        name = mq.text(G.nodes)
        row = {"member": name, "observational": not mq.X, "identifiable": True, "estimand": None}
        if not mq.X:
            add(E.Prob(tuple(mq.Y), tuple(mq.W)), name, "observational")
        try:
            e = identify(G, mq)
            est = add(e, name, "IDC", is_plain=(i == 0))
            row["estimand"] = est.text
            if i == 0:
                plain = est.expr
        except NotIdentifiable as exc:
            row["identifiable"] = bool(not mq.X)
            row["hedge"] = str(exc)
            if i == 0:
                hedge = str(exc)
        members.append(row)
    if projections:
        qvars = q.Y | q.X | q.W
        for v in [u for u in G.nodes if u not in qvars]:
            H = latent_projection(G.nodes, G.directed, {v}, G.bidirected)
            for mq in queries:
                if v in mq.X | mq.W:
                    continue
                try:
                    add(identify(H, mq), mq.text(G.nodes), f"IDC in the projection without {v}")
                except NotIdentifiable:
                    pass
    if dedupe_numeric and len(out) > 1 and len(G.nodes) <= 10:
        kept: list[Estimand] = []
        prints: list[tuple[frozenset, np.ndarray]] = []
        for est in out:
            tg = _free_target(q, est.expr, G)
            fp = fingerprint(est.expr, list(G.nodes), tg)
            dup = None
            for (fv, f), k in zip(prints, kept):
                if fv == frozenset(tg) and f.shape == fp.shape and np.allclose(f, fp, rtol=1e-10, atol=1e-12):
                    dup = k
                    break
            if dup is None:
                kept.append(est)
                prints.append((frozenset(tg), fp))
            else:
                dup.members += [m for m in est.members if m not in dup.members]
                dup.sources += est.sources
                dup.plain_id |= est.plain_id
        out = kept
    return ClassEstimands(cls, out, plain, members, hedge)


# --------------------------------------------------------------------------- data


def read_data(path: str, G: ADMG):
    """Read a CSV with one column per observed variable (names matched exactly, else
    case-insensitively). Returns (frame restricted to G.nodes in order, column names)."""
    import pandas as pd

    from icmlkit.lib.core.io import open_text

    with open_text(path) as fh:
        try:
            df = pd.read_csv(fh)
        except Exception as exc:  # pandas' parser errors carry the line
            raise InputError(f"cannot parse CSV: {exc}", path) from None
    cols = {}
    for v in G.nodes:
        if v in df.columns:
            cols[v] = v
        else:
            cand = [c for c in df.columns if str(c).lower() == v.lower()]
            if len(cand) != 1:
                raise InputError(f"column {v!r}: missing (the graph's variables must all be columns; "
                                 f"found {', '.join(map(str, df.columns[:12]))})", path, 1)
            cols[v] = cand[0]
    df = df[[cols[v] for v in G.nodes]]
    df.columns = list(G.nodes)
    bad = df.isna().any(axis=1).to_numpy()
    if bad.any():
        r = int(np.argmax(bad))
        col = df.columns[int(np.argmax(df.iloc[r].isna().to_numpy()))]
        raise InputError(f"column {col!r}: empty or NaN value", path, r + 2)
    for c in df.columns:
        if df[c].dtype.kind == "f" and not np.isfinite(df[c].to_numpy()).all():
            r = int(np.argmax(~np.isfinite(df[c].to_numpy())))
            raise InputError(f"column {c!r}: {df[c].iloc[r]} is not a finite number", path, r + 2)
    if len(df) < 2:
        raise InputError("needs at least two data rows", path)
    return df


def guess_kind(df) -> str:
    for c in df.columns:
        col = df[c]
        if col.dtype.kind not in "iub" and not (col.dtype.kind == "f" and np.all(np.mod(col.to_numpy(), 1) == 0)):
            if col.dtype.kind == "O":
                continue
            return "gaussian"
        if col.nunique() > 10:
            return "gaussian"
    return "discrete"


def _ci(vals: np.ndarray, level: float) -> tuple[float, float]:
    a = (1 - level) / 2
    v = vals[np.isfinite(vals)]
    if not len(v):
        return float("nan"), float("nan")
    return float(np.quantile(v, a)), float(np.quantile(v, 1 - a))


def estimate_discrete(ce: ClassEstimands, q: Query, df, B: int, rng: np.random.Generator, level: float = 0.95):
    """Plug-in value of every estimand at the query's values, bootstrap variance and CI, ranked."""
    G = ce.cls.oracle.G
    codes, cards, labels = [], [], {}
    for v in G.nodes:
        uniq, inv = np.unique(df[v].astype(str).to_numpy(), return_inverse=True)
        order = sorted(range(len(uniq)), key=lambda i: (len(uniq[i]), uniq[i]))  # 2 < 10 for numbers
        pos = np.empty(len(uniq), dtype=np.int64)
        pos[order] = np.arange(len(uniq))
        labels[v] = [str(uniq[i]) for i in order]
        codes.append(pos[inv.ravel()])
        cards.append(len(uniq))
    data = np.stack(codes, 1)
    values = dict(q.values)
    target = [v for v in G.nodes if v in (q.Y | q.X | q.W)]
    cell = []
    for v in target:
        if v in values:
            s = str(values[v])
            if s not in labels[v]:
                alt = [l for l in labels[v] if _num_eq(l, s)]
                if not alt:
                    raise UsageError(f"query value {v}={s} does not occur in the data (values: {labels[v][:10]})")
                s = alt[0]
            cell.append(labels[v].index(s))
        else:
            cell.append(len(labels[v]) - 1)
    counts = counts_table(data, cards)
    T = DiscreteTables(counts / counts.sum(), list(G.nodes))
    Tb = DiscreteTables(bootstrap_tables(counts, B, rng), list(G.nodes))
    rows = []
    for est in ce.estimands:
        val = evaluate_table(est.expr, T, target)[(0, *cell)]
        bs = evaluate_table(est.expr, Tb, target)[(slice(None), *cell)]
        lo, hi = _ci(bs, level)
        rows.append({**est.row(), "estimate": float(val), "variance": float(np.nanvar(bs, ddof=1)),
                     "se": float(np.nanstd(bs, ddof=1)), "ci_low": lo, "ci_high": hi})
    at = {v: labels[v][c] for v, c in zip(target, cell)}
    return rank(rows), at


def _num_eq(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def estimate_gaussian(ce: ClassEstimands, q: Query, df, B: int, rng: np.random.Generator, level: float = 0.95,
                      source: str | None = None):
    """Linear-Gaussian plug-in of every estimand: the effect d E[y | do(x), w] / dx of the first
    outcome and first action (graph order), bootstrap variance and CI, ranked."""
    G = ce.cls.oracle.G
    if not q.X:
        raise UsageError("linear-Gaussian estimation needs an action do(x) in the query (the effect of x)")
    y = next(v for v in G.nodes if v in q.Y)
    x = next(v for v in G.nodes if v in q.X)
    try:
        data = df.to_numpy(dtype=np.float64)
    except ValueError:
        for c in df.columns:
            bad = ~df[c].astype(str).str.match(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$").to_numpy()
            if bad.any():
                raise InputError(f"column {c!r}: not a number: {df[c].iloc[int(np.argmax(bad))]!r}",
                                 source, int(np.argmax(bad)) + 2) from None
        raise
    M = GaussianMoments.from_data(data, list(G.nodes))
    Mb = GaussianMoments.bootstrap(data, list(G.nodes), B, rng)
    rows = []
    for est in ce.estimands:
        try:
            val = float(gaussian_effect(est.expr, M, y, x)[0])
            bs = gaussian_effect(est.expr, Mb, y, x)
        except (np.linalg.LinAlgError, ValueError):
            val, bs = float("nan"), np.full(B, np.nan)
        lo, hi = _ci(bs, level)
        rows.append({**est.row(), "estimate": val, "variance": float(np.nanvar(bs, ddof=1)),
                     "se": float(np.nanstd(bs, ddof=1)), "ci_low": lo, "ci_high": hi})
    return rank(rows), {"effect_of": x, "on": y}


# --------------------------------------------------------------------------- `estimate`


TABLE_COLUMNS = ["rank", "estimate", "se", "variance", "ci_low", "ci_high", "plain_id", "estimand", "members"]
SUMMARY_KEYS = ("rank", "estimand", "estimate", "se", "variance", "ci_low", "ci_high", "members", "sources",
                "plain_id")


@dataclass
class EstimateResult:
    kind: str
    n: int
    target: dict
    rows: list[dict]      # ranked (rank 1 = smallest bootstrap variance)

    def table_rows(self) -> list[dict]:
        """The ranked estimands as table rows (``TABLE_COLUMNS``; members joined by '; ')."""
        return [{**{c: r.get(c) for c in TABLE_COLUMNS}, "members": "; ".join(r["members"])} for r in self.rows]

    @property
    def summary(self) -> dict:
        plain = [r["rank"] for r in self.rows if r["plain_id"]]
        return {"kind": self.kind, "n": self.n, "target": self.target, "identifiable": True,
                "n_estimands": len(self.rows), "estimates": [{k: r[k] for k in SUMMARY_KEYS} for r in self.rows],
                "best": self.rows[0]["estimand"], "plain_id_rank": plain[0] if plain else None}


def estimate(cfg: EstimateConfig, G: ADMG, q: Query, df, seed: int = 0, source: str | None = None) -> EstimateResult:
    """Steps 1-5 on data: the class's estimands (:func:`class_estimands`), each estimated on ``df``
    with ``cfg.bootstrap`` replicates from the ``bootstrap`` stream of ``seed``, ranked by variance.
    A query that is not identifiable is a :class:`CheckFailed` (exit 3): nothing to estimate."""
    from icmlkit.lib.core.runtime import numpy_rng

    ce = class_estimands(G, q, cap=cfg.cap, projections=cfg.projections)
    if not ce.identifiable:
        raise CheckFailed(f"{q.text(G.nodes)} is not identifiable ({ce.hedge}); nothing to estimate")
    kind = guess_kind(df) if cfg.kind == "auto" else cfg.kind
    rng = numpy_rng(seed, "bootstrap")
    if kind == "discrete":
        rows, target = estimate_discrete(ce, q, df, cfg.bootstrap, rng, cfg.level)
    else:
        rows, target = estimate_gaussian(ce, q, df, cfg.bootstrap, rng, cfg.level, source=source)
    return EstimateResult(kind, int(len(df)), target, rows)
