"""defend-tsf, issue 56: the learned-pair ground truth (a poisoned pair whose loss against the poisoned
future is below its loss against the clean future, under the undefended model), the pool shares on any
ground truth, and the attack-takes criterion (undefended MAE_P vs a clean-trained reference's)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from icmlkit.lib.core.errors import InputError
from icmlkit.lib.defend_tsf.api import (TAKES_RATIO, attack_series, attack_takes, learned_pairs, pool_shares,
                                        poison_truth, read_model, train, write_model)
from icmlkit.lib.defend_tsf.config import AttackConfig, DataConfig, ModelConfig, SynthConfig, TrainConfig
from icmlkit.lib.defend_tsf.data import Series
from icmlkit.lib.defend_tsf.synth import synthetic_series
from icmlkit.lib.defend_tsf.train import prepare

SPLIT = "0.6,0.2,0.2"


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    """A synthetic series, its attacked copy (budget 2, cone x3) and a briefly trained undefended DLinear."""
    base = tmp_path_factory.mktemp("learned")
    clean = synthetic_series(SynthConfig(rows=600, channels=4), 0)
    dc = DataConfig(seq_len=12, pred_len=12, split=SPLIT)
    ar = attack_series(clean, dc, AttackConfig(budget=2.0, pattern_scale=3.0, surrogate_epochs=1), seed=0)
    rec = {**ar.record, "_path": "record"}
    res = train(ar.poisoned, dc, ModelConfig(), TrainConfig(defense="none", t_1=0, t_2=2, lr=1e-3), seed=0)
    write_model(base / "none.pt", res)
    return {"clean": clean, "poisoned": ar.poisoned, "record": rec, "dc": dc, "model": read_model(base / "none.pt")}


def _truth(st) -> np.ndarray:
    prep = prepare(st["poisoned"], st["dc"])
    return poison_truth(st["record"], st["poisoned"], prep.splits.train_end, 12, 12)


def _future_touched(st) -> np.ndarray:
    """(C, N): the poisoned series' future of window n differs from the clean one on channel c."""
    m = st["model"]
    yp = prepare(st["poisoned"], m.data_cfg, scaler=m.scaler).windows["train"][1]
    yc = prepare(st["clean"], m.data_cfg, scaler=m.scaler).windows["train"][1]
    return (yp != yc).any(dim=1).T.numpy()


def test_learned_pairs_are_poisoned_pairs_with_a_touched_future(setting):
    truth = _truth(setting)
    got = learned_pairs(setting["model"], setting["poisoned"], setting["clean"], setting["record"])
    assert got.shape == truth.shape and got.dtype == bool
    assert not (got & ~truth).any()  # only poisoned pairs
    assert not (got & ~_future_touched(setting)).any()  # an untouched future has equal losses: never learned
    assert truth.sum() > 0


def test_nothing_is_learned_against_the_poisoned_series_itself(setting):
    """With the 'clean' series equal to the poisoned one both losses are equal: no pair counts."""
    got = learned_pairs(setting["model"], setting["poisoned"], setting["poisoned"], setting["record"])
    assert not got.any()


class _Oracle(torch.nn.Module):
    """Forecasts exactly the given z-scored futures, in the order ``predict`` asks for them."""

    def __init__(self, futures: torch.Tensor):
        super().__init__()
        self.futures, self.at = futures, 0

    def forward(self, x):
        out = self.futures[self.at:self.at + x.shape[0]]
        self.at += x.shape[0]
        return out


def test_a_model_that_forecasts_the_poisoned_future_learned_every_touched_pair(setting):
    m = setting["model"]
    yp = prepare(setting["poisoned"], m.data_cfg, scaler=m.scaler).windows["train"][1]
    mean = torch.as_tensor(m.scaler.mean, dtype=torch.float32)
    std = torch.as_tensor(m.scaler.std, dtype=torch.float32)
    oracle = type(m)(m.obj, _Oracle((yp - mean) / std), m.data_cfg, m.model_cfg, m.scaler, m.path)
    got = learned_pairs(oracle, setting["poisoned"], setting["clean"], setting["record"])
    want = _truth(setting) & _future_touched(setting)
    assert want.sum() > 0 and np.array_equal(got, want)


def test_learned_pairs_rejects_a_clean_series_of_another_shape(setting):
    c = setting["clean"]
    short = Series(c.dates[:-5], list(c.columns), c.values[:-5], "short.csv", c.date_header, c.raw_dates[:-5])
    with pytest.raises(InputError, match="does not match the poisoned one"):
        learned_pairs(setting["model"], setting["poisoned"], short, setting["record"])


def test_pool_shares_by_hand():
    truth = np.array([[1, 1, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0]], dtype=bool)  # share 2/16
    pool = np.array([[1, 0, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0]], dtype=bool)  # 1 of 7 pooled
    s = pool_shares(pool, truth)
    assert s["share_pool"] == pytest.approx(1 / 7) and s["share_train"] == pytest.approx(2 / 16)
    assert s["ratio"] == pytest.approx((1 / 7) / (2 / 16))
    assert pool_shares(pool, np.zeros_like(truth))["ratio"] is None
    assert pool_shares(np.zeros_like(pool), truth)["share_pool"] == 0.0
    with pytest.raises(InputError):
        pool_shares(pool[:, :4], truth)


def test_attack_takes_criterion():
    assert TAKES_RATIO == 0.5
    assert attack_takes(1.0, 4.0) is True
    assert attack_takes(2.0, 4.0) is True  # exactly half: takes
    assert attack_takes(2.01, 4.0) is False
    assert attack_takes(5.0, 4.0) is False
    assert attack_takes(None, 4.0) is None and attack_takes(1.0, None) is None and attack_takes(1.0, 0.0) is None
    assert attack_takes(3.0, 4.0, threshold=0.8) is True


def test_bench_cells_apply_the_criterion_from_the_undefended_rows_only():
    """The bench's cell table: takes is decided from the undefended rows and their clean-trained reference,
    and a cell's defended rows do not change it."""
    import importlib.util
    import sys

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "bench"))
    try:
        spec = importlib.util.spec_from_file_location("bench_defend_tsf_learned", root / "bench" / "defend_tsf.py")
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(root / "bench"))

    def row(d, seed, mp, mc, noeff=4.0):
        return {"attack": "random", "L": 12, "H": 12, "seed": seed, "model": "dlinear", "defense": d,
                "strength": "official", "epochs": 35, "mae_clean": mc, "mae_poison": mp, "mae_poison_clean_trained": noeff, "mae_poison_no_effect": 9.0,
                "poison_share_pool": 0.05, "poison_share_train": 0.1, "learned_share_pool": 0.01,
                "learned_share_train": 0.04, "learned_of_poisoned": 0.4}

    settings = {"models": ["dlinear"], "t_1": 5, "t_2": 30, "defenses": ["none", "timeguard"]}
    for tg_mp in (0.1, 100.0):
        runs = [row("none", 0, 1.0, 2.0), row("none", 1, 3.0, 2.0), row("timeguard", 0, tg_mp, 2.2),
                row("timeguard", 1, tg_mp, 2.2)]
        (cell,) = bench._cells({"official-12": {"settings": settings, "runs": runs}})
        assert cell["takes_ratio"] == pytest.approx(0.5) and cell["takes"] is True
        assert cell["mae_c_ratio"] == pytest.approx(1.1) and cell["purity_learned"] == pytest.approx(0.25)
        assert cell["mae_p_ratio"] == pytest.approx(tg_mp / 2.0)
