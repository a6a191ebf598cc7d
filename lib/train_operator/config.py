"""The option dataclasses of train-operator (model, training, generators, few-shot), with their
command-line help. Standard library only: the CLI declares its options from these at import time and
``--help`` must not import torch or numpy."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from icmlkit.lib.core.config import option
from icmlkit.lib.core.errors import UsageError

MODELS = ("funcattn", "funcattn-conv", "transolver", "fno")
BASES = ("learned", "fourier")
POSITIONS = ("unified", "coords", "periodic")
QUADRATURES = ("uniform", "trapezoid")
RECIPES = ("ours", "paper", "h1")
GRIDS = ("auto", "node", "cell", "periodic")


def without_later_defaults(cfg: dict, added: dict) -> dict:
    """``cfg`` for checkpoint fingerprints: options added after release (``added``: name -> default) are
    left out while at their default, so checkpoints written before they existed still resume."""
    return {k: v for k, v in cfg.items() if not (k in added and v == added[k])}


@dataclass
class ModelConfig:
    """The network (method sheet steps 1-7); ``model`` picks FuncAttn, its Conv2d variant, the
    Transolver swap (softmax over slice tokens) or our parameter-matched FNO."""

    model: str = option("funcattn", "funcattn: Linear projections (discretisation-invariant); funcattn-conv: "
                        "3x3 Conv2d projections (grids only); transolver: the identical net with softmax over "
                        "slice tokens; fno: our own FNO, width matched to FuncAttn's parameter count.",
                        choices=MODELS)
    width: int = option(64, "Hidden channels C.", min=4)
    heads: int = option(4, "Heads H (C must be a multiple of H).", min=1)
    layers: int = option(4, "Blocks N.", min=1)
    bases: int = option(32, "Basis functions (slices) k per head.", min=1)
    mlp_ratio: float = option(1.0, "Hidden width of each block's MLP, times C.", min=0.25)
    pos: str = option("unified", "Position features: unified (distances to an 8^d reference grid), the raw "
                      "coordinates, or periodic (sin and cos of 2 pi j t, j = 1..4, per axis; our addition: on a "
                      "periodic grid they keep every point-wise quantity periodic, so the uniform sum of the basis "
                      "transform stays the spectrally accurate trapezoid rule).", choices=POSITIONS)
    shared: bool = option(False, "One set of basis weights (P_x, P_f, Lin, tau) for all blocks (the _Shared "
                          "variant).")
    basis: str = option("learned", "Ablation: learned soft bases, or fixed Fourier bases of the coordinates "
                        "[reconstructed].", choices=BASES)
    inverse: bool = option(True, "Ablation: --no-inverse replaces the inverse transform W O by the mean of O "
                           "over the bases, broadcast to every point [reconstructed].")
    quadrature: str = option("uniform", "Point weights in the basis transform T (and Transolver's slice tokens): "
                             "uniform, every point alike (the paper's sum); trapezoid, on node grids the edge "
                             "nodes weigh 1/2 per axis, so T is the same integral at every resolution of a grid "
                             "that includes its boundary [our addition, not in the paper]; refused on cell and "
                             "periodic grids (i/n points, where the uniform sum is the right rule); point sets "
                             "stay uniform.", choices=QUADRATURES)
    alpha_init: float | None = option(None, "Initial a of alpha = sigmoid(a) (default: 0 for funcattn-conv, "
                                      "1e-3 for funcattn).")
    modes: int = option(8, "fno: Fourier modes per axis (at most half the training grid).", min=1)
    fno_width: int | None = option(None, "fno: width (default: matched to FuncAttn's parameter count with the "
                                   "same --width/--layers/--bases).", min=1)

    def check(self) -> None:
        if self.model not in MODELS:
            raise UsageError(f"--model must be one of {', '.join(MODELS)}, not {self.model!r}")
        if self.width % self.heads:
            raise UsageError(f"--width {self.width} is not a multiple of --heads {self.heads}")
        if self.basis not in BASES:
            raise UsageError(f"--basis must be one of {', '.join(BASES)}")
        if self.pos not in POSITIONS:
            raise UsageError(f"--pos must be one of {', '.join(POSITIONS)}")
        if self.quadrature not in QUADRATURES:
            raise UsageError(f"--quadrature must be one of {', '.join(QUADRATURES)}")

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def fingerprint_dict(cfg: dict) -> dict:
        """``cfg`` for checkpoint fingerprints (:func:`without_later_defaults`)."""
        return without_later_defaults(cfg, ADDED_LATER)


ADDED_LATER = {"quadrature": "uniform"}


@dataclass
class TrainConfig:
    """Training (method sheet step 9): AdamW + OneCycleLR, gradient clipping, relative-L2 loss."""

    epochs: int = option(100, "Epochs.", min=1)
    batch: int = option(8, "Global batch (samples per step, split over torchrun processes); the last "
                        "incomplete batch of an epoch is dropped.", min=1)
    lr: float = option(1e-3, "AdamW peak learning rate (OneCycleLR).", min=0, min_open=True)
    weight_decay: float = option(1e-5, "AdamW weight decay.", min=0)
    clip: float = option(0.1, "Gradient-norm clip.", min=0, min_open=True)
    ntrain: int | None = option(None, "Use the first N samples of DATA (default: all).", min=1)
    val_fraction: float = option(0.1, "Hold out the last part of DATA for validation when --val is not given "
                                 "(0: no validation).", min=0, max=0.9)
    threads: int = option(1, "torch CPU threads (1 is fastest for these small models on a shared CPU; at most 2 here).", min=1)
    recipe: str = option("ours", "ours: PyTorch's default initialisation and the relative-L2 loss (batch mean); "
                         "paper: the official Darcy recipe, every Linear initialised trunc_normal(std 0.02) with "
                         "zero bias, and the loss rel-L2 + 0.1 x (rel-L2 of the central-difference gradient per "
                         "axis), summed over the batch as the official script (grids only); h1: PyTorch's "
                         "initialisation and the batch mean of the same rel-L2 + 0.1 x gradient term (the official "
                         "Burgers-Super-Res loss, the Galerkin Transformer's H1 regulariser; grids only).",
                         choices=RECIPES)

    def check(self) -> None:
        if self.epochs < 1 or self.batch < 1:
            raise UsageError("--epochs and --batch must be >= 1")
        if self.recipe not in RECIPES:
            raise UsageError(f"--recipe must be one of {', '.join(RECIPES)}")

    def fingerprint_dict(self) -> dict:
        """This config for checkpoint fingerprints (:func:`without_later_defaults`)."""
        return without_later_defaults(asdict(self), TRAIN_ADDED_LATER)


TRAIN_ADDED_LATER = {"recipe": "ours"}


@dataclass
class DarcyConfig:
    """The Darcy generator: -div(a grad u) = f (f = 1), u = 0 on the boundary of [0,1]^2."""

    n: int = option(100, "Samples.", min=1)
    solve_resolution: int = option(129, "Grid nodes per side of the solve (boundary included).", min=5)
    resolution: int = option(33, "Grid nodes per side written (a subsample of the solve grid: "
                             "(solve_resolution - 1) must be a multiple of (resolution - 1)).", min=3)
    alpha: float = option(2.0, "GRF covariance (-Laplacian + tau^2 I)^-alpha: alpha.", min=0, min_open=True)
    tau: float = option(3.0, "GRF covariance: tau.", min=0, min_open=True)
    high: float = option(12.0, "a where the GRF is >= 0.", min=0, min_open=True)
    low: float = option(3.0, "a where the GRF is < 0.", min=0, min_open=True)

    def check(self) -> None:
        if (self.solve_resolution - 1) % (self.resolution - 1):
            raise UsageError(f"--resolution {self.resolution}: (solve_resolution - 1) = {self.solve_resolution - 1} "
                             f"is not a multiple of (resolution - 1) = {self.resolution - 1}; e.g. 129 -> 33, 65, 129")


@dataclass
class BurgersConfig:
    """The Burgers generator: u_t + (u^2/2)_x = nu u_xx on the periodic [0, 1), ETDRK4 pseudo-spectral."""

    n: int = option(100, "Samples.", min=1)
    solve_resolution: int = option(8192, "Grid points of the solve.", min=16)
    resolution: int = option(1024, "Points written (a subsample: solve_resolution must be a multiple).", min=4)
    nu: float = option(0.1, "Viscosity.", min=0, min_open=True)
    t_final: float = option(1.0, "Time of the output field.", min=0, min_open=True)
    dt: float = option(1e-4, "ETDRK4 time step.", min=0, min_open=True)
    alpha: float = option(2.0, "GRF of u0: covariance 625 (-Laplacian + 25 I)^-alpha: alpha.", min=0, min_open=True)

    def check(self) -> None:
        if self.solve_resolution % self.resolution:
            raise UsageError(f"--resolution {self.resolution} does not divide --solve-resolution {self.solve_resolution}")


@dataclass
class FewShotConfig:
    """Few-shot sine regression: FuncAttn (sliced bases, softmax over points, ridge map) vs the ridge map over
    the points and softmax cross-attention [reconstructed setup]."""

    context: int = option(4, "Context points K per task.", min=1)
    queries: int = option(50, "Query points per task.", min=1)
    steps: int = option(3000, "Meta-training steps.", min=1)
    tasks: int = option(32, "Tasks per step.", min=1)
    width: int = option(64, "Encoder width.", min=4)
    ridge: float = option(1e-4, "FuncAttn ridge lambda.", min=0, min_open=True)
    bases: int = option(16, "FuncAttn: soft bases k over the context points.", min=1)
    lr: float = option(1e-3, "Adam learning rate.", min=0, min_open=True)
    test_tasks: int = option(1000, "Test tasks.", min=1)


@dataclass
class NSConfig:
    """The 2-D Navier-Stokes generator: vorticity on the periodic [0, 1)^2, pseudo-spectral Crank-Nicolson."""

    n: int = option(20, "Samples.", min=1)
    solve_resolution: int = option(64, "Grid points per side of the solve.", min=8)
    resolution: int = option(64, "Points per side written (a divisor of solve_resolution).", min=4)
    nu: float = option(1e-3, "Viscosity.", min=0, min_open=True)
    t_in: int = option(10, "Input snapshots (x).", min=1)
    t_out: int = option(10, "Output snapshots (y).", min=1)
    record_dt: float = option(1.0, "Time between snapshots.", min=0, min_open=True)
    dt: float = option(1e-3, "Largest time step.", min=0, min_open=True)

    def check(self) -> None:
        if self.solve_resolution % self.resolution:
            raise UsageError(f"--resolution {self.resolution} does not divide --solve-resolution {self.solve_resolution}")


PDES = ("darcy", "burgers", "ns")


@dataclass
class GenerateConfig:
    """The ``generate`` subcommand's options for every PDE (None: the PDE's default)."""

    n: int = option(100, "Samples.", min=1)
    solve_resolution: int | None = option(None, "Grid of the solve (darcy: nodes per side incl. the boundary, "
                                          "default 129; burgers: points, default 8192; ns: points per side, "
                                          "default 64).", min=5)
    resolution: int | None = option(None, "Grid written, a subsample of the solve (darcy: default 33, and "
                                    "(solve - 1) must be a multiple of (resolution - 1); burgers: default 1024, "
                                    "a divisor of the solve; ns: default 64, a divisor of the solve).", min=3)
    alpha: float | None = option(None, "GRF exponent alpha (darcy: (-Laplacian + tau^2)^-alpha, default 2; "
                                 "burgers: 625 (-Laplacian + 25)^-alpha, default 2).", min=0, min_open=True)
    tau: float = option(3.0, "darcy: GRF tau.", min=0, min_open=True)
    high: float = option(12.0, "darcy: a where the GRF is >= 0.", min=0, min_open=True)
    low: float = option(3.0, "darcy: a where the GRF is < 0.", min=0, min_open=True)
    nu: float | None = option(None, "Viscosity (burgers: default 0.1; ns: default 1e-3).", min=0, min_open=True)
    t_final: float = option(1.0, "burgers: time of the output field.", min=0, min_open=True)
    dt: float | None = option(None, "Time step (burgers: ETDRK4 step, default 1e-4; ns: largest Crank-Nicolson "
                              "step, default 1e-3).", min=0, min_open=True)
    t_in: int = option(10, "ns: input snapshots (x: N x t_in x H x W).", min=1)
    t_out: int = option(10, "ns: output snapshots (y: N x t_out x H x W).", min=1)
    record_dt: float = option(1.0, "ns: time between snapshots (x at record_dt * 1..t_in, y after).", min=0,
                              min_open=True)

    def for_pde(self, pde: str):
        if pde == "darcy":
            c = DarcyConfig(n=self.n, solve_resolution=self.solve_resolution or 129, resolution=self.resolution or 33,
                            alpha=self.alpha or 2.0, tau=self.tau, high=self.high, low=self.low)
        elif pde == "burgers":
            c = BurgersConfig(n=self.n, solve_resolution=self.solve_resolution or 8192,
                              resolution=self.resolution or 1024, nu=self.nu or 0.1, t_final=self.t_final,
                              dt=self.dt or 1e-4, alpha=self.alpha or 2.0)
        elif pde == "ns":
            c = NSConfig(n=self.n, solve_resolution=self.solve_resolution or 64, resolution=self.resolution or 64,
                         nu=self.nu or 1e-3, t_in=self.t_in, t_out=self.t_out, record_dt=self.record_dt,
                         dt=self.dt or 1e-3)
        else:
            raise UsageError(f"PDE must be one of {', '.join(PDES)}, not {pde!r}")
        c.check()
        return c
