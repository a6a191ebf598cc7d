"""The settings of estimate-fe's subcommands, in a module that imports nothing heavy (the CLI
declares its options from these dataclasses at import time, and ``--help`` must stay fast)."""
from __future__ import annotations

from dataclasses import dataclass, field


def _opt(help_text: str, **kw) -> dict:
    return {"help": help_text, **kw}


@dataclass
class SampleConfig:
    frames: int = field(default=2000, metadata=_opt("Frames to draw.", min=10))
    interval: int = field(default=50, metadata=_opt("MD steps between frames (molecules).", min=1))
    equil: int = field(default=5000, metadata=_opt("Equilibration MD steps.", min=0))
    timestep: float = field(default=1.0, metadata=_opt("fs; keep it at 1 fs or below unless --constraints hbonds "
                                                        "holds the bonds to hydrogens.", min=0, min_open=True))
    method: str = field(default="auto", metadata=_opt("Analytic systems: exact draws (separable traps) or MALA "
                                                      "chains.", choices=("auto", "exact", "mala")))


@dataclass
class TrainConfig:
    """CARD's architecture and its two-stage training (method sheet steps 3-5)."""

    radix: int = field(default=4, metadata=_opt("Base r.", min=2, max=8))
    depth: int = field(default=3, metadata=_opt("Depth L.", min=1, max=6))
    components: int = field(default=8, metadata=_opt("Beta-mixture components per residual axis.", min=1))
    width: int = field(default=64, metadata=_opt("Model width d.", min=8))
    layers: int = field(default=2, metadata=_opt("Encoder and decoder layers (each).", min=1))
    box: float | None = field(default=None, metadata=_opt("Box size a in Angstrom (default: margin x the frames' "
                                                          "extent).", min=0, min_open=True))
    margin: float = field(default=1.5, metadata=_opt("Box margin over the frames' extent.", min=1.0))
    steps: int = field(default=2000, metadata=_opt("Stage I (NLL) steps.", min=1))
    stage2_steps: int = field(default=500, metadata=_opt("Stage II steps (NLL + centred energy matching).", min=0))
    batch: int = field(default=256, metadata=_opt("Global batch (frames per step, split over torchrun processes).",
                                                  min=1))
    lr: float = field(default=2e-3, metadata=_opt("Adam learning rate.", min=0, min_open=True))
    kl_steps: int = field(default=0, metadata=_opt(
        "Stage III steps after Stage II (reconstructed, not in the paper): NLL + a score-function estimate of the "
        "reverse KL against the target energy, on model samples (one energy call per sample; one process only).",
        min=0))
    energy_weight: float = field(default=1.0, metadata=_opt("Weight of the Stage II energy matching term.", min=0))
    train_fraction: float = field(default=0.5, metadata=_opt("Use the first part of FRAMES for training; `estimate` "
                                                             "uses the rest of the same file.", min=0, max=1,
                                                             min_open=True))
    coords: str = field(default="cartesian", metadata=_opt(
        "Coordinates the radix map decomposes: cartesian (the paper: frame-gauge Cartesian coordinates) or "
        "internal (reconstructed: each atom's bond length, bond angle and dihedral relative to its parent in the "
        "bond tree, boxes from the force field's harmonic terms; molecules with a bond graph only).",
        choices=("cartesian", "internal")))
    time_limit: float | None = field(default=None, metadata=_opt("Seconds of training at most.", min=0, min_open=True))
    threads: int = field(default=1, metadata=_opt("torch CPU threads per process.", min=1))
    precision: str = field(default="float32", metadata=_opt(
        "The network's float type while training (the model file keeps float32 weights). float64 is slower "
        "but its sums barely depend on their order, so torchrun runs match one process to ~1e-12.",
        choices=("float32", "float64")))

    def arch(self) -> dict:
        """The keyword arguments of :func:`icmlkit.lib.estimate_fe.card.build`."""
        return {"r": self.radix, "L": self.depth, "K": self.components, "d": self.width, "enc_layers": self.layers,
                "dec_layers": self.layers, "box": self.box, "margin": self.margin, "coords": self.coords}


@dataclass
class EstimateConfig:
    samples: int = field(default=2000, metadata=_opt("Model samples M.", min=10))
    estimator: str = field(default="bar", metadata=_opt("BAR or MBAR between model samples and frames.",
                                                        choices=("bar", "mbar")))
    min_overlap: float = field(default=0.03, metadata=_opt("Refuse to report a free energy (exit 3) when the "
                                                           "BAR overlap (pymbar's definition, in log space on the uncapped works) "
                                                           "is below this.", min=0, max=1))


@dataclass
class SolvationConfig(EstimateConfig):
    frames: int = field(default=2000, metadata=_opt("Pipeline mode: MD frames per environment (half train, half "
                                                    "estimate).", min=20))
    interval: int = field(default=50, metadata=_opt("Pipeline mode: MD steps between frames.", min=1))
    steps: int = field(default=1500, metadata=_opt("Pipeline mode: Stage I steps.", min=1))
    stage2_steps: int = field(default=300, metadata=_opt("Pipeline mode: Stage II steps.", min=0))


@dataclass
class BaselineConfig:
    method: str = field(default="lambda-mbar", metadata=_opt(
        "lambda-mbar: lambda-window MD (U_vac + lambda U_GB) and MBAR; endstate-bar: MD of the two end states "
        "only (or the frames given), each frame's reduced energy in both states, BAR (no model, no windows); "
        "vertical-gap: U_obc2 - U_vac of the input structure minimised in vacuum (2 energy evaluations, no MD).",
        choices=("lambda-mbar", "endstate-bar", "vertical-gap")))
    windows: int = field(default=11, metadata=_opt("Lambda windows (0 .. 1; lambda-mbar only).", min=2))
    frames_per_window: int = field(default=500, metadata=_opt("MD frames per window (endstate-bar: per end state).",
                                                              min=10))
    interval: int = field(default=50, metadata=_opt("MD steps between frames.", min=1))
    equil: int = field(default=5000, metadata=_opt("Equilibration MD steps per window.", min=0))
    timestep: float = field(default=1.0, metadata=_opt("fs.", min=0, min_open=True))
    min_overlap: float = field(default=0.0, metadata=_opt("Exit 3 when the smallest neighbour overlap of the MBAR "
                                                          "matrix (endstate-bar: the BAR overlap) is below this.",
                                                          min=0, max=1))


@dataclass
class MultiTrainConfig:
    """One model for many molecules (issue 28's transfer; reconstructed at small scale)."""

    md_frames: int = field(default=600, metadata=_opt("MD frames per training molecule.", min=10))
    md_interval: int = field(default=20, metadata=_opt("MD steps (1 fs) between frames.", min=1))
    md_equil: int = field(default=2000, metadata=_opt("Equilibration MD steps per molecule.", min=0))
    steps: int = field(default=4000, metadata=_opt("Stage I (NLL) steps, one molecule per step.", min=1))
    batch: int = field(default=128, metadata=_opt("Frames per step.", min=1))
    width: int = field(default=32, metadata=_opt("Model width d.", min=8))
    layers: int = field(default=2, metadata=_opt("Encoder and decoder layers (each).", min=1))
    components: int = field(default=8, metadata=_opt("Beta-mixture components per residual axis.", min=1))
    lr: float = field(default=2e-3, metadata=_opt("Adam learning rate.", min=0, min_open=True))
    time_limit: float | None = field(default=None, metadata=_opt("Seconds of training at most.", min=0,
                                                                 min_open=True))

    def train_kwargs(self) -> dict:
        """The keyword arguments of :func:`icmlkit.lib.estimate_fe.transfer.fit` besides the MD settings."""
        return {"steps": self.steps, "batch": self.batch, "d": self.width, "layers": self.layers,
                "K": self.components, "lr": self.lr, "time_limit": self.time_limit}


@dataclass
class TransferConfig:
    samples: int = field(default=2000, metadata=_opt("Model samples per environment's model.", min=10))
    min_ess: float = field(default=0.0, metadata=_opt(
        "Exit 3 (delta_g values still reported) when the smaller forward ESS fraction of the two models in their "
        "own environments is below this.", min=0, max=1))
