"""fed-stream --personalised: each client's own model (its local model of the round) scored on its own
current and next-period distribution; the paired bootstrap interval of paired_ci."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fuzzing import run_inprocess
from icmlkit.lib.core.errors import UsageError
from icmlkit.lib.fed_stream.compare import paired_ci
from icmlkit.lib.fed_stream.config import RunConfig, StreamConfig

TOOL = "fed-stream"


def tiny(seed=0, **kw):
    from icmlkit.lib.fed_stream.streams import make_stream

    cfg = StreamConfig(**{"dataset": "gaussian", "clients": 3, "periods": 5, "arrivals": 12, "dim": 6,
                          "test_per_group": 20, **kw})
    return make_stream(cfg, seed=seed)


def cfg(**kw):
    return RunConfig(**{"model": "logreg", "buffer": 24, "epochs": 1, "batch_size": 16, "personalised": True,
                        **kw})


def test_each_client_is_scored_on_its_own_current_and_next_period(monkeypatch):
    """Per-client group accuracies are replaced by a known (K, G) table: every row must be
    hist[k, t] @ acc[k] and hist[k, t+1] @ acc[k] for its own client k (a swapped client, a wrong
    period or the global model's accuracies would give other numbers)."""
    from icmlkit.lib.fed_stream import models
    from icmlkit.lib.fed_stream.sim import run_stream

    s = tiny(heterogeneity=1.0, alpha=0.2)
    K, T, G = s.clients, s.periods, s.groups
    table = torch.as_tensor(np.random.default_rng(3).random((K, G)), dtype=torch.float64)
    seen = []

    def fake(model, stacked, X, Y, Gt, n_groups):
        seen.append(next(iter(stacked.values())).shape[0])
        return table.clone()

    monkeypatch.setattr(models, "client_group_accuracy", fake)
    res = run_stream(cfg(), s, seed=0, warn=False)
    assert seen == [K] * T
    acc = table.numpy()
    for r in res.rows:
        k, t = r["client"], r["period"]
        assert r["acc_personal_current"] == pytest.approx(s.hist[k, t] @ acc[k], abs=1e-12)
        if t + 1 < T:
            assert r["acc_personal_next"] == pytest.approx(s.hist[k, t + 1] @ acc[k], abs=1e-12)
        else:
            assert r["acc_personal_next"] is None
    nxt = [r["acc_personal_next"] for r in res.rows if r["period"] < T - 1]
    assert res.summary["acc_personal_next_time_avg"] == pytest.approx(np.mean(nxt))
    assert res.summary["acc_personal_time_avg"] == pytest.approx(np.mean([r["acc_personal_current"] for r in res.rows]))


def test_client_group_accuracy_scores_each_clients_own_model():
    from icmlkit.lib.fed_stream.models import build_model, client_group_accuracy, group_accuracy, init_params

    model = build_model("logreg", 4, 3, 0)
    rng = torch.Generator().manual_seed(0)
    ps = [{k: torch.randn(v.shape, generator=rng) for k, v in init_params(model, "cpu").items()} for _ in range(3)]
    stacked = {k: torch.stack([p[k] for p in ps]) for k in ps[0]}
    X = torch.randn(60, 4, generator=rng)
    Y = torch.randint(0, 3, (60,), generator=rng)
    Gt = torch.randint(0, 2, (60,), generator=rng)
    got = client_group_accuracy(model, stacked, X, Y, Gt, 2)
    assert got.shape == (3, 2)
    for k in range(3):
        assert torch.equal(got[k], group_accuracy(model, ps[k], X, Y, Gt, 2))
    assert not torch.equal(got[0], got[1])


def test_own_models_beat_the_global_one_on_disjoint_clients():
    """Clients with (nearly) disjoint label distributions: each client's local model, fitted to its
    own buffer, scores higher on its own next period than the one global model does."""
    from icmlkit.lib.fed_stream.sim import run_stream

    s = tiny(clients=4, periods=8, heterogeneity=1.0, alpha=0.05, separation=1.0, drift="trending")
    sm = run_stream(cfg(strategy="fedavg-fifo", epochs=3, lr=0.5), s, seed=0, warn=False).summary
    assert sm["acc_personal_next_time_avg"] > sm["acc_next_time_avg"] + 0.05


def test_without_the_flag_no_personal_columns_and_flower_refuses_it():
    from icmlkit.lib.fed_stream.sim import run_stream

    s = tiny()
    res = run_stream(cfg(personalised=False), s, seed=0, warn=False)
    assert "acc_personal_next" not in res.rows[0] and "acc_personal_time_avg" not in res.summary
    with pytest.raises(UsageError, match="in-process"):
        cfg(engine="flower-sim").check()
    # the flag changes scoring only: the global model's numbers are the same bytes
    on = run_stream(cfg(), s, seed=0, warn=False)
    assert [r["acc_current"] for r in on.rows] == [r["acc_current"] for r in res.rows]
    assert all(torch.equal(on.params[k], res.params[k]) for k in res.params)


def test_cli_run_personalised_writes_the_columns(tmp_path, capsys):
    from icmlkit.lib.fed_stream.streams import write_stream

    write_stream(tmp_path / "s.npz", tiny())
    out = tmp_path / "r"
    code, stdout, err = run_inprocess(TOOL, ["run", str(tmp_path / "s.npz"), "-o", str(out), "-s", "fedavg-fifo",
                                             "--model", "logreg", "--buffer", "24", "--epochs", "1", "--personalised",
                                             "--json"], capsys)
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["personalised"] is True and 0 <= summary["acc_personal_next_time_avg"] <= 1
    header = (out / "periods.csv").read_text().splitlines()[0].split(",")
    assert header[-2:] == ["acc_personal_current", "acc_personal_next"]


def test_paired_ci_bootstrap_interval():
    d = paired_ci([0.5, 0.6, 0.7, 0.62, 0.58], [0.5, 0.55, 0.6, 0.6, 0.5], boot=2000, seed=1)
    assert d["boot_low"] <= d["diff"] <= d["boot_high"] and d["boot"] == 2000
    assert d["ci_low"] < d["boot_low"] and d["boot_high"] < d["ci_high"]  # 5 seeds: bootstrap is narrower
    same = paired_ci([0.3, 0.4, 0.5], [0.2, 0.3, 0.4], boot=100)
    assert same["boot_low"] == pytest.approx(0.1) and same["boot_high"] == pytest.approx(0.1)
    assert "boot_low" not in paired_ci([1.0, 2.0], [0.0, 1.0])
