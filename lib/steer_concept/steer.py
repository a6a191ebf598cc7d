"""The general rank-one affine steer and its special cases (LEACE, LEACE-Switch, MidSteer, CASteer).

With neutral mean mu0, whitening W = Sigma^{-1/2}, W+ = Sigma^{1/2} (see :mod:`.stats`), concept
means mu_s (source) and mu_t (target), s = W (mu_s - mu0), t = W (mu_t - mu0) and v = s - t, the
general steer with strength beta and direction u is (MidSteer, official code)::

    x' = x - beta * W+ v * clip+( u^T W (x - mu0) ) / ||u||^2

``clip+`` ("intermediate clipping": negative scores set to 0) is a flag, on by default as in the
official code. The transform is stored as three vectors: ``mu0``, ``left`` = W+ v and ``right`` =
W u / ||u||^2, so applying it costs two d-vector products per activation.

- ``leace``: u = v, beta = 1 -- the LEACE eraser of the binary concept {source, target} (equal class
  means afterwards, so no linear probe beats chance). Clipping is OFF by default for this method
  only: clipped, it is no longer the closed-form eraser (``clip=True`` gives the official code's
  clipped variant).
- ``leace-switch``: u = v, beta = 2 -- a reflection in whitened space; it maps s onto t only when
  ||s|| = ||t|| (reconstructed: the paper's "equidistance" assumption).
- ``midsteer``: u = s -- at beta = 1 maps mu_s exactly onto mu_t, fixes mu0 and every direction
  W-orthogonal to s. Reconstructed: in whitened space I - v s^T/||s||^2 is the minimum-Frobenius
  linear map with A s = t, hence the minimal expected neutral disturbance.
- ``casteer``: u = v with Sigma = I and mu0 = 0 (no whitening, no centring), beta = 2 by default:
  x' = x - beta clip+(x . b^) b^ with b = mu_s - mu_t (b = mu_s without a target).

Several concepts are applied in sequence (:class:`Steering` holds an ordered list of steps, each
tied to a layer key); each step's statistics are fitted on the unsteered activations.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.steer_concept.stats import DEFAULT_EIG_THRESHOLD, Stats, Whitening, concept_mean

METHODS = ("leace", "leace-switch", "midsteer", "casteer")
DEFAULT_BETA = {"leace": 1.0, "leace-switch": 2.0, "midsteer": 1.0, "casteer": 2.0}
FORMAT = "icmlkit-steer-concept/1"
# a source/target pair whose whitened means differ by at most this fraction of the larger norm
# (||s - t|| <= 1e-6 max(||s||, ||t||)) is refused: the steer would be a no-op (the same file twice)
MIN_MEAN_DIFFERENCE = 1e-6


def default_clip(method: str) -> bool:
    """Intermediate clipping default: on (official code), except for the closed-form LEACE eraser."""
    return method != "leace"


@dataclass
class SteerStep:
    """One rank-one steer: x' = x - beta * left * clip+((x - mu0) . right), optionally renormalised.

    ``layer`` ties the step to a layer of a model (or None for plain arrays); ``info`` holds the
    diagnostics written into the steering file (norms of s and t, effective rank, sample counts).
    """

    mu0: "object"
    left: "object"
    right: "object"
    beta: float = 1.0
    clip: bool = True
    renormalize: bool = False
    method: str = "midsteer"
    layer: int | None = None
    concept: str = "concept"
    info: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # optional tensors saved alongside (mu_s, mu_t)

    CHUNK = 32768

    @property
    def dim(self) -> int:
        return int(self.mu0.shape[0])

    def apply(self, x, strength: float | None = None):
        """Apply to ``x`` [..., d] (numpy or torch); float64 maths, result in ``x``'s dtype.

        ``strength`` replaces beta when given. The input is never modified in place.
        """
        import numpy as np
        import torch

        is_np = isinstance(x, np.ndarray)
        t = torch.from_numpy(np.asarray(x)) if is_np else x
        if t.shape[-1] != self.dim:
            raise InputError(f"activations have dimension {t.shape[-1]}, the steer expects {self.dim}",
                             f"layer {self.layer}" if self.layer is not None else "array")
        beta = self.beta if strength is None else float(strength)
        mu0, left, right = self._on(t.device)
        shape = t.shape
        flat = t.reshape(-1, shape[-1])
        offset = float(mu0 @ right)
        out = torch.empty_like(flat)
        for i in range(0, flat.shape[0], self.CHUNK):  # chunks of rows: bounded float64 scratch memory
            x64 = flat[i:i + self.CHUNK].to(torch.float64, copy=True)  # a clone: the input is never touched
            score = torch.mv(x64, right) - offset  # u^T W (x - mu0) / ||u||^2
            if self.clip:
                score = score.clamp_min(0.0)
            if self.renormalize:
                n_in = x64.norm(dim=-1, keepdim=True)
            x64.addr_(score, left, alpha=-beta)  # x - beta * score * left
            if self.renormalize:
                n_out = x64.norm(dim=-1, keepdim=True)
                x64.mul_(torch.where(n_out > 0, n_in / torch.where(n_out > 0, n_out, torch.ones_like(n_out)),
                                     torch.ones_like(n_out)))
            out[i:i + self.CHUNK] = x64.to(t.dtype)
        out = out.reshape(shape)
        return out.numpy() if is_np else out

    def _on(self, device):
        """mu0, left, right as float64 on ``device`` (cached: hooks call this every forward)."""
        import torch

        cache = self.__dict__.setdefault("_cache", {})
        key = str(device)
        if key not in cache:
            cache[key] = tuple(a.to(device=device, dtype=torch.float64) for a in (self.mu0, self.left, self.right))
        return cache[key]


def fit_step(mu_s, mu_t=None, neutral: Stats | None = None, *, method: str = "midsteer",
             beta: float | None = None, clip: bool | None = None, renormalize: bool = False,
             identity_cov: bool = False, zero_mean: bool = False,
             eig_threshold: float | None = DEFAULT_EIG_THRESHOLD, layer: int | None = None,
             concept: str = "concept", keep_means: bool = True) -> SteerStep:
    """Fit one steer from the concept means and the neutral statistics (all float64).

    ``mu_t=None`` means "no target": t = 0 (the target is the neutral mean; for CASteer b = mu_s),
    i.e. plain erasure of the source concept. ``casteer`` forces ``identity_cov`` and
    ``zero_mean``; the two flags can also be set for the other methods (the official
    ``identity_cov`` / ``zero_mu_neutral`` switches).
    """
    import torch

    if method not in METHODS:
        raise InputError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}", "method")
    if method == "casteer":
        identity_cov = zero_mean = True
    mu_s = torch.as_tensor(mu_s, dtype=torch.float64)
    d = int(mu_s.shape[0])
    if mu_t is not None:
        mu_t = torch.as_tensor(mu_t, dtype=torch.float64)
        if mu_t.shape != mu_s.shape:
            raise InputError(f"target mean has dimension {mu_t.shape[0]}, source has {d}", "target")
    if neutral is None and not (identity_cov and zero_mean):
        raise InputError(f"method {method} needs neutral statistics (mean and covariance)", "neutral")
    if neutral is not None and neutral.dim != d:
        raise InputError(f"neutral activations have dimension {neutral.dim}, the concept ones {d}", "neutral")
    dev = mu_s.device
    mu0 = torch.zeros(d, dtype=torch.float64, device=dev) if zero_mean else neutral.mean.to(dev)
    wh = Whitening(None if identity_cov else neutral.cov.to(dev), threshold=eig_threshold,
                   identity=identity_cov, dim=d, device=dev)
    s = wh.W @ (mu_s - mu0)
    t = wh.W @ (mu_t - mu0) if mu_t is not None else torch.zeros_like(s)
    v = s - t
    if mu_t is not None:
        scale = max(float(s.norm()), float(t.norm()))
        if not float(v.norm()) > MIN_MEAN_DIFFERENCE * scale:
            raise InputError(f"the source and target means coincide: whitened ||s - t|| = {float(v.norm()):.3g} <= "
                             f"{MIN_MEAN_DIFFERENCE:g} x max(||s||, ||t||) = {MIN_MEAN_DIFFERENCE * scale:.3g} "
                             f"(concept {concept!r}): nothing to steer (the same file twice?)", "source/target")
    u = s if method == "midsteer" else v
    uu = float(u @ u)
    if not uu > 1e-30:
        raise InputError("the source and target means coincide after whitening: nothing to steer",
                         "source/target")
    left = wh.W_plus @ v
    right = (wh.W @ u) / uu
    info = {"s_norm": float(s.norm()), "t_norm": float(t.norm()), "v_norm": float(v.norm()),
            "effective_rank": wh.effective_rank, "dim": d,
            "n_neutral": int(neutral.n) if neutral is not None else 0,
            "shrinkage": float(neutral.shrinkage) if neutral is not None else 0.0,
            "identity_cov": bool(identity_cov), "zero_mean": bool(zero_mean),
            "eig_threshold": None if eig_threshold is None else float(eig_threshold),
            "has_target": mu_t is not None}
    extra = {}
    if keep_means:
        extra["mu_s"] = mu_s
        if mu_t is not None:
            extra["mu_t"] = mu_t
    return SteerStep(mu0=mu0, left=left, right=right, beta=float(DEFAULT_BETA[method] if beta is None else beta),
                     clip=default_clip(method) if clip is None else bool(clip), renormalize=renormalize,
                     method=method, layer=layer, concept=concept, info=info, extra=extra)


def fit_from_arrays(source, target=None, neutral=None, *, shrinkage=None, **kwargs) -> SteerStep:
    """Convenience: fit a step from raw activations (concept rows and neutral rows)."""
    from icmlkit.lib.steer_concept.stats import neutral_stats

    stats = neutral_stats(neutral, shrinkage=shrinkage) if neutral is not None else None
    mu_t = concept_mean(target, "target") if target is not None else None
    return fit_step(concept_mean(source, "source"), mu_t, stats, **kwargs)


@dataclass
class Steering:
    """An ordered list of steps (several concepts, several layers) plus the embedding config.

    ``config`` records how the activations were taken (model, site, pool, ...), so that ``run``
    hooks the transform where it was fitted.
    """

    steps: list[SteerStep]
    config: dict = field(default_factory=dict)
    source: str = "STEER"  # where it was read from (named by the errors of check_model)

    @property
    def layers(self) -> list:
        seen = []
        for st in self.steps:
            if st.layer not in seen:
                seen.append(st.layer)
        return seen

    @property
    def methods(self) -> list[str]:
        return sorted({st.method for st in self.steps})

    def steps_for(self, layer) -> list[SteerStep]:
        return [st for st in self.steps if st.layer == layer]

    def apply(self, x, layer=None, strength: float | None = None):
        """Apply every step of ``layer`` in order to ``x`` [..., d]."""
        steps = self.steps_for(layer)
        if not steps:
            raise InputError(f"the steering file has no step for layer {layer}; it has {self.layers}", "layer")
        for st in steps:
            x = st.apply(x, strength)
        return x

    # ----------------------------------------------------------------------------- files

    def to_bytes(self) -> bytes:
        """Serialise to .safetensors bytes (float64 tensors, JSON metadata), deterministically
        (lib/core/io's writer)."""
        import torch

        from icmlkit.lib.core.io import safetensors_bytes

        tensors, steps_meta = {}, []
        for i, st in enumerate(self.steps):
            tensors[f"step{i}.mu0"] = st.mu0.detach().to("cpu", torch.float64)
            tensors[f"step{i}.left"] = st.left.detach().to("cpu", torch.float64)
            tensors[f"step{i}.right"] = st.right.detach().to("cpu", torch.float64)
            for k, v in sorted(st.extra.items()):
                tensors[f"step{i}.{k}"] = v.detach().to("cpu", torch.float64)
            steps_meta.append({"layer": st.layer, "concept": st.concept, "method": st.method, "beta": st.beta,
                               "clip": st.clip, "renormalize": st.renormalize, **st.info})
        return safetensors_bytes(tensors, {"format": FORMAT, "config": json.dumps(self.config, sort_keys=True),
                                           "steps": json.dumps(steps_meta, sort_keys=True)})

    def save(self, path) -> None:
        from icmlkit.lib.core.io import write_bytes

        write_bytes(path, self.to_bytes())

    @classmethod
    def load(cls, path) -> "Steering":
        """Read a steering file, checking every tensor and field (errors name the file and key)."""
        import torch

        from icmlkit.lib.core.io import display_name, read_safetensors

        name = display_name(path)
        arrays, meta = read_safetensors(path, FORMAT, what="steer-concept file")
        tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
        try:
            config = json.loads(meta.get("config", "{}"))
            steps_meta = json.loads(meta["steps"])
        except (KeyError, ValueError) as exc:
            raise InputError(f"bad metadata field ({exc})", name) from None
        steps = []
        for i, sm in enumerate(steps_meta):
            got = {}
            for key in ("mu0", "left", "right"):
                k = f"step{i}.{key}"
                if k not in tensors:
                    raise InputError(f"tensor {k!r} is missing", name)
                got[key] = tensors[k].to(torch.float64)
            d = got["mu0"].shape
            if len(d) != 1 or got["left"].shape != d or got["right"].shape != d:
                raise InputError(f"step {i}: mu0/left/right must be vectors of one length, got "
                                 f"{[tuple(g.shape) for g in got.values()]}", name)
            extra = {k.split(".", 1)[1]: v for k, v in tensors.items()
                     if k.startswith(f"step{i}.") and k.split(".", 1)[1] not in ("mu0", "left", "right")}
            info = {k: v for k, v in sm.items()
                    if k not in ("layer", "concept", "method", "beta", "clip", "renormalize")}
            try:
                steps.append(SteerStep(mu0=got["mu0"], left=got["left"], right=got["right"],
                                       beta=float(sm["beta"]), clip=bool(sm["clip"]),
                                       renormalize=bool(sm.get("renormalize", False)), method=str(sm["method"]),
                                       layer=sm.get("layer"), concept=str(sm.get("concept", "concept")),
                                       info=info, extra=extra))
            except KeyError as exc:
                raise InputError(f"step {i}: metadata field {exc} is missing", name) from None
        if not steps:
            raise InputError("holds no steering step", name)
        return cls(steps=steps, config=config, source=name)

    def check_model(self, loaded) -> None:
        """Refuse, before any text is embedded, a model other than the one the steer was fitted on
        (issue 59: hooked into another model of the same width it steered silently): the recorded model
        name (the same folder by another path is the same model), a layer the model lacks, or another
        activation width at a built-in site. A UsageError naming the steering file and both settings."""
        from icmlkit.lib.hf.hooks import SITE_PATHS, find_layers
        from icmlkit.lib.hf.models import same_model

        name = self.source
        rec, given = self.config.get("model"), str(loaded.name)
        if rec not in (None, "none") and not same_model(rec, given):
            raise UsageError(f"{name}: the steer was fitted on model {rec!r}, not {given!r}; give that model")
        layers = [L for L in self.layers if L is not None]
        if layers:
            n = len(find_layers(loaded.model))
            bad = [L for L in layers if not 0 <= L < n]
            if bad:
                raise UsageError(f"{name}: the steer was fitted at layer {bad[0]}; the model {given!r} has {n} "
                                 f"layers (0..{n - 1})")
        width = getattr(getattr(loaded.model, "config", None), "hidden_size", None)
        if isinstance(width, int) and self.config.get("site", "attn") in SITE_PATHS:
            for st in self.steps:
                if st.layer is not None and st.dim != width:
                    raise UsageError(f"{name}: the steer was fitted on {st.dim}-d activations at layer {st.layer}; "
                                     f"the model {given!r} has width {width}")

    def summary(self) -> dict:
        return {"methods": self.methods, "layers": self.layers, "steps": len(self.steps),
                "dim": self.steps[0].dim, "concepts": sorted({st.concept for st in self.steps})}


@dataclass
class ApplyResult:
    """``arrays``: every array of the input, the steered ones replaced (and ``meta`` updated);
    ``summary``: steered (array names), rows, strength, mean_shift, seconds, vectors_per_second."""

    arrays: dict
    summary: dict


# what must agree between a steer fitted on `embed` output and the activations it is applied to
MATCH_KEYS = ("model", "site")


def apply_targets(steering: Steering, acts, key: str | None = None) -> list:
    """[(layer, array name)] that ``apply`` steers in ``acts``, after checking that they are what
    the steer was fitted on; otherwise a one-line :class:`InputError` naming the file (exit 1, the
    contract's data-error code).

    - A steer fitted on activation files (its config records the ``model``): ``acts`` must carry
      ``embed``'s metadata (``embed``, ``merge`` and ``run`` write it) with the same model and site,
      its recorded ``layers`` must include every steered layer, and it must hold a ``layer_<L>``
      array for each of them.
    - A steer fitted on plain arrays (no layers): the array named ``key``, else the array name the
      steer was fitted on (recorded as ``array`` by ``fit``; steers written before that need
      ``key``). Any other array, such as the covariance in ``generate``'s truth.npz, is refused."""
    from icmlkit.lib.steer_concept.io import layer_keys

    cfg, meta, name = steering.config, acts.meta, acts.name
    if cfg.get("model") is not None:
        if not meta.get("model"):
            raise InputError(f"not written by `steer-concept embed` (no model/layer metadata); the steer was "
                             f"fitted on {cfg['model']} activations at site {cfg.get('site')}", name)
        diff = [k for k in MATCH_KEYS if k in cfg and meta.get(k) != cfg.get(k)]
        if diff:
            raise InputError("; ".join(f"{k} {meta.get(k)!r} differs from the steer's {cfg.get(k)!r}" for k in diff),
                             name)
        if isinstance(meta.get("layers"), list) and steering.layers != [None]:
            absent = [L for L in steering.layers if L not in meta["layers"]]
            if absent:
                raise InputError(f"its metadata records layers {meta['layers']}; the steer has steps for "
                                 f"{[f'layer_{L}' for L in absent]}", name)
    if steering.layers == [None]:
        if key is None:
            key = cfg.get("array")
            if key is None:
                raise InputError("the steer does not record which array it was fitted on; pass --key", name)
        if key not in acts.arrays:
            raise InputError(f"has no array {key!r} (the steer was fitted on {cfg.get('array', key)!r}; the file "
                             f"has {sorted(acts.arrays)})", name)
        return [(None, key)]
    present = layer_keys(acts.arrays)
    missing = [L for L in steering.layers if L not in present]
    if missing:
        raise InputError(f"the steer needs arrays {[f'layer_{L}' for L in missing]}; the file has "
                         f"{sorted(acts.arrays)}", name)
    return [(L, present[L]) for L in steering.layers]


def apply_to_arrays(steering: Steering, acts, *, strength: float | None = None, key: str | None = None,
                    steered_with: str = "") -> ApplyResult:
    """The library call of ``steer-concept apply``: each ``layer_<L>`` of the activation file
    ``acts`` (:class:`.io.ActivationFile`) gets its layer's steps in order; a steer fitted on plain
    arrays applies to ``key`` or the array it was fitted on. Files the steer was not fitted for
    are refused (:func:`apply_targets`)."""
    import time

    import numpy as np

    from icmlkit.lib.steer_concept.io import check_matrix

    data = dict(acts.arrays)
    targets = apply_targets(steering, acts, key)
    t0 = time.perf_counter()
    shift, n = 0.0, 0
    for L, k in targets:
        x = check_matrix(data[k], acts.name, k, steering.steps_for(L)[0].dim)
        y = steering.apply(x, L, strength)
        shift += float(np.linalg.norm(y.astype(np.float64) - x, axis=1).sum())
        n += x.shape[0]
        data[k] = y
    secs = time.perf_counter() - t0
    if acts.meta:
        data["meta"] = np.array(json.dumps({**acts.meta, "steered_with": steered_with, "strength": strength},
                                           sort_keys=True))
    summary = {"steered": [k for _, k in targets], "rows": n, "strength": strength, "mean_shift": shift / max(n, 1),
               "seconds": round(secs, 4), "vectors_per_second": round(n / secs, 1) if secs > 0 else None}
    return ApplyResult(data, summary)
