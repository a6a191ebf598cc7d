"""The option dataclasses of train-3dgs (fit, the initialisation, the synthetic scene), with their
command-line help: torch-free, so the CLI declares its options from them without importing torch."""
from __future__ import annotations

from dataclasses import dataclass, field

from icmlkit.lib.core.config import option as _opt
from icmlkit.lib.core.errors import UsageError


CURVATURES = ("hvp", "gn", "gn-train")
SCHEDULES = ("literal", "scaled")


@dataclass
class FitConfig:
    """Options of :func:`~icmlkit.lib.train_3dgs.train.fit` (the CLI's flags, declared once here)."""

    optimizer: str = _opt("tr", "tr: 3DGS2-TR; adam: the reference 3DGS Adam (per-group learning rates).",
                          choices=("tr", "adam"))
    iters: int = _opt(1000, "Optimizer steps.", min=1)
    batch: int = _opt(4, "Views per step.", min=1)
    sh_degree: int = _opt(3, "Maximum SH degree.", min=0, max=3)
    sh_every: int = _opt(1000, "Raise the active SH degree every this many steps (3DGS).", min=1)
    lambda_dssim: float = 0.2
    reg_opacity: float = _opt(0.0, "Loss term lambda * mean(opacity) (3DGS-MCMC-style regulariser; RECONSTRUCTED as "
                              "part of the prototype's training loss).", min=0)
    reg_scale: float = _opt(0.0, "Loss term lambda * mean(scale) (3DGS-MCMC-style regulariser; RECONSTRUCTED).", min=0)
    eval_every: int = _opt(100, "Evaluate PSNR/SSIM on the test views every this many steps.", min=1)
    tile_size: int | None = _opt(4, "Tile culling with tiles of this many pixels; 0: dense (every Gaussian on "
                                 "every pixel).", min=0)
    recompute: bool = _opt(False, "Recompute each compositing piece in the backward pass (activation checkpointing, "
                           "double backward kept): the training graph's memory stops growing with image size x list "
                           "length, for large images on a GPU; the same numbers, more time.")
    # 3DGS2-TR
    curvature: str = _opt("hvp", "TR: hvp: Hutchinson with Hessian-vector products of the L2 loss; gn: Gauss-Newton "
                          "J^T J z of the L2 residual; gn-train: Gauss-Newton of the square-root residual of the "
                          "training loss itself (L1 + D-SSIM + regularisers, the prototype's choice; the residual "
                          "floor is RECONSTRUCTED).", choices=CURVATURES)
    curvature_views: int = _opt(1, "TR: views per curvature pass (rendered, differentiated twice and freed in turn; "
                                "the same probe z); 0: the whole batch in one graph (more memory).", min=0)
    hessian_every: int = _opt(10, "TR: refresh the curvature diagonal every k steps.", min=1)
    radius: float = _opt(1e-6, "TR: initial squared-Hellinger radius.", min=0, min_open=True)
    radius_final: float = _opt(1e-8, "TR: final radius (exponential decay).", min=0, min_open=True)
    schedule: str = _opt("literal", "TR: literal: --radius -> --radius-final over --iters (the paper's setting); "
                         "scaled: both ends times c^2, c = (sum of sqrt(radius) over --schedule-horizon steps) / (the "
                         "same over --iters), so the run has the paper's total travel budget (derived, "
                         "RECONSTRUCTED as a horizon correction).", choices=SCHEDULES)
    schedule_horizon: int = _opt(30000, "TR: the run length whose travel budget --schedule scaled matches (the "
                                 "paper's 30k iterations).", min=1)
    opacity_radius: float | None = _opt(None, "TR: a separate initial radius for the opacity clip, decaying in "
                                        "proportion to the main schedule (the prototype's; RECONSTRUCTED); unset: the "
                                        "main radius.", min=0, min_open=True)
    color_caps: bool = _opt(False, "TR: also cap the DC colour step so C0 f_dc + 0.5 stays in [0, 1] (the kernel's "
                            "later colour-range caps; RECONSTRUCTED).")
    beta1: float = _opt(0.9, "TR: momentum EMA factor.")
    beta2: float = _opt(0.999, "TR: curvature EMA factor.")
    eps: float = _opt(1e-15, "TR: added to the curvature diagonal.", min=0)
    block_average: bool = _opt(True, "TR: average the diagonal over each Gaussian's parameter block (the "
                               "prototype: off).")
    abs_before_ema: bool = _opt(False, "TR: take |D_hat| before the moving average (the prototype) instead of |D| "
                                "after it (the 1-D toy, Sophia).")
    probes: int = _opt(1, "TR: Rademacher probes per refresh.", min=1)
    initial_probes: int = _opt(1, "TR: probes of the first refresh (the prototype: 20).", min=1)
    renorm_quats_every: int = _opt(0, "TR: set q <- q/|q| every this many steps (the rotation is unchanged; the "
                                   "prototype: 10); 0: never.", min=0)
    opacity_floor: float = _opt(0.1, "TR: o_min, the floor of o_bar = clamp(sigmoid(opacity), o_min, 1) in the trust "
                                "region's bounds (the authors' prototype: 0.1; this project used 0.01 before).",
                                min=0, max=1, min_open=True, max_open=True)
    tau_q: float = _opt(0.01, "TR: the quaternion radius: each rotation component moves by at most |q| tau_q beside "
                        "its Hellinger bound (the authors' prototype: 0.01; this project used 0.05 before).", min=0,
                        min_open=True)
    # both optimizers
    prune_opacity: float = _opt(0.0, "Remove the Gaussians whose opacity is below this floor every --prune-every steps "
                                "(3DGS prunes at 0.005 between its densification steps; the optimizer state of the rest "
                                "is kept); 0: never, N stays fixed.", min=0, max=1, max_open=True)
    prune_every: int = _opt(100, "With --prune-opacity: prune every this many steps (never after the last).", min=1)
    # Adam
    adam_lr_scale: float = _opt(1.0, "Adam: multiply the reference 3DGS learning rate of every group (the means' "
                                "decay from 1.6e-4 to 1.6e-6 too) by this factor; 1: the reference rates.", min=0,
                                min_open=True)
    extent: float | None = None      # scene extent for the means' learning rate (None: 3DGS's camera radius)
    eval_iters: list = field(default_factory=list)  # extra iterations at which to evaluate

    def check(self) -> None:
        if self.optimizer not in ("tr", "adam"):
            raise UsageError(f"--optimizer must be tr or adam, not {self.optimizer!r}")
        if self.curvature not in CURVATURES:
            raise UsageError(f"--curvature must be one of {', '.join(CURVATURES)}, not {self.curvature!r}")
        if self.schedule not in SCHEDULES:
            raise UsageError(f"--schedule must be literal or scaled, not {self.schedule!r}")
        for name in ("iters", "batch", "hessian_every", "probes", "initial_probes", "schedule_horizon", "prune_every"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be >= 1")
        if self.curvature_views < 0:
            raise UsageError("--curvature-views must be >= 0")
        if not (self.radius > 0 and self.radius_final > 0):
            raise UsageError("--radius and --radius-final must be > 0")
        if not 0 <= self.prune_opacity < 1:
            raise UsageError("--prune-opacity must be in [0, 1)")
        if not self.adam_lr_scale > 0:
            raise UsageError("--adam-lr-scale must be > 0")
        if self.opacity_radius is not None and not self.opacity_radius > 0:
            raise UsageError("--opacity-radius must be > 0")
        if self.renorm_quats_every < 0 or self.reg_opacity < 0 or self.reg_scale < 0:
            raise UsageError("--renorm-quats-every, --reg-opacity and --reg-scale must be >= 0")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise UsageError(f"--{name} must be in [0, 1)")


INIT_MODES = ("auto", "random", "sfm", "gt-noise")


@dataclass
class InitConfig:
    """Where the Gaussians start (:func:`~icmlkit.lib.train_3dgs.train.starting_gaussians`)."""

    init: str = _opt("auto", "auto: COLMAP points when present, else random; random: uniform in the box the cameras "
                     "look at; gt-noise: known means (gt.ply of `generate`) + noise.", choices=INIT_MODES)
    n_gaussians: int = _opt(5000, "N for --init random.", min=1)
    noise: float = _opt(0.05, "--init gt-noise: std of the noise on the means, times the extent of the known "
                        "means.", min=0)
    init_opacity: float = _opt(0.1, "Initial opacity (3DGS: 0.1; 3DGS-MCMC and the TR prototype: 0.5).", min=0,
                               max=1, min_open=True)

    def check(self) -> None:
        if self.init not in INIT_MODES:
            raise UsageError(f"--init must be one of {', '.join(INIT_MODES)}, not {self.init!r}")
        if self.n_gaussians < 1 or self.noise < 0:
            raise UsageError("--n-gaussians must be >= 1 and --noise >= 0")
        if not 0 < self.init_opacity < 1:
            raise UsageError("--init-opacity must be in (0, 1)")


@dataclass
class SyntheticSceneConfig:
    """Options of :func:`~icmlkit.lib.train_3dgs.scene.generate_scene` (the ``generate`` subcommand)."""

    n_gaussians: int = _opt(800, "Known Gaussians.", min=1)
    size: int = _opt(64, "Image width = height.", min=8)
    n_train: int = _opt(32, "Train views.", min=1, flag="--train")
    n_test: int = _opt(8, "Test views.", min=0, flag="--test")
    sh_degree: int = _opt(1, "SH degree of the known Gaussians.", min=0, max=3)
    fov_deg: float = _opt(40.0, "Horizontal field of view (deg).", min=5, max=150, flag="--fov")
    scales: str = _opt("fixed", "fixed: log-uniform 0.02..0.08 (the 3DGS kNN init starts about 4x too large); knn: "
                       "each Gaussian's kNN scale (3 neighbours, as the init) times a log-uniform factor in 1/2..2, so "
                       "the kNN init is right on average (RECONSTRUCTED scene design).", choices=("fixed", "knn"))
