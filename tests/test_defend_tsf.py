"""defend-tsf: the time-aware distance (= 2(1 - weighted Pearson)), both Stage-I criteria and DRLS on a
hand-made set with a tight poisoned cluster, the backcaster's reversed windows, the masked loss,
injection cells, MAE_P on a hand example, the CSV reader's errors, the command line (attack leaves
its input unchanged, train/eval/forecast, determinism, --resume, torchrun), malformed inputs."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import BIN, run_tool
from fuzzing import FuzzCase, MismatchCase, check_malformed, run_inprocess
from icmlkit.lib.defend_tsf import attack as atk
from icmlkit.lib.defend_tsf import timeguard as tg
from icmlkit.lib.defend_tsf.config import DataConfig, ModelConfig, SynthConfig, TrainConfig
from icmlkit.lib.defend_tsf.data import Scaler, read_series
from icmlkit.lib.defend_tsf.models import build_model
from icmlkit.lib.defend_tsf.synth import synthetic_series
from icmlkit.lib.defend_tsf.train import backcaster_windows

TOOL = "defend-tsf"
ROOT = Path(__file__).resolve().parents[1]
SPLIT = "0.6,0.2,0.2"
FAST = ["--split", SPLIT, "--t-b", "1", "--t-1", "1", "--t-2", "2", "--lr", "1e-3"]


def sha(p) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


# --------------------------------------------------------------------------- distances and criteria


def test_squared_distance_is_two_minus_two_weighted_pearson():
    g = torch.Generator().manual_seed(0)
    L, H = 12, 12
    v = torch.randn(40, L + H, generator=g, dtype=torch.float64) * 3 + 5
    w = tg.gaussian_weights(L, H, 2.0)
    assert abs(float(w.sum()) - 1) < 1e-15 and int(w.argmax()) == L
    z = tg.weighted_znorm(v, w)
    d2 = torch.cdist(z, z).square()
    mu = (v * w).sum(1, keepdim=True)
    d = v - mu
    cov = (w * d) @ d.T
    sd = torch.sqrt(torch.diag(cov))
    rho = cov / (sd[:, None] * sd[None, :])
    assert float((d2 - 2 * (1 - rho)).abs().max()) < 1e-10


def _cluster_set(n_clean=60, n_poison=8, L=6, H=6, seed=1):
    """Clean windows: independent random walks (unique); poisoned: one shape + tiny noise (tight cluster)."""
    rng = np.random.default_rng(seed)
    clean = rng.standard_normal((n_clean, L + H)).cumsum(1)
    shape = np.concatenate([np.zeros(L - 4), [0.5, -0.5, 0.5, -0.5], np.array(atk.CONE)[:H]])
    poison = shape[None] * 3 + 1e-3 * rng.standard_normal((n_poison, L + H))
    return np.vstack([clean, poison]), np.arange(n_clean, n_clean + n_poison)


def test_both_criteria_exclude_a_tight_poisoned_cluster():
    win, bad = _cluster_set()
    w = tg.gaussian_weights(6, 6, 2.0)
    z = tg.weighted_znorm(torch.as_tensor(win), w)
    d, i = tg.knn_graph(z, 10)
    graph = tg.NeighbourGraph(d[None], i[None])
    ndf = tg.ndf_mask(graph, k_nn=5, alpha=0.5)[0].numpy()
    assert not ndf[bad].any()                      # LARGEST neighbour distance kept: the cluster is out
    assert ndf.sum() == round(0.5 * len(win))
    # the backcaster's loss is high on poisoned windows (their past is not predictable from their future)
    loss = torch.ones(1, len(win), dtype=torch.float64)
    loss[0, torch.as_tensor(bad)] = 5.0
    loss[0, : 20] = 0.1
    rcf = tg.rcf_mask(loss, 0.5)[0].numpy()        # LOWEST backcast loss kept
    assert not rcf[bad].any() and rcf[:20].all()


def test_drls_keeps_windows_far_from_the_excluded_set_then_lowest_loss():
    win, bad = _cluster_set()
    w = tg.gaussian_weights(6, 6, 2.0)
    z = tg.weighted_znorm(torch.as_tensor(win), w)
    d, i = tg.knn_graph(z, 20)
    graph = tg.NeighbourGraph(d[None], i[None])
    N = len(win)
    pool = torch.ones(1, N, dtype=torch.bool)
    pool[0, torch.as_tensor(bad[:4])] = False       # half the cluster is already excluded
    dist = tg.distance_to_excluded(graph, pool, k_nn=3)[0]
    assert float(dist[torch.as_tensor(bad[4:])].max()) < float(dist[:60].min())  # the rest sits next to them
    # a poisoned window with a LOW loss still stays out: it is not a candidate
    loss = torch.ones(1, N, dtype=torch.float64)
    loss[0, torch.as_tensor(bad)] = 0.0
    new = tg.drls_pool(loss, graph, pool, ratio=0.3, pi=2.0, k_nn=3)[0]
    assert not new[torch.as_tensor(bad)].any() and int(new.sum()) == round(0.3 * N)
    # distance to the excluded set by hand for one window: mean of its k_nn nearest excluded neighbours
    n = 5
    ex = [(float(dd), int(j)) for dd, j in zip(graph.dist[0, n], graph.idx[0, n]) if not pool[0, j]][:3]
    if ex:
        assert abs(float(dist[n]) - np.mean([e[0] for e in ex])) < 1e-12
    else:
        assert dist[n] == float("inf")


def test_pool_count_floor_is_the_official_int_and_round_is_the_option():
    assert tg.pool_size(0.35, 577) == 201 and tg.pool_size(0.35, 577, "round") == 202   # int(201.95) vs 202
    assert tg.pool_size(0.2, 577) == 115 == tg.pool_size(0.2, 577, "round")
    assert tg.pool_size(0.001, 10) == 1 and tg.pool_size(1.0, 10) == 10                 # at least 1, at most N
    score = torch.arange(10, dtype=torch.float64)[None]
    assert int(tg.top_fraction(score, 0.35, largest=True).sum()) == 3                   # floor(3.5)
    assert int(tg.top_fraction(score, 0.37, largest=True, counting="round").sum()) == 4
    from icmlkit.lib.core.errors import UsageError
    with pytest.raises(UsageError, match="--pool-count"):
        tg.pool_size(0.5, 10, "ceil")


def test_stage2_optimizer_fresh_per_epoch_by_default_or_persistent(tmp_path, series_csv, monkeypatch, capsys):
    made = []
    real = torch.optim.Adam

    class Counting(real):
        def __init__(self, *a, **k):
            made.append(1)
            super().__init__(*a, **k)

    monkeypatch.setattr(torch.optim, "Adam", Counting)
    sums = {}
    for mode in ("per-epoch", "persistent"):
        made.clear()
        code, out, err = _cli(["train", str(series_csv), "-o", str(tmp_path / f"{mode}.pt"), "--defense", "timeguard",
                               *FAST, "--stage2-optimizer", mode, "--json"], capsys)
        assert code == 0, err
        sums[mode] = (len(made), json.loads(out)["val_mae"])
    # forecaster + backcaster, plus one fresh Adam per DRLS epoch (t_2 = 2) in the official form
    assert sums["per-epoch"][0] == 4 and sums["persistent"][0] == 2
    assert sums["per-epoch"][1] != sums["persistent"][1]
    code, _, err = _cli(["train", str(series_csv), "-o", str(tmp_path / "x.pt"), *FAST, "--pool-count", "ceil"],
                        capsys)
    assert code == 2 and "--pool-count" in err


def test_ratio_schedule_and_sample_filter_drops_whole_windows():
    assert tg.ratio_at(0, 30, 0.2, 0.5) == 0.2 and abs(tg.ratio_at(29, 30, 0.2, 0.5) - 0.5) < 1e-12
    loss = torch.rand(3, 50, generator=torch.Generator().manual_seed(0))
    m = tg.sample_filter_pool(loss, 0.4)
    assert (m == m[0:1]).all() and int(m[0].sum()) == 20  # the same windows on every channel


# --------------------------------------------------------------------------- losses, backcaster, models


def test_all_ones_mask_gives_the_plain_loss():
    g = torch.Generator().manual_seed(0)
    pred, y = torch.randn(8, 5, 3, generator=g) * 2, torch.randn(8, 5, 3, generator=g) * 2
    l_nc = tg.window_channel_loss(pred, y)
    assert l_nc.shape == (8, 3)
    plain = torch.nn.functional.smooth_l1_loss(pred, y)
    assert torch.allclose(tg.masked_loss(l_nc, torch.ones(8, 3)), plain, atol=1e-7)
    m = torch.zeros(8, 3)
    m[2, 1] = 1
    assert torch.allclose(tg.masked_loss(l_nc, m), l_nc[2, 1])


def test_backcaster_gets_the_reversed_future_and_predicts_the_reversed_past():
    sc = Scaler(np.array([1.0, -2.0]), np.array([2.0, 0.5]))
    x_raw = torch.arange(2 * 4 * 2, dtype=torch.float32).reshape(2, 4, 2)
    y_raw = 100 + torch.arange(2 * 3 * 2, dtype=torch.float32).reshape(2, 3, 2)
    x_norm = (x_raw - torch.tensor([1.0, -2.0])) / torch.tensor([2.0, 0.5])
    inp, tgt = backcaster_windows(x_norm, y_raw, sc)
    assert inp.shape == (2, 3, 2) and tgt.shape == (2, 4, 2)
    expect_in = ((y_raw - torch.tensor([1.0, -2.0])) / torch.tensor([2.0, 0.5])).flip(1)
    assert torch.allclose(inp, expect_in) and torch.allclose(tgt, x_raw.flip(1))
    assert float(inp[0, 0, 0]) == float(expect_in[0, 0, 0]) and float(tgt[0, 0, 0]) == float(x_raw[0, -1, 0])


@pytest.mark.parametrize("name", ["dlinear", "patchtst", "itransformer", "timesnet"])
def test_models_forecast_every_channel(name):
    torch.manual_seed(0)
    m = build_model(ModelConfig(model=name, d_model=16, n_heads=2), 24, 6, 3)
    out = m(torch.randn(5, 24, 3))
    assert out.shape == (5, 6, 3) and torch.isfinite(out).all()


# --------------------------------------------------------------------------- attack


def test_injection_touches_exactly_the_planned_cells():
    rng = np.random.default_rng(0)
    v = rng.standard_normal((100, 4))
    times, chans = np.array([10, 40]), np.array([1, 3])
    trig, pat = np.array([0.1, -0.2, 0.3, -0.4]), np.array(atk.CONE)
    out, mask = atk.inject(v, times, chans, trig, pat)
    planned = np.zeros_like(mask)
    for t in times:
        planned[t:t + 11, chans] = True
    assert (mask == planned).all() and (out[~planned] == v[~planned]).all()
    assert np.allclose(out[10:14, 1], v[9, 1] + trig) and np.allclose(out[14:21, 3], v[9, 3] + pat)
    tc, pc = atk.injection_cells(times, chans, 4, 7, 100, 4)
    assert ((tc | pc) == planned).all() and not (tc & pc).any()


def test_greedy_times_are_non_overlapping_and_prefer_high_mae():
    cand = np.arange(0, 200)
    score = np.zeros(cand.size)
    score[[50, 52, 120]] = [3.0, 2.0, 1.0]
    t = atk.greedy_times(score, cand, 3, gap=19)
    assert 50 in t and 52 not in t and 120 in t and np.diff(t).min() >= 19


def test_backtime_triggers_are_bounded_per_time_and_used_in_eval(tmp_path, series_csv, capsys):
    code, out, err = _cli(["attack", str(series_csv), "-o", str(tmp_path / "b.csv"), "--split", SPLIT,
                           "--attack", "backtime", "--rounds", "1", "--gen-steps", "5", "--surrogate-epochs", "1",
                           "--json"], capsys)
    assert code == 0, err
    rec = json.loads((tmp_path / "b.attack.json").read_text())
    tr = np.asarray(rec["train_triggers"])
    assert tr.shape == (len(rec["train_times"]), 4, len(rec["channels"])) and np.abs(tr).max() <= 0.2 + 1e-12
    assert np.ptp(tr, axis=0).max() > 0  # per-time triggers, not one fixed trigger
    a, b = read_series(series_csv), read_series(tmp_path / "b.csv")
    c = a.columns.index(rec["channels"][0])
    t = rec["train_times"][0]
    sc = Scaler(np.asarray(rec["mean"]), np.asarray(rec["std"]))
    zb, za = sc.transform(b.values), sc.transform(a.values)
    assert np.allclose(zb[t:t + 4, c], za[t - 1, c] + tr[0, :, 0], atol=1e-9)
    z = np.load(tmp_path / "b.triggered.npz")
    tt = np.asarray(rec["test_triggers"])
    t0, n0 = int(z["times"][0]), int(z["starts"][0])
    xz = (z["x"][0] - sc.mean) / sc.std
    i = list(rec["test_times"]).index(t0)
    assert np.allclose(xz[-4:, c], za[t0 - 1, c] + tt[i, :, 0], atol=1e-9)


def test_mae_poison_by_hand():
    pred = np.zeros((1, 4, 3))
    tgt = np.zeros((1, 4, 3))
    tgt[0, :, 1] = [1.0, 2.0, 3.0, 100.0]   # step 3 is past the pattern: ignored
    tgt[0, :, 0] = 50.0                    # channel 0 is not attacked: ignored
    assert atk.mae_poison(pred, tgt, np.array([1]), 3) == pytest.approx(2.0)


# --------------------------------------------------------------------------- files and the command line


@pytest.fixture
def series_csv(tmp_path) -> Path:
    from icmlkit.lib.defend_tsf.api import write_series

    p = tmp_path / "series.csv"
    write_series(p, synthetic_series(SynthConfig(rows=600, channels=4), 0))
    return p


def _cli(argv, capsys):
    return run_inprocess(TOOL, argv, capsys)


@pytest.fixture
def attacked(tmp_path, series_csv, capsys):
    before = sha(series_csv)
    code, out, err = _cli(["attack", str(series_csv), "-o", str(tmp_path / "p.csv"), "--split", SPLIT,
                           "--pattern-scale", "3", "--budget", "1", "--json"], capsys)
    assert code == 0, err
    assert sha(series_csv) == before     # the input is never modified
    return tmp_path / "p.csv", tmp_path / "p.attack.json", json.loads(out)


def test_attack_outputs_and_unchanged_input(attacked, series_csv):
    p, rec, summary = attacked
    assert summary["channels"] and summary["train_times"] >= 1 and summary["test_times"] >= 1
    a, b = read_series(series_csv), read_series(p)
    assert a.columns == b.columns and a.raw_dates == b.raw_dates
    r = json.loads(rec.read_text())
    chans = [a.columns.index(c) for c in r["channels"]]
    changed = a.values != b.values
    assert changed[:, [c for c in range(a.C) if c not in chans]].sum() == 0
    assert changed.sum() <= r["poisoned_cells"] and changed[int(0.6 * 600):].sum() == 0  # training rows only
    z = np.load(p.with_name("p.triggered.npz"))
    assert z["x"].shape[1:] == (12, 4) and z["y_target"].shape[1:] == (12, 4)


def test_train_eval_forecast_and_determinism(tmp_path, attacked, capsys):
    p, rec, _ = attacked
    outs = {}
    for d in ("timeguard", "none", "sample-filter"):
        code, out, err = _cli(["train", str(p), "-o", str(tmp_path / f"{d}.pt"), "--defense", d,
                               "--attack-record", str(rec), *FAST, "--json"], capsys)
        assert code == 0, err
        outs[d] = json.loads(out)
    tg_sum = outs["timeguard"]
    assert tg_sum["epochs"] == 4 and 0 <= tg_sum["pool_purity"] <= 1
    pools = np.load(tmp_path / "timeguard.pools.npz")
    assert (pools["init"] == (pools["rcf"] & pools["ndf"])).all()
    assert abs(pools["final"].mean(1) - 0.5).max() < 0.01   # beta per channel at the end
    assert outs["none"]["pool_fraction"] == 1.0
    log = (tmp_path / "timeguard.log.csv").read_text().splitlines()
    assert log[0].startswith("epoch,phase") and len(log) == 5
    # determinism: same seed -> same bytes
    code, _, err = _cli(["train", str(p), "-o", str(tmp_path / "again.pt"), "--defense", "timeguard",
                         "--attack-record", str(rec), *FAST], capsys)
    assert code == 0, err
    assert sha(tmp_path / "again.pt") == sha(tmp_path / "timeguard.pt")
    # eval
    code, out, err = _cli(["eval", str(tmp_path / "timeguard.pt"), str(p), "--attack-record", str(rec),
                           "--reference", str(tmp_path / "none.pt"), "--json"], capsys)
    assert code == 0, err
    ev = json.loads(out)
    for k in ("model", "defense", "attack", "mae_clean", "mae_poison", "mae_clean_ratio", "mae_poison_ratio",
              "pool_purity", "seq_len", "pred_len"):
        assert k in ev
    assert ev["mae_clean"] > 0 and ev["mae_poison"] > 0 and ev["pool_purity"] == pytest.approx(tg_sum["pool_purity"])
    # beside MAE_P, the level it has when the attack had no effect: mean |y_clean - y_target| over the
    # attacked cells of the held-out triggered test set (the attack's own .triggered.npz)
    z = np.load(p.with_name("p.triggered.npz"))
    ps, ch = int(z["pattern_steps"]), z["channels"]
    no_effect = np.abs(z["y_clean"][:, :ps][:, :, ch] - z["y_target"][:, :ps][:, :, ch]).mean()
    assert ev["mae_poison_no_effect"] == pytest.approx(float(no_effect), rel=1e-6) and no_effect > 0
    assert ev["mae_poison_vs_no_effect"] == pytest.approx(ev["mae_poison"] / ev["mae_poison_no_effect"])
    code, _, err = _cli(["eval", str(tmp_path / "timeguard.pt"), str(p), "--attack-record", str(rec),
                         "--fail-under-poison", "1e9"], capsys)
    assert code == 3
    # forecast
    code, out, err = _cli(["forecast", str(tmp_path / "none.pt"), str(p), "-o", str(tmp_path / "f.csv"),
                           "--json"], capsys)
    assert code == 0, err
    rows = (tmp_path / "f.csv").read_text().splitlines()
    assert len(rows) == 13 and rows[0].startswith("date,")


def test_preset_bench_is_the_benchmark_setting_and_flags_win(tmp_path, series_csv, capsys):
    """--preset bench = bench/defend_tsf.py's attack strength, model, lr and epochs; a flag beats it."""
    import importlib.util

    from icmlkit.lib.defend_tsf.config import PRESETS

    spec = importlib.util.spec_from_file_location("bench_defend_tsf", ROOT / "bench" / "defend_tsf.py")
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(ROOT / "bench"))
    b = PRESETS["bench"]
    assert b["attack"] == bench.ATTACK and b["train"]["lr"] == bench.LR
    assert (b["train"]["t_b"], b["train"]["t_1"], b["train"]["t_2"]) == bench._epochs(False)
    assert b["train"]["model"] == "itransformer"  # the model where the attack takes (docs: Benchmark)
    code, _, err = _cli(["attack", str(series_csv), "-o", str(tmp_path / "p.csv"), "--split", SPLIT,
                         "--preset", "bench"], capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "p.attack.json").read_text())["budget"] == 2.0
    code, _, err = _cli(["train", str(tmp_path / "p.csv"), "-o", str(tmp_path / "m.pt"), "--split", SPLIT,
                         "--preset", "bench", "--t-b", "1", "--t-1", "1", "--t-2", "1", "--d-model", "16"], capsys)
    assert code == 0, err
    cfg = json.loads((tmp_path / "m.config.json").read_text())
    assert cfg["model"]["model"] == "itransformer" and cfg["train"]["lr"] == 1e-3
    assert (cfg["train"]["t_b"], cfg["train"]["t_2"]) == (1, 1)  # the flags win over the preset
    code, _, err = _cli(["train", str(tmp_path / "p.csv"), "-o", str(tmp_path / "d.pt"), "--split", SPLIT,
                         "--t-b", "1", "--t-1", "1", "--t-2", "1"], capsys)
    assert code == 0, err
    cfg = json.loads((tmp_path / "d.config.json").read_text())
    assert cfg["model"]["model"] == "dlinear" and cfg["train"]["lr"] == 1e-4  # the paper's defaults


def test_resume_gives_the_same_bytes(tmp_path, series_csv, interrupting_checkpointer, monkeypatch, capsys):
    from icmlkit.lib.core import checkpoint

    args = ["train", str(series_csv), "--defense", "timeguard", *FAST, "--checkpoint-every", "2"]
    code, _, err = _cli([*args, "-o", str(tmp_path / "full.pt")], capsys)
    assert code == 0, err
    monkeypatch.setattr(checkpoint, "Checkpointer", interrupting_checkpointer)
    from conftest import Interrupted

    with pytest.raises(Interrupted):
        from icmlkit.cli._common import run_cli
        from icmlkit.cli.defend_tsf import cli

        cli.main(args=[*args, "-o", str(tmp_path / "cut.pt"), "--no-progress"], standalone_mode=False)
    assert (tmp_path / "cut.pt.ckpt.pt").exists() and not (tmp_path / "cut.pt").exists()
    monkeypatch.undo()
    code, out, err = _cli([*args, "-o", str(tmp_path / "cut.pt"), "--resume", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["resumed_from"] == 2
    assert sha(tmp_path / "cut.pt") == sha(tmp_path / "full.pt")
    assert (tmp_path / "cut.log.csv").read_bytes() == (tmp_path / "full.log.csv").read_bytes()
    assert not (tmp_path / "cut.pt.ckpt.pt").exists()


# --------------------------------------------------------------------------- bad input


def _write(tmp_path, text, name="bad.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


GOOD_HEAD = "date,a,b\n" + "".join(f"2020-01-01 {h:02d}:00:00,{h}.5,{2 * h}\n" for h in range(20))


@pytest.mark.parametrize("text,words", [
    ("time,a,b\n2020-01-01,1,2\n2020-01-02,1,2\n", ["no 'date' column", "line 1"]),
    (GOOD_HEAD.replace("5.5,10", "5.5,abc"), ["row 6", "column 'b'", "'abc' is not a number"]),
    (GOOD_HEAD.replace("7.5,14", "7.5,"), ["row 8", "column 'b'", "NaN gap", "--fill"]),
    (GOOD_HEAD.replace("2020-01-01 03:00:00", "yesterday"), ["row 4", "column 'date'", "not a date"]),
])
def test_bad_csv_exits_1_naming_file_row_and_column(tmp_path, capsys, text, words):
    bad = _write(tmp_path, text)
    out = tmp_path / "out"
    out.mkdir()
    code, _, err = _cli(["attack", str(bad), "-o", str(out / "p.csv"), "--split", SPLIT, "--seq-len", "2",
                         "--pred-len", "2"], capsys)
    assert code == 1 and err.startswith("Error:") and len(err.strip().splitlines()) == 1, err
    assert str(bad) in err and all(w in err for w in words), err
    assert not list(out.iterdir())


def test_fill_repairs_gaps_and_short_splits_are_rejected(tmp_path, capsys):
    bad = _write(tmp_path, GOOD_HEAD.replace("7.5,14", "7.5,"))
    s = read_series(bad, fill="linear")
    assert s.values[7, 1] == pytest.approx(14.0)
    assert read_series(bad, fill="ffill").values[7, 1] == pytest.approx(12.0)
    out = tmp_path / "out"
    out.mkdir()
    code, _, err = _cli(["attack", str(bad), "-o", str(out / "p.csv"), "--fill", "linear", "--split", SPLIT], capsys)
    assert code == 1 and "shorter than L + H" in err and str(bad) in err and not list(out.iterdir())
    code, _, err = _cli(["attack", str(bad), "-o", str(out / "p.csv"), "--fill", "linear"], capsys)
    assert code == 1 and "--split 12/4/4 needs" in err  # 20 months of rows are not there
    code, _, err = _cli(["train", str(bad), "-o", str(out / "m.pt"), "--k-nn", "60", "--k-max", "50"], capsys)
    assert code == 2 and "--k-nn" in err
    code, _, err = _cli(["attack", str(bad), "-o", str(out / "p.csv"), "--attack", "gcn"], capsys)
    assert code == 2 and "--attack" in err


def _setup_all(base: Path) -> dict:
    """A series, its attack record and a model, made once per fuzz kind (small and fast)."""
    from icmlkit.lib.core.io import write_json
    from icmlkit.lib.defend_tsf.api import attack_series, train, write_model, write_series
    from icmlkit.lib.defend_tsf.config import AttackConfig

    s = synthetic_series(SynthConfig(rows=300, channels=3), 0)
    write_series(base / "s.csv", s)
    dc = DataConfig(seq_len=12, pred_len=12, split=SPLIT)
    ar = attack_series(s, dc, AttackConfig(surrogate_epochs=1), seed=0)
    write_json(base / "a.json", ar.record)
    res = train(s, dc, ModelConfig(), TrainConfig(defense="none", t_1=0, t_2=1), seed=0)
    write_model(base / "m.pt", res)
    return {"series": base / "s.csv", "record": base / "a.json", "model": base / "m.pt"}


def _series_of_two_channels(base: Path) -> dict:
    """The files of :func:`_setup_all` (a model of a 3-channel series) and a 2-channel series."""
    from icmlkit.lib.defend_tsf.api import write_series

    files = _setup_all(base)
    write_series(base / "two.csv", synthetic_series(SynthConfig(rows=300, channels=2), 0))
    rec = json.loads(Path(files["record"]).read_text())
    (base / "r.json").write_text(json.dumps({**rec, "channels": ["nope"]}))
    return {**files, "two": base / "two.csv", "other_record": base / "r.json"}


# issue 59 (tests/test_mismatch_sweep.py): a series (or an attack record) of other channels than the model's
_CH = ("two.csv", "differ from the model", "m.pt")
MISMATCH = [
    MismatchCase("eval", ["eval", "{model}", "{two}"], _series_of_two_channels, _CH, "series"),
    MismatchCase("forecast", ["forecast", "{model}", "{two}", "-o", "{out}/f.csv"], _series_of_two_channels, _CH,
                 "series"),
    MismatchCase("eval", ["eval", "{model}", "{series}", "--attack-record", "{other_record}"], _series_of_two_channels,
                 ("r.json", "'nope'"), "record"),
]

CSV_KINDS = ("missing", "empty", "binary", "folder", "wrong_csv", "nan_csv")
JSON_KINDS = ("missing", "empty", "binary", "folder", "truncated_json")
PT_KINDS = ("missing", "empty", "binary", "folder", "garbage_pt")
CASES = [
    FuzzCase("attack", ["attack", "{bad}", "-o", "{out}/p.csv", "--split", SPLIT], suffix=".csv", kinds=CSV_KINDS),
    FuzzCase("train", ["train", "{bad}", "-o", "{out}/m.pt", "--split", SPLIT], suffix=".csv", kinds=CSV_KINDS),
    FuzzCase("train", ["train", "{series}", "-o", "{out}/m.pt", "--split", SPLIT, "--attack-record", "{bad}"],
             suffix=".json", kinds=JSON_KINDS, setup=_setup_all, label="record"),
    FuzzCase("eval", ["eval", "{bad}", "{series}"], suffix=".pt", kinds=PT_KINDS, setup=_setup_all, label="model"),
    FuzzCase("eval", ["eval", "{model}", "{bad}"], suffix=".csv", kinds=CSV_KINDS, setup=_setup_all, label="series"),
    FuzzCase("eval", ["eval", "{model}", "{series}", "--attack-record", "{bad}"], suffix=".json", kinds=JSON_KINDS,
             setup=_setup_all, label="record"),
    FuzzCase("eval", ["eval", "{model}", "{series}", "--reference", "{bad}"], suffix=".pt", kinds=PT_KINDS,
             setup=_setup_all, label="reference"),
    FuzzCase("forecast", ["forecast", "{bad}", "{series}", "-o", "{out}/f.csv"], suffix=".pt", kinds=PT_KINDS,
             setup=_setup_all, label="model"),
    FuzzCase("forecast", ["forecast", "{model}", "{bad}", "-o", "{out}/f.csv"], suffix=".csv", kinds=CSV_KINDS,
             setup=_setup_all, label="series"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    check_malformed(TOOL, case, tmp_path, capsys)


def test_wrong_shaped_record_and_model(tmp_path, capsys):
    files = _setup_all(tmp_path)
    rec = json.loads(Path(files["record"]).read_text())
    rec["channels"] = ["nope"]
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps(rec))
    code, _, err = _cli(["eval", str(files["model"]), str(files["series"]), "--attack-record", str(bad)], capsys)
    assert code == 1 and "'nope'" in err and str(bad) in err
    torch.save({"format": "icmlkit.defend-tsf.model/1", "state_dict": {}}, tmp_path / "x.pt")
    code, _, err = _cli(["eval", str(tmp_path / "x.pt"), str(files["series"])], capsys)
    assert code == 1 and "not a usable defend-tsf model" in err


# --------------------------------------------------------------------------- processes


def test_subprocess_help_bad_flag_and_tiny_run(tmp_path):
    assert run_tool(TOOL, "--help").returncode == 0
    assert run_tool(TOOL, "train", "--no-such").returncode == 2
    r = run_tool(TOOL, "generate", "-o", tmp_path / "g.csv", "--rows", "50", "--channels", "2", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["rows"] == 50


@pytest.mark.slow
def test_torchrun_two_processes_match_one(tmp_path, series_csv):
    torchrun = BIN / "torchrun"
    if not torchrun.exists():
        pytest.skip("torchrun not installed")
    # DLinear: a transformer's key biases get analytically zero gradients, whose rounding noise Adam
    # turns into full-size steps, so their values would differ between any two summation orders
    args = ["train", str(series_csv), "--defense", "timeguard", *FAST, "--model", "dlinear",
            "--batch-size", "32", "--no-manifest", "--device", "cpu"]
    one = run_tool(TOOL, *args, "-o", tmp_path / "one.pt")
    assert one.returncode == 0, one.stderr
    env = {**os.environ, "ICMLKIT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}
    two = subprocess.run([str(torchrun), "--nproc-per-node", "2", "--master-port", "29531",
                          str(BIN / TOOL), *args, "-o", str(tmp_path / "two.pt")], capture_output=True, text=True,
                         env=env, timeout=600)
    assert two.returncode == 0, two.stderr[-2000:]
    a = torch.load(tmp_path / "one.pt", weights_only=True)
    b = torch.load(tmp_path / "two.pt", weights_only=True)
    for k in a["state_dict"]:
        assert torch.allclose(a["state_dict"][k], b["state_dict"][k], atol=1e-5, rtol=1e-4), k
    assert (a["final_pool"] == b["final_pool"]).all()


@pytest.mark.slow
def test_demo_runs(tmp_path, capsys):
    code, out, err = _cli(["demo", "--outdir", str(tmp_path / "demo"), "--epochs", "3", "--json"], capsys)
    assert code == 0, err
    s = json.loads(out)
    assert len(s["rows"]) == 3 and (tmp_path / "demo" / "summary.json").exists()


@pytest.mark.skipif(not (Path(__file__).resolve().parents[1] / "data" / "ett" / "ETTh1.csv").exists()
                    and not (Path(__file__).resolve().parents[2] / "shared" / "data" / "ett" / "ETTh1.csv").exists(),
                    reason="ETTh1.csv is not present")
def test_reads_etth1_with_the_standard_split():
    from icmlkit.lib.defend_tsf.data import make_splits

    repo = Path(__file__).resolve().parents[1]
    p = repo / "data" / "ett" / "ETTh1.csv"
    if not p.exists():
        p = repo.parent / "shared" / "data" / "ett" / "ETTh1.csv"
    s = read_series(p)
    assert s.T == 17420 and s.C == 7 and s.columns[-1] == "OT"
    sp = make_splits(s, DataConfig())
    assert (sp.train_end, sp.val_end, sp.test_end) == (8640, 11520, 14400)
