"""The option dataclasses of metric-match (train, query, knn, interpolate, eval, generate) with their
command-line help. Standard library only: the CLI declares its options from them without importing
torch or numpy (``--help`` stays fast)."""
from __future__ import annotations

from dataclasses import dataclass

from icmlkit.lib.core.config import number_list, option as _opt
from icmlkit.lib.core.errors import UsageError

BANDWIDTHS = ("lognormal", "uniform", "lognormalwide")
SCALES = ("rms", "none")
DIM_RULES = ("eigengap", "threshold")
NETS = ("auto", "mlp", "unet")
MANIFOLDS = ("sphere", "squiggly-circle", "torus", "swiss-roll")  # plus skdim:<name>
# the bound on the log-h embedding's frequencies (radians per unit of log h): a period of 0.2 in
# log h, i.e. a 20 % change of h, finer than any h the tool compares [reconstructed choice]
H_FREQ_MAX = 32.0
# the h grid on which `train` chooses the model's default query h (24 bandwidths over 0.015 .. 0.6, the
# benchmark's grid for metric matching)
DEFAULT_H_GRID = ("0.015,0.02,0.025,0.03,0.035,0.04,0.05,0.06,0.07,0.08,0.09,0.1,0.12,0.14,0.16,0.18,0.2,0.25,"
                  "0.3,0.35,0.4,0.45,0.5,0.6")


def parse_grid(text: str, flag: str, cast=float) -> list:
    """A comma-separated list of positive numbers (``flag`` names the option in the error)."""
    return number_list(text, flag, cast, positive=True)


@dataclass
class TrainConfig:
    """Options of :func:`~icmlkit.lib.metric_match.train.train` (the ``train`` subcommand)."""

    steps: int = _opt(3000, "Optimizer steps of the metric network.", min=1)
    batch: int = _opt(512, "Global batch (points x one noise draw each); split evenly over torchrun processes.",
                      min=1)
    rank: int | None = _opt(None, "Rows r of M(y, h) (Gamma = M^T M has rank <= r; at least 1); default "
                            "min(D, 16). Thm 4.2: r >= 2d - 1 suffices.", min=1)
    dim: int | None = _opt(None, "Known intrinsic dimension d (only to warn when --rank < 2d - 1).", min=1)
    net: str = _opt("auto", "Network: auto (the small UNet for image sets - a folder of PNGs or an .npz of (N, H, "
                    "W[, C]) images - the FiLM MLP otherwise), mlp, or unet (image sets only) [reconstructed "
                    "layouts].", choices=NETS)
    channels: int = _opt(32, "unet: base channels (2x at the two lower resolutions).", min=1)
    width: int = _opt(256, "Hidden width of the FiLM MLP.", min=1)
    blocks: int = _opt(3, "Residual FiLM blocks of the MLP.", min=1)
    emb: int = _opt(32, "Sinusoidal frequencies of the log-h embedding.", min=1)
    h_freq_max: float = _opt(H_FREQ_MAX, "Largest frequency of the log-h embedding (radians per unit of log h): 2^k/8 "
                             "while below it, else --emb geometric steps from 1/8 to it (unbounded 2^k/8 reached "
                             "2.7e8 at --emb 32).", min=0.125)
    lr: float = _opt(1e-3, "AdamW learning rate (cosine decay to 0; [reconstructed] schedule).", min=0,
                     min_open=True)
    weight_decay: float = _opt(0.0, "AdamW weight decay (official configs: 0).", min=0)
    bandwidth: str = _opt("lognormal", "Per-sample noise level h: lognormal exp(N(-1.2, 1.2^2)) clamped to "
                          "[h-min, h-max]; uniform on [h-min, h-max]; lognormalwide exp(N(0, 1)) clamped.",
                          choices=BANDWIDTHS)
    h_min: float = _opt(1e-3, "Smallest training h (standardised units); queries below it are refused.", min=0,
                        min_open=True)
    h_max: float = _opt(16.0, "Largest training h (standardised units); queries above it are refused.", min=0,
                        min_open=True)
    tikhonov: float = _opt(0.0, "lambda of Gamma = M^T M + lambda I (adds 2 lambda |M|^2 to the loss).", min=0)
    val_points: int = _opt(500, "Points of DATA held out (never trained on; at most a fifth of DATA) to choose the "
                           "model's default query h from --h-grid, stored in the model: the lowest mean projector "
                           "error of the top-d eigenvectors when DATA has exact tangents (array 'tangent', as "
                           "`generate` writes; the benchmark's criterion), else the lowest chord residual (the "
                           "part of the unit chords to the 10 nearest training points outside the top-d "
                           "eigenvectors; d from --dim, DATA's 'dim' or the most frequent median local "
                           "dimension over the grid) [reconstructed]. 0: no split (query then needs --h).", min=0)
    h_grid: str = _opt(DEFAULT_H_GRID, "Comma-separated h values tried for the default query h (those outside "
                       "[--h-min, --h-max] are dropped).")
    centred: bool = _opt(False, "Mean-centred variant: train and freeze a denoiser D(y, h) first, then "
                         "delta = (X - D(Y, h)) / (sqrt(2) h). Recommended: better tangents than the plain target at the "
                         "same total steps in the benchmark.")
    denoiser_steps: int = _opt(1000, "--centred: steps of the denoiser (same architecture, EDM-style "
                               "preconditioning [reconstructed]).", min=1)
    scale: str = _opt("rms", "rms: centre the data and divide by its RMS radius (h is then in these "
                      "standardised units, stored in the model); none: raw units.", choices=SCALES)
    precision: str = _opt("float32", "Training precision (float64: torchrun runs agree to round-off).",
                          choices=("float32", "float64"))
    log_every: int = _opt(50, "Write a loss row every this many steps.", min=1)
    threads: int = _opt(0, "torch CPU threads (0: leave torch's default, at most 2).", min=0, max=2)

    def check(self) -> None:
        if self.bandwidth not in BANDWIDTHS:
            raise UsageError(f"--bandwidth must be one of {', '.join(BANDWIDTHS)}, not {self.bandwidth!r}")
        if self.scale not in SCALES:
            raise UsageError(f"--scale must be rms or none, not {self.scale!r}")
        if self.net not in NETS:
            raise UsageError(f"--net must be one of {', '.join(NETS)}, not {self.net!r}")
        if not (0 < self.h_min < self.h_max):
            raise UsageError(f"--h-min ({self.h_min}) must be > 0 and below --h-max ({self.h_max})")
        if self.steps < 1 or self.batch < 1 or self.width < 1 or self.blocks < 1:
            raise UsageError("--steps, --batch, --width and --blocks must be >= 1")
        if self.rank is not None and self.rank < 1:
            raise UsageError(f"--rank {self.rank} is out of range: it must be >= 1")
        if self.lr <= 0:
            raise UsageError("--lr must be > 0")
        if self.val_points < 0:
            raise UsageError("--val-points must be >= 0")
        if self.val_points and not self.h_values():
            raise UsageError(f"--h-grid has no value in the trained range [{self.h_min:g}, {self.h_max:g}]")

    def h_values(self) -> list[float]:
        """--h-grid's values inside [h_min, h_max]."""
        return [h for h in parse_grid(self.h_grid, "--h-grid") if self.h_min <= h <= self.h_max]


@dataclass
class QueryConfig:
    """Options of :func:`~icmlkit.lib.metric_match.api.query` (and of ``knn``'s outputs)."""

    h: float | None = _opt(None, "Noise level h at which to read the geometry (standardised units; must lie in "
                           "the model's trained range); default: the h `train` chose on its validation split "
                           "(stored in the model, see `train --val-points`).", min=0, min_open=True)
    what: str = _opt("tangent", "metric: the factor M and the eigenvectors; tangent: the top-d basis; dim: local "
                     "dimension; gradient: Gamma grad f for f(y) = v . y (--direction).",
                     choices=("metric", "tangent", "dim", "gradient"))
    dim: int | None = _opt(None, "Tangent dimension d to return (default: the median of the points' local "
                           "dimensions).",
                           min=1)
    dim_rule: str = _opt("eigengap", "Local dimension from the spectrum: eigengap (argmax_k lambda_k - "
                         "lambda_{k+1}, lambda_{r+1} = 0) or threshold (count of lambda_k > --dim-threshold * "
                         "lambda_1) [reconstructed rules].", choices=DIM_RULES)
    dim_threshold: float = _opt(0.5, "--dim-rule threshold: the fraction of the top eigenvalue.", min=0,
                                max=1, min_open=True)
    direction: str | None = _opt(None, "--what gradient: the vector v of f(y) = v . y: D comma-separated "
                                 "numbers or a .npy file.")
    batch: int = _opt(4096, "Query points per network call.", min=1)

    def check(self) -> None:
        if self.dim_rule not in DIM_RULES:
            raise UsageError(f"--dim-rule must be eigengap or threshold, not {self.dim_rule!r}")
        if self.what == "gradient" and not self.direction:
            raise UsageError("--what gradient needs --direction (the vector v of f(y) = v . y)")


@dataclass
class KnnConfig:
    """Options of the kNN / kernel carre-du-champ baseline (:func:`~icmlkit.lib.metric_match.knn.knn_cdc`)."""

    k: int = _opt(32, "Neighbours (the query point itself excluded when it is in DATA).", min=1)
    knn_h: float = _opt(0.1, "Kernel bandwidth h (weights softmax(-|y - x|^2 / 2h^2); Gamma divided by h^2, a "
                        "factor 2 above metric matching's target).", min=0, min_open=True, flag="--h")
    halve: bool = _opt(False, "Divide Gamma by 2 (metric matching's 1/2eps convention) so the spectra compare "
                       "directly.")
    scale: str = _opt("rms", "rms: standardise DATA (and POINTS with DATA's centre and radius) as `train` "
                      "does, so h means the same; none: raw units.", choices=SCALES)
    chunk: int = _opt(256, "Query points per distance block (memory: chunk x N floats).", min=1)

    def check(self) -> None:
        if self.scale not in SCALES:
            raise UsageError(f"--scale must be rms or none, not {self.scale!r}")


@dataclass
class InterpolateConfig:
    """Options of :func:`~icmlkit.lib.metric_match.api.interpolate`."""

    h: float | None = _opt(None, "Noise level h of the metric that drives the flow (in the trained range); "
                           "default: the h `train` chose on its validation split (stored in the model).", min=0,
                           min_open=True)
    steps: int = _opt(32, "Points on the path (A and B included).", min=2)

    def check(self) -> None:
        if self.steps < 2:
            raise UsageError("--steps must be >= 2")


@dataclass
class EvalConfig:
    """Options of :func:`~icmlkit.lib.metric_match.api.evaluate`."""

    h: float | None = _opt(None, "Noise level h; default: the best of --h-grid on TESTSET (reported).", min=0,
                           min_open=True)
    h_grid: str = _opt("0.01,0.02,0.05,0.1,0.2,0.3,0.5", "Comma-separated h values tried when --h is not "
                       "given (those outside the trained range are dropped), also the kNN baseline's h grid.")
    knn_k: str = _opt("16,32,64,128", "Comma-separated k values of the kNN baseline grid (with --data).")
    dim_rule: str = _opt("eigengap", "Local dimension rule (see `query --dim-rule`).", choices=DIM_RULES)
    dim_threshold: float = _opt(0.5, "--dim-rule threshold: the fraction of the top eigenvalue.", min=0, max=1,
                                min_open=True)

    def grid(self, name: str, cast=float) -> list:
        text = self.h_grid if name == "h" else self.knn_k
        return parse_grid(text, "--h-grid" if name == "h" else "--knn-k", cast)

    def check(self) -> None:
        self.grid("h")
        self.grid("k", int)


@dataclass
class GenerateConfig:
    """Options of :func:`~icmlkit.lib.metric_match.generate.generate`."""

    n: int = _opt(1000, "Points.", min=1)
    d: int = _opt(2, "sphere: intrinsic dimension d of S^d.", min=1)
    ambient: int | None = _opt(None, "Ambient dimension D (padded with zeros; default: the manifold's own).",
                               min=1, flag="--D")
    rotate: bool = _opt(False, "Apply a random rotation of R^D (seeded) after padding.")
    noise: float = _opt(0.0, "Isotropic Gaussian noise std added to the points (tangents stay exact for the "
                        "clean points, saved as `clean`).", min=0)
    waves: int = _opt(5, "squiggly-circle: k of r = 1 + 0.3 sin(k theta).", min=1)
