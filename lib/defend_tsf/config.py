"""The option dataclasses of defend-tsf (data, forecaster, attack, training/defence), with their
command-line help: torch-free, so the CLI declares its options from them without importing torch."""
from __future__ import annotations

from dataclasses import dataclass

from icmlkit.lib.core.config import option as _opt
from icmlkit.lib.core.errors import UsageError

MODELS = ("dlinear", "patchtst", "itransformer", "timesnet")
DEFENSES = ("timeguard", "none", "sample-filter")
ATTACKS = ("random", "backtime")
PATTERNS = ("cone", "up_trend", "up_and_down")
FILLS = ("none", "ffill", "linear")
COUNTINGS = ("floor", "round")
STAGE2_OPTIMIZERS = ("per-epoch", "persistent")


@dataclass
class DataConfig:
    """How a Time-Series-Library CSV becomes train / validation / test windows."""

    seq_len: int = _opt(12, "L: look-back length (input steps).", min=1)
    pred_len: int = _opt(12, "H: forecast horizon (output steps).", min=1)
    split: str = _opt("12/4/4", "Train/val/test split: '12/4/4' = months (Time-Series-Library ETT borders; rows "
                      "per month from the date step), '0.7,0.1,0.2' = fractions, or '8640,2880,2880' = row counts.")
    fill: str = _opt("none", "NaN gaps: none (an error naming row and column), ffill (forward fill, leading gaps "
                     "back-filled) or linear (interpolation).", choices=FILLS)

    def check(self) -> None:
        if self.seq_len < 1 or self.pred_len < 1:
            raise UsageError("--seq-len and --pred-len must be >= 1")
        if self.fill not in FILLS:
            raise UsageError(f"--fill must be one of {', '.join(FILLS)}")
        parse_split(self.split)


def parse_split(text: str) -> tuple[str, tuple[float, float, float]]:
    """``('months'|'fractions'|'rows', (a, b, c))`` from a --split value (a UsageError otherwise)."""
    s = str(text).strip()
    sep = "/" if "/" in s else ","
    parts = [p.strip() for p in s.split(sep)]
    try:
        vals = tuple(float(p) for p in parts)
    except ValueError:
        raise UsageError(f"--split {text!r}: expected three numbers like 12/4/4, 0.7,0.1,0.2 or 8640,2880,2880") from None
    if len(vals) != 3 or any(v < 0 for v in vals) or vals[0] <= 0 or vals[1] <= 0 or vals[2] <= 0:
        raise UsageError(f"--split {text!r}: expected three positive numbers")
    if sep == "/":
        return "months", vals  # type: ignore[return-value]
    if all(v < 1 for v in vals) or abs(sum(vals) - 1) < 1e-9:
        if sum(vals) > 1 + 1e-9:
            raise UsageError(f"--split {text!r}: fractions must sum to at most 1")
        return "fractions", vals  # type: ignore[return-value]
    if any(v != int(v) for v in vals):
        raise UsageError(f"--split {text!r}: row counts must be whole numbers")
    return "rows", vals  # type: ignore[return-value]


@dataclass
class ModelConfig:
    """The forecaster (all four expose a loss per (window, channel))."""

    model: str = _opt("dlinear", "dlinear, patchtst, itransformer (2-layer lite) or timesnet (lite).", choices=MODELS)
    d_model: int = _opt(64, "Width of patchtst / itransformer (timesnet uses d_model/4) [reconstructed].", min=4)
    n_layers: int = _opt(2, "Encoder layers of patchtst / itransformer / timesnet.", min=1)
    n_heads: int = _opt(4, "Attention heads (patchtst, itransformer).", min=1)
    moving_avg: int = _opt(25, "DLinear moving-average kernel (odd; clipped to the look-back).", min=1)

    def check(self) -> None:
        if self.model not in MODELS:
            raise UsageError(f"--model must be one of {', '.join(MODELS)}")
        if self.d_model % self.n_heads:
            raise UsageError("--d-model must be a multiple of --n-heads")


@dataclass
class AttackConfig:
    """The backdoor attacks (BackTime's injection, Random trigger)."""

    attack: str = _opt("random", "random: one fixed random trigger; backtime: per-time triggers from a GCN "
                       "generator trained bi-level against a DLinear surrogate [reconstructed compact version].",
                       choices=ATTACKS)
    pattern: str = _opt("cone", "The attacker's target pattern added to x[t-1] after the trigger.", choices=PATTERNS)
    channel_ratio: float = _opt(0.3, "eta_S: share of channels attacked (at least one).", min=0, max=1, min_open=True)
    time_ratio: float = _opt(0.03, "eta_T: share of training time stamps that start an injection.", min=0, max=1,
                             min_open=True)
    trigger_len: int = _opt(4, "Trigger steps [t, t+trigger_len).", min=1)
    budget: float = _opt(0.2, "epsilon: max |trigger value| in z-score units (added to x[t-1]) [reconstructed for "
                         "Random].", min=0, min_open=True)
    pattern_scale: float = _opt(1.0, "Multiplier of the pattern (in z-score units) [reconstructed knob; BackTime: 1].",
                                min=0, min_open=True)
    test_ratio: float = _opt(0.03, "Share of test time stamps with a held-out trigger placement.", min=0, max=1,
                             min_open=True)
    surrogate_epochs: int = _opt(3, "Epochs of the clean DLinear surrogate that ranks times by clean MAE, and "
                                 "backtime: surrogate epochs per bi-level round [reconstructed].", min=1)
    rounds: int = _opt(3, "backtime: bi-level rounds [reconstructed].", min=1)
    gen_steps: int = _opt(50, "backtime: generator steps per round [reconstructed].", min=1)
    lambda_norm: float = _opt(0.05, "backtime: weight of the trigger-norm penalty.", min=0)

    def check(self) -> None:
        if self.attack not in ATTACKS:
            raise UsageError(f"--attack must be one of {', '.join(ATTACKS)}")
        if self.pattern not in PATTERNS:
            raise UsageError(f"--pattern must be one of {', '.join(PATTERNS)}")


@dataclass
class TrainConfig:
    """Training of the forecaster under a defence (TimeGuard, none, sample-level filter)."""

    defense: str = _opt("timeguard", "timeguard (channel-wise pools), none, or sample-filter (ABL-like: keeps the "
                        "lowest-loss whole windows on all channels, same alpha -> beta schedule [reconstructed]).", choices=DEFENSES)
    alpha: float = _opt(0.2, "Initial pool fraction per channel.", min=0, max=1, min_open=True)
    beta: float = _opt(0.5, "Final pool fraction per channel (ratio grows alpha -> beta over Stage II).", min=0, max=1,
                       min_open=True)
    t_b: int = _opt(10, "T_b: backcaster epochs (Stage I).", min=1)
    t_1: int = _opt(10, "T_1: warm-up epochs on the initial pool.", min=0)
    t_2: int = _opt(90, "T_2: Stage II (DRLS) epochs.", min=1)
    lr: float = _opt(1e-4, "Adam learning rate.", min=0, min_open=True)
    batch_size: int = _opt(64, "Windows per batch.", min=1)
    k_nn: int = _opt(10, "k_nn: neighbours averaged in both distance criteria [reconstructed].", min=1)
    k_max: int = _opt(50, "K_max: size of the kNN graph built once per channel [reconstructed].", min=1)
    pi: float = _opt(2.0, "pi > 1: candidate multiplier of DRLS [reconstructed].", min=1, min_open=True)
    sigma: float = _opt(2.0, "Width of the Gaussian weights centred at index L in the window distance.", min=0,
                        min_open=True)
    pool_count: str = _opt("floor", "How a pool fraction becomes a count of windows: floor = int(N x fraction), "
                           "as the official code; round = round(fraction x N) (ours before 2026-12-07).",
                           choices=COUNTINGS)
    stage2_optimizer: str = _opt("per-epoch", "Stage II's Adam: per-epoch = a fresh optimiser every DRLS epoch, as "
                                 "the official code; persistent = one Adam carried on from the warm-up (ours before "
                                 "2026-12-07).", choices=STAGE2_OPTIMIZERS)

    def check(self) -> None:
        if self.defense not in DEFENSES:
            raise UsageError(f"--defense must be one of {', '.join(DEFENSES)}")
        if self.pool_count not in COUNTINGS:
            raise UsageError(f"--pool-count must be one of {', '.join(COUNTINGS)}")
        if self.stage2_optimizer not in STAGE2_OPTIMIZERS:
            raise UsageError(f"--stage2-optimizer must be one of {', '.join(STAGE2_OPTIMIZERS)}")
        if not self.pi > 1:
            raise UsageError("--pi must be > 1")
        if self.k_nn > self.k_max:
            raise UsageError("--k-nn must be <= --k-max")
        if self.alpha > self.beta:
            raise UsageError("--alpha must be <= --beta")
        if self.lr <= 0:
            raise UsageError("--lr must be > 0")


# Named presets of `attack` and `train` (--preset): option values by subcommand, applied as option
# defaults (flags and --config win over them). "paper" is the defaults (BackTime's budget 0.2 and unit
# cone, Adam lr 1e-4, T_b = T_1 = 10, T_2 = 90, DLinear); "bench" is bench/defend_tsf.py's setting, the
# one where the Random attack takes on ETTh1 and the benchmark's figures come from (budget 2, cone x 3,
# iTransformer-lite, lr 1e-3, T_b = T_1 = 5, T_2 = 30; a test keeps the two in step).
PRESETS = {
    "paper": {"attack": {}, "train": {}},
    "bench": {"attack": {"budget": 2.0, "pattern_scale": 3.0},
              "train": {"model": "itransformer", "lr": 1e-3, "t_b": 5, "t_1": 5, "t_2": 30}},
}


@dataclass
class SynthConfig:
    """A synthetic hourly multivariate series (daily and weekly cycles, shared AR(1) noise, channel
    couplings): the demo's and the tests' data."""

    rows: int = _opt(2400, "Rows (hours).", min=8)
    channels: int = _opt(7, "Channels.", min=1)
    noise: float = _opt(0.3, "Std of the AR(1) noise relative to the cycles.", min=0)
    start: str = _opt("2016-07-01 00:00:00", "First time stamp.")

    def check(self) -> None:
        import datetime as _dt

        try:
            _dt.datetime.fromisoformat(self.start)
        except ValueError:
            raise UsageError(f"--start {self.start!r}: expected a time stamp like 2016-07-01 00:00:00") from None
