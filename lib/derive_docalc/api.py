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
from icmlkit.lib.derive_docalc.config import EstimateConfig
from icmlkit.lib.derive_docalc import expr as E
from icmlkit.lib.derive_docalc.derivation import EquivalenceClass, RuleOracle, canonical_test, equivalence_class
from icmlkit.lib.derive_docalc.estimate import (DiscreteTables, GaussianMoments, bootstrap_tables, counts_table,
                                         evaluate_table, fingerprint, gaussian_effect, rank)
from icmlkit.lib.derive_docalc.identify import NotIdentifiable, identify


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

    @property
    def in_class(self) -> bool:
        """Whether some member of the class (or of a latent projection, with the extension) gives this
        estimand; False for an estimator added beside the class (simplified ID, optimal adjustment)."""
        return bool(self.members)

    def row(self) -> dict:
        return {"estimand": self.text, "latex": E.latex(self.expr), "members": self.members,
                "sources": sorted(set(self.sources)), "plain_id": self.plain_id, "in_class": self.in_class}


@dataclass
class ClassEstimands:
    cls: EquivalenceClass
    estimands: list[Estimand]
    plain_id: E.Expr | None
    members: list[dict]
    hedge: str | None = None
    query: Query | None = None            # the query over the kept variables (values kept)
    simplified_id: E.Expr | None = None   # plain ID simplified by d-separation
    optimal_set: frozenset | None = None  # O(X, Y) of Henckel et al. when valid
    optimal: E.Expr | None = None         # its adjustment estimand
    simplest: E.Expr | None = None        # with simplify_members: the smallest in-class estimand (E.size_key)

    @property
    def identifiable(self) -> bool:
        return any(e.in_class for e in self.estimands)

    @property
    def graph(self) -> ADMG:
        return self.cls.oracle.G

    def baselines_summary(self) -> dict:
        G = self.graph
        return {"simplified_id": E.text(self.simplified_id) if self.simplified_id is not None else None,
                "optimal_adjustment_set": (sorted(self.optimal_set, key=G.index.get)
                                           if self.optimal_set is not None else None),
                "optimal_adjustment": E.text(self.optimal) if self.optimal is not None else None}


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


def adjustment_estimand(Y, X, Z) -> E.Expr:
    """sum_Z P(y | x, z) P(z) (P(y | x) for an empty Z)."""
    if not Z:
        return E.Prob(tuple(Y), tuple(X))
    return E.canonical(E.Sum(tuple(Z), E.Prod((E.Prob(tuple(Y), tuple(X) + tuple(Z)), E.Prob(tuple(Z))))))


def class_estimands(G: ADMG, q: Query, cap: int = 200_000, rules=(1, 2, 3), projections: bool = False,
                    dedupe_numeric: bool = True, prune: bool = True, baselines: bool = False,
                    simplify_members: bool = False) -> ClassEstimands:
    """Steps 1-4: the class of ``q`` (variables with no path to Y pruned first when ``prune``), IDC
    on every member, deduplicated estimands. ``baselines`` adds two estimators beside the class
    (not in the paper): plain ID simplified by d-separation and the optimal adjustment set.
    ``simplify_members`` (estimand-level simplification, not in the paper): every member's
    estimand is also simplified by d-separation (:func:`identify.simplify`: each factor P(A | C)
    loses the c with A _||_ c | C \\ c, then the sums that vanish), the simplified estimand is a
    class estimand too, and each member row gets ``estimand_simplified``, ``size`` and
    ``size_simplified`` (summed variables, largest factor arity, factors: :func:`expr.size`);
    ``simplest`` is the smallest in-class estimand."""
    from icmlkit.lib.causal.adjust import optimal_adjustment_set
    from icmlkit.lib.derive_docalc.identify import simplify

    validate_query(G, q)
    cls = equivalence_class(G, q, rules=rules, cap=cap, pruning=prune)
    Gr = cls.oracle.G
    kept = set(Gr.nodes)
    qr = Query(q.Y, q.X & kept, q.W & kept, tuple((k, v) for k, v in q.values if k in kept))
    out: list[Estimand] = []
    by_text: dict[str, Estimand] = {}
    members = []
    plain = None
    hedge = None

    def add(e: E.Expr, member: str | None, source: str, is_plain=False):
        e = E.canonical(e)
        t = E.text(e)
        est = by_text.get(t)
        if est is None:
            est = Estimand(e)
            by_text[t] = est
            out.append(est)
        if member is not None and member not in est.members:
            est.members.append(member)
        est.sources.append(source)
        est.plain_id |= is_plain
        return est

    queries = [cls.query(m) for m in cls.members]
    for i, mq in enumerate(queries):
        name = mq.text(Gr.nodes)
        row = {"member": name, "observational": not mq.X, "identifiable": True, "estimand": None}
        if not mq.X:
            obs = add(E.Prob(tuple(mq.Y), tuple(mq.W)), name, "observational")
            if simplify_members:
                add(simplify(Gr, obs.expr), name, "observational simplified by d-separation")
        try:
            e = identify(Gr, mq)
            est = add(e, name, "IDC", is_plain=(i == 0))
            row["estimand"] = est.text
            if simplify_members:
                se = add(simplify(Gr, est.expr), name, "IDC simplified by d-separation")
                row.update({"estimand_simplified": se.text, "size": E.size(est.expr),
                            "size_simplified": E.size(se.expr)})
            if i == 0:
                plain = est.expr
        except NotIdentifiable as exc:
            row["identifiable"] = bool(not mq.X)
            row["hedge"] = str(exc)
            if i == 0:
                hedge = str(exc)
        members.append(row)
    if projections:
        qvars = qr.Y | qr.X | qr.W
        for v in [u for u in Gr.nodes if u not in qvars]:
            H = latent_projection(Gr.nodes, Gr.directed, {v}, Gr.bidirected)
            for mq in queries:
                if v in mq.X | mq.W:
                    continue
                try:
                    add(identify(H, mq), mq.text(Gr.nodes), f"IDC in the projection without {v}")
                except NotIdentifiable:
                    pass
    simplified = opt_set = opt = None
    if baselines and plain is not None:
        simplified = simplify(Gr, plain)
        add(simplified, None, "simplified ID (d-separation)")
    if baselines and qr.X and not qr.W:
        opt_set = optimal_adjustment_set(Gr, qr.X, qr.Y)
        if opt_set is not None:
            opt = adjustment_estimand(sorted(qr.Y), sorted(qr.X), sorted(opt_set, key=Gr.index.get))
            add(opt, None, "optimal adjustment set (Henckel et al. 2022)")
    if dedupe_numeric and len(out) > 1 and len(Gr.nodes) <= 10:
        kept_e: list[Estimand] = []
        prints: list[tuple[frozenset, np.ndarray]] = []
        for est in out:
            tg = _free_target(qr, est.expr, Gr)
            fp = fingerprint(est.expr, list(Gr.nodes), tg)
            dup = None
            for (fv, f), k in zip(prints, kept_e):
                if fv == frozenset(tg) and f.shape == fp.shape and np.allclose(f, fp, rtol=1e-10, atol=1e-12):
                    dup = k
                    break
            if dup is None:
                kept_e.append(est)
                prints.append((frozenset(tg), fp))
            else:
                dup.members += [m for m in est.members if m not in dup.members]
                dup.sources += est.sources
                dup.plain_id |= est.plain_id
        out = kept_e
    if simplified is not None:
        simplified = next(e.expr for e in out if "simplified ID (d-separation)" in e.sources)
    if opt is not None:
        opt = next(e.expr for e in out if any(s.startswith("optimal adjustment") for s in e.sources))
    simplest = None
    if simplify_members:
        ins = [e.expr for e in out if e.in_class]
        simplest = min(ins, key=E.size_key) if ins else None
    return ClassEstimands(cls, out, plain, members, hedge, qr, simplified, opt_set, opt, simplest)


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


@dataclass
class DiscreteData:
    """Integer-coded data for discrete plug-in estimation: the query's cell, the joint tables of the
    data and of ``B`` multinomial bootstrap resamples."""

    G: ADMG
    target: list[str]
    labels: dict
    cell: list[int]
    T: DiscreteTables
    Tb: DiscreteTables

    def values(self, e: E.Expr) -> tuple[np.ndarray, np.ndarray]:
        """The estimand over the target variables: (point array (*cards), bootstrap (B, *cards))."""
        return evaluate_table(e, self.T, self.target)[0], evaluate_table(e, self.Tb, self.target)

    def index_of(self, v: str, s: str, what: str) -> int:
        labels = self.labels[v]
        if s not in labels:
            alt = [l for l in labels if _num_eq(l, s)]
            if not alt:
                raise UsageError(f"{what} {v}={s} does not occur in the data (values: {labels[:10]})")
            s = alt[0]
        return labels.index(s)


def discrete_data(G: ADMG, q: Query, df, B: int, rng: np.random.Generator) -> DiscreteData:
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
    counts = counts_table(data, cards)
    T = DiscreteTables(counts / counts.sum(), list(G.nodes))
    Tb = DiscreteTables(bootstrap_tables(counts, B, rng), list(G.nodes))
    dd = DiscreteData(G, target, labels, [], T, Tb)
    dd.cell = [dd.index_of(v, str(values[v]), "query value") if v in values else len(labels[v]) - 1
               for v in target]
    return dd


def _discrete_contrast(dd: DiscreteData, q: Query, contrast: tuple[str, str]):
    """(function of a (L, *cards) array -> (L,) contrasts, description) for ``--contrast A,B``."""
    x = next(v for v in dd.G.nodes if v in q.X) if q.X else None
    if x is None:
        raise UsageError("--contrast needs an action do(x) in the query")
    xi = dd.target.index(x)
    ia, ib = (dd.index_of(x, c, "--contrast value") for c in contrast)
    y = next(v for v in dd.G.nodes if v in q.Y)
    yi = dd.target.index(y)
    given = dict(q.values)
    try:
        yvals = np.array([float(l) for l in dd.labels[y]])
    except ValueError:
        yvals = None
    mean = len(q.Y) == 1 and y not in given and yvals is not None
    xs = f"{x}={dd.labels[x][ia]}", f"{x}={dd.labels[x][ib]}"
    rest = ", ".join(f"{v}={dd.labels[v][c]}" for v, c in zip(dd.target, dd.cell) if v not in (x, y) and v in q.W)
    rest = f", {rest}" if rest else ""
    if mean:
        desc = f"E[{y} | do({xs[0]}){rest}] - E[{y} | do({xs[1]}){rest}]"
    else:
        ys = ", ".join(f"{v}={dd.labels[v][c]}" for v, c in zip(dd.target, dd.cell) if v in q.Y)
        desc = f"P({ys} | do({xs[0]}){rest}) - P({ys} | do({xs[1]}){rest})"

    def f(arr: np.ndarray) -> np.ndarray:
        def pick(xidx):
            idx = [slice(None)] + list(dd.cell)
            idx[1 + xi] = xidx
            if mean:
                idx[1 + yi] = slice(None)
                return arr[tuple(idx)] @ yvals
            return arr[tuple(idx)]
        return pick(ia) - pick(ib)

    return f, desc


def _row(est: Estimand, val: float, bs: np.ndarray, level: float, con=None) -> dict:
    lo, hi = _ci(bs, level)
    r = {**est.row(), "estimate": float(val), "variance": _nanvar(bs), "se": float(np.sqrt(_nanvar(bs))),
         "ci_low": lo, "ci_high": hi}
    if con is not None:
        cv, cb = con
        clo, chi = _ci(cb, level)
        r.update({"contrast": float(cv), "contrast_variance": _nanvar(cb), "contrast_se": float(np.sqrt(_nanvar(cb))),
                  "contrast_ci_low": clo, "contrast_ci_high": chi})
    return r


def _nanvar(v: np.ndarray) -> float:
    v = np.asarray(v, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(np.var(v, ddof=1)) if len(v) > 1 else float("nan")


def estimate_discrete(ce: ClassEstimands, q: Query, df, B: int, rng: np.random.Generator, level: float = 0.95,
                      contrast: tuple[str, str] | None = None):
    """Plug-in value of every estimand at the query's values, bootstrap variance and CI (and the
    contrast between two treatment values, with its CI), ranked by variance (of the contrast when
    one is asked for). Returns (rows, target, contrast description or None)."""
    dd = discrete_data(ce.graph, q, df, B, rng)
    cf, desc = _discrete_contrast(dd, q, contrast) if contrast else (None, None)
    rows = []
    for est in ce.estimands:
        val, bs = dd.values(est.expr)
        con = (cf(val[None])[0], cf(bs)) if cf else None
        rows.append(_row(est, val[tuple(dd.cell)], bs[(slice(None), *dd.cell)], level, con))
    at = {v: dd.labels[v][c] for v, c in zip(dd.target, dd.cell)}
    return rank(rows, "contrast_variance" if cf else "variance"), at, desc


def _num_eq(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def gaussian_data(G: ADMG, q: Query, df, B: int, rng: np.random.Generator, source: str | None = None):
    """(y, x, moments of the data, moments of B row-bootstrap resamples)."""
    if not q.X:
        raise UsageError("linear-Gaussian estimation needs an action do(x) in the query (the effect of x)")
    y = next(v for v in G.nodes if v in q.Y)
    x = next(v for v in G.nodes if v in q.X)
    try:
        data = df[list(G.nodes)].to_numpy(dtype=np.float64)
    except ValueError:
        for c in G.nodes:
            bad = ~df[c].astype(str).str.match(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$").to_numpy()
            if bad.any():
                raise InputError(f"column {c!r}: not a number: {df[c].iloc[int(np.argmax(bad))]!r}",
                                 source, int(np.argmax(bad)) + 2) from None
        raise
    return y, x, GaussianMoments.from_data(data, list(G.nodes)), GaussianMoments.bootstrap(data, list(G.nodes), B, rng)


def gaussian_values(e: E.Expr, y: str, x: str, M: GaussianMoments, Mb: GaussianMoments, B: int):
    try:
        return float(gaussian_effect(e, M, y, x)[0]), gaussian_effect(e, Mb, y, x)
    except (np.linalg.LinAlgError, ValueError, UsageError):  # UsageError: the estimand lacks the outcome
        return float("nan"), np.full(B, np.nan)


def estimate_gaussian(ce: ClassEstimands, q: Query, df, B: int, rng: np.random.Generator, level: float = 0.95,
                      source: str | None = None, contrast: tuple[str, str] | None = None):
    """Linear-Gaussian plug-in of every estimand: the effect d E[y | do(x), w] / dx of the first
    outcome and first action (graph order), bootstrap variance and CI, ranked; with ``contrast``
    (A, B) also the contrast (A - B) times the effect."""
    y, x, M, Mb = gaussian_data(ce.graph, q, df, B, rng, source)
    scale = desc = None
    if contrast:
        try:
            a, b = (float(c) for c in contrast)
        except ValueError:
            raise UsageError(f"--contrast: linear-Gaussian values must be numbers, got {','.join(contrast)!r}") from None
        scale = a - b
        desc = f"E[{y} | do({x}={contrast[0]})] - E[{y} | do({x}={contrast[1]})]"
    rows = []
    for est in ce.estimands:
        val, bs = gaussian_values(est.expr, y, x, M, Mb, B)
        rows.append(_row(est, val, bs, level, (val * scale, bs * scale) if scale is not None else None))
    return rank(rows, "contrast_variance" if scale is not None else "variance"), {"effect_of": x, "on": y}, desc


# --------------------------------------------------------------------------- `estimate`


TABLE_COLUMNS = ["rank", "estimate", "se", "variance", "ci_low", "ci_high", "contrast", "contrast_se", "contrast_ci_low",
                 "contrast_ci_high", "plain_id", "in_class", "estimand", "members", "sources"]
SUMMARY_KEYS = ("rank", "estimand", "estimate", "se", "variance", "ci_low", "ci_high", "members", "sources",
                "plain_id", "in_class")
CONTRAST_KEYS = ("contrast", "contrast_se", "contrast_variance", "contrast_ci_low", "contrast_ci_high")


@dataclass
class EstimateResult:
    kind: str
    n: int
    target: dict
    rows: list[dict]      # ranked (rank 1 = smallest bootstrap variance, of the contrast when asked)
    contrast_of: str | None = None
    pruned: list = field(default_factory=list)
    baselines: dict = field(default_factory=dict)

    def table_rows(self) -> list[dict]:
        """The ranked estimands as table rows (``TABLE_COLUMNS``; members and sources joined by '; ')."""
        return [{**{c: r.get(c) for c in TABLE_COLUMNS}, "members": "; ".join(r["members"]),
                 "sources": "; ".join(r["sources"])} for r in self.rows]

    @property
    def summary(self) -> dict:
        plain = [r["rank"] for r in self.rows if r["plain_id"]]
        keys = SUMMARY_KEYS + (CONTRAST_KEYS if self.contrast_of else ())
        best = next(r for r in self.rows if r["in_class"])
        return {"kind": self.kind, "n": self.n, "target": self.target, "identifiable": True,
                "n_estimands": len(self.rows), "estimates": [{k: r[k] for k in keys} for r in self.rows],
                "best": best["estimand"], "best_overall": self.rows[0]["estimand"],
                "plain_id_rank": plain[0] if plain else None, "contrast_of": self.contrast_of,
                "pruned": self.pruned, **self.baselines}


def estimate(cfg: EstimateConfig, G: ADMG, q: Query, df, seed: int = 0, source: str | None = None) -> EstimateResult:
    """Steps 1-5 on data: the class's estimands (:func:`class_estimands`; with ``cfg.baselines`` also
    simplified ID and the optimal adjustment set beside them), each estimated on ``df`` with
    ``cfg.bootstrap`` replicates from the ``bootstrap`` stream of ``seed``, ranked by variance (of
    the contrast with ``cfg.contrast``). A query that is not identifiable is a :class:`CheckFailed`
    (exit 3): nothing to estimate."""
    from icmlkit.lib.core.runtime import numpy_rng

    ce = class_estimands(G, q, cap=cfg.cap, projections=cfg.projections, prune=cfg.prune, baselines=cfg.baselines,
                         simplify_members=cfg.simplify)
    if not ce.identifiable:
        raise CheckFailed(f"{q.text(G.nodes)} is not identifiable ({ce.hedge}); nothing to estimate")
    kind = guess_kind(df[list(ce.graph.nodes)]) if cfg.kind == "auto" else cfg.kind
    rng = numpy_rng(seed, "bootstrap")
    if kind == "discrete":
        rows, target, desc = estimate_discrete(ce, ce.query, df, cfg.bootstrap, rng, cfg.level, cfg.contrast_values)
    else:
        rows, target, desc = estimate_gaussian(ce, ce.query, df, cfg.bootstrap, rng, cfg.level, source=source,
                                               contrast=cfg.contrast_values)
    return EstimateResult(kind, int(len(df)), target, rows, desc, list(ce.cls.pruned),
                          ce.baselines_summary() if cfg.baselines else {})
