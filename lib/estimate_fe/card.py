"""CARD end to end: frames -> gauge -> radix -> trained model -> BAR free energy.

- :func:`prepare` applies the atom order and the gauge (frame gauge with J = x2^2 y3 for
  invariant molecules) and returns free coordinates y and the target's reduced energy on them,
  u_t = beta U - log J (method sheet, Pitfalls: measure and gauge).
- :func:`train` fits q_theta by Stage I (NLL) then Stage II (NLL + the batch mean of |U~_theta - U~|
  with both energies mean-centred in the batch, U_theta = -log q; method sheet step 5, Eq. 24;
  the weighting is reconstructed).
- :func:`estimate` draws model samples with their exact log q, evaluates the target energy on them,
  computes log q on decorrelated target frames, and runs BAR (or MBAR) with both EXP directions,
  overlap and ESS. f_kT = Delta f - log(8 pi^2) for molecules (per volume, Angstrom), Delta f for
  external-field systems.
- Model files are torch .pt dicts of tensors and plain types (loaded with weights_only=True).
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass

import numpy as np

from icmlkit.lib.core.console import log, progress
from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.io import read_torch, write_torch
from icmlkit.lib.estimate_fe import gauge as G
from icmlkit.lib.estimate_fe.estimate import bar_estimate, decorrelate
from icmlkit.lib.estimate_fe.radix import RadixMap

FORMAT = "icmlkit-card-2"  # 2: no softmax-redundant biases (key bias, per-head distance-bias offset)


@dataclass
class Prepared:
    y: np.ndarray  # (M, N, 3) free coordinates (gauge-fixed, model order)
    u_t: np.ndarray  # reduced target energy on the free coordinates (beta U - log J)
    log_j: np.ndarray


def frames_digest(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x, dtype=np.float64).tobytes()).hexdigest()[:16]


def prepare(x: np.ndarray, u: np.ndarray, order, invariant: bool, zmat=None) -> Prepared:
    """Frames -> free coordinates in model order: the frame gauge, the internal-coordinate chart
    ``zmat`` (:class:`~icmlkit.lib.estimate_fe.internal.ZMatrix`) or the identity (traps)."""
    xo = np.asarray(x, dtype=np.float64)[:, order]
    if zmat is not None:
        y, lj = zmat.to_free(xo)
    elif invariant:
        y = G.to_frame(xo)
        lj = G.log_jacobian(y)
    else:
        y, lj = xo, np.zeros(len(xo))
    return Prepared(y=y, u_t=np.asarray(u, dtype=np.float64) - lj, log_j=lj)


def to_cartesian(y: np.ndarray, order) -> np.ndarray:
    """Frame-gauge coordinates in model order -> frames in the system's atom order."""
    x = np.empty_like(y)
    x[:, order] = y
    return x


def zmatrix_of(bundle: dict):
    """The internal-coordinate chart of a bundle (None: Cartesian free coordinates)."""
    from icmlkit.lib.estimate_fe.internal import ZMatrix

    c = bundle.get("coords")
    return ZMatrix.from_state(c) if c else None


def free_to_frames(y: np.ndarray, order, invariant: bool, zmat=None) -> tuple[np.ndarray, np.ndarray]:
    """Model free coordinates -> (frames in the system's atom order, log J of the chart)."""
    if zmat is not None:
        xo, lj = zmat.to_cartesian(y)
        return to_cartesian(xo, order), lj
    return to_cartesian(y, order), (G.log_jacobian(y) if invariant else np.zeros(len(y)))


def _ref_dist(y: np.ndarray, n_ref: int) -> np.ndarray:
    idx = np.linspace(0, len(y) - 1, min(n_ref, len(y))).round().astype(int)
    r = y[idx]
    return np.linalg.norm(r[:, :, None] - r[:, None], axis=-1)


def build(system, x: np.ndarray, r: int = 4, L: int = 3, K: int = 8, d: int = 32, heads: int = 4, enc_layers: int = 2,
          dec_layers: int = 2, margin: float = 1.5, box: float | None = None, n_ref: int = 8, eps: float = 1e-6,
          coords: str = "cartesian"):
    """Order, gauge (or internal-coordinate chart), box and an untrained CARD model for ``system``
    from its frames; returns (model, order, zmat) with zmat None for Cartesian coordinates.

    ``coords="internal"`` (reconstructed, issue 28): the radix map decomposes the unit-box internal
    coordinates of :mod:`icmlkit.lib.estimate_fe.internal` (lo = 0, a = 1; ``box`` and ``margin`` then only
    set frame-derived boxes); the reference distances stay Cartesian."""
    from icmlkit.lib.estimate_fe.model import CARD

    zmat = None
    if coords == "internal":
        from icmlkit.lib.estimate_fe.internal import build_zmatrix

        if not system.invariant or not system.bonds:
            raise UsageError(f"--coords internal needs a molecule with a bond graph; {system.name} has none "
                             "(use --coords cartesian)")
        order = G.dfs_order(system.z, system.bonds)
        zmat = build_zmatrix(system, order, x, margin=margin)
        radix = RadixMap(np.zeros((system.n_atoms, 3)), 1.0, zmat.free, r=r, L=L)
        ref = G.to_frame(np.asarray(x, dtype=np.float64)[:, order])
    elif coords == "cartesian":
        if getattr(system, "constraints", "none") != "none":
            raise UsageError(f"--constraints {system.constraints} needs --coords internal (a Cartesian radix box cannot "
                             "hold a bond length fixed)")
        order = G.choose_order(system.z, system.bonds, x, system.invariant)
        ref = prepare(x, np.zeros(len(x)), order, system.invariant).y
        free = G.free_mask(system.n_atoms, system.invariant)
        lo, a = G.box_for(ref, free, system.invariant, margin=margin, a=box)
        radix = RadixMap(lo, a, free, r=r, L=L)
    else:
        raise UsageError(f"--coords must be cartesian or internal, not {coords!r}")
    z = np.asarray(system.z)[order]
    model = CARD(radix, z, _ref_dist(ref, n_ref), d=d, heads=heads, enc_layers=enc_layers, dec_layers=dec_layers,
                 K=K, eps=eps)
    return model, order, zmat


def check_energies(u: np.ndarray, where: str) -> None:
    """InputError naming the first frame whose reduced energy is NaN or infinite."""
    if not np.isfinite(u).all():
        bad = int(np.flatnonzero(~np.isfinite(u))[0])
        raise InputError(f"energy of frame {bad} is not finite (u[{bad}] = {u[bad]})", where)


def train(system, x: np.ndarray, u: np.ndarray, *, steps: int = 2000, stage2_steps: int = 500, batch: int = 128,
          lr: float = 2e-3, energy_weight: float = 1.0, seed: int = 0, val_fraction: float = 0.1, time_limit=None,
          threads: int = 1, precision: str = "float32", device=None, dist=None, checkpointer=None,
          kl_steps: int = 0, kl_weight: float = 1.0, **arch) -> tuple[dict, dict]:
    """Train CARD on frames; returns (bundle for :func:`save`, info).

    1. order, gauge and box from the frames; the model is built under ``seeded(seed, "init")``;
    2. every step draws a global batch of ``batch`` frame indices from the CPU stream
       ``generator(seed, "batches")`` (moved to ``device``); under torchrun (``dist``: a
       :class:`~icmlkit.lib.core.runtime.Dist`) every rank draws the same indices and takes its
       ``dist.split`` part, and the gradients are averaged over the ranks (torch.distributed
       all-reduce) before clipping, so the step is the one-process step on the global batch;
    3. Stage I: NLL; Stage II: NLL + ``energy_weight`` x the centred energy matching term
       (:func:`_energy_matching`; the batch means are global means over the ranks);
    4. Stage III, ``kl_steps`` > 0 (reconstructed, issue 28: not in the paper): NLL + ``kl_weight`` x
       a score-function estimate of the reverse KL(q || p) against the target energy: each step draws
       a batch from the model (stream ``generator(seed, "kl")``), evaluates u_t on it and follows
       mean(A * log q) with A = w - median(w), w = u_t + log q, clipped to [-10, 10] kT (robust to the
       heavy tail of a poor proposal; an undefined energy counts as +10). Its energy calls are
       ``info["energy_evals_train"]``. One process only;
    5. Adam, warm-up + cosine schedule over all stages, gradient norm clipped at 10.

    ``precision`` "float64" trains the network in double precision (the bundle stores float32
    weights either way): with float32, a weight whose gradient is a cancellation of many terms gets
    round-off that Adam (g / (|g| + eps)) amplifies, so runs that sum the batch in another order
    (torchrun) drift apart by ~1e-5; in float64 they agree to round-off.

    ``checkpointer`` (a :class:`~icmlkit.lib.core.checkpoint.Checkpointer`) saves the model,
    optimiser, schedule, the batch stream and the history every ``every`` steps and resumes from
    them; a resumed run gives the same bundle bytes as an uninterrupted one. The bundle holds no
    timings (``info["seconds_train"]`` has them), so the same inputs and seed give the same bytes.
    """
    import torch

    from icmlkit.lib.core.checkpoint import fingerprint, restore
    from icmlkit.lib.core.runtime import Dist, generator, seeded

    dev = torch.device(device) if device is not None else torch.device("cpu")
    dist = dist if dist is not None else Dist()
    torch.set_num_threads(threads)  # small tensors: one thread is fastest on a shared CPU (per process)
    t0 = time.perf_counter()
    check_energies(u, "frames field 'u'")
    with seeded(seed, "init"):
        model, order, zmat = build(system, x, **arch)
    if precision not in ("float32", "float64"):
        raise UsageError(f"--precision must be float32 or float64, not {precision!r}")
    model.to(device=dev, dtype=getattr(torch, precision))
    prep = prepare(x, u, order, system.invariant, zmat)
    n_val = max(1, int(round(val_fraction * len(x)))) if len(x) >= 20 else 0
    y_all = torch.as_tensor(prep.y, device=dev)
    ut_all = torch.as_tensor(prep.u_t, device=dev)
    y_tr, ut_tr = y_all[: len(x) - n_val], ut_all[: len(x) - n_val]
    y_va = y_all[len(x) - n_val:]
    n_batch = min(batch, len(y_tr))
    if n_batch % dist.world:
        raise UsageError(f"--batch: a global batch of {n_batch} frames does not split evenly over {dist.world} "
                         "processes; use a multiple of the process count")
    part = dist.split(n_batch)
    n_free = int(model.radix.free.sum())
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    if kl_steps and dist.active:
        raise UsageError("--kl-steps runs in one process (not under torchrun)")
    total = steps + stage2_steps + kl_steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, min(100, total // 10))) * 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    gen = generator(seed, "batches")
    hist, stopped, start, t_before = [], None, 0, 0.0
    settings = {"steps": steps, "stage2_steps": stage2_steps, "batch": batch, "lr": lr, "energy_weight": energy_weight,
                "seed": seed, "val_fraction": val_fraction, "precision": precision,
                "arch": {k: v for k, v in sorted(arch.items())}}
    fp = fingerprint(settings, np.asarray(x, dtype=np.float64), np.asarray(u, dtype=np.float64))
    state = checkpointer.load(fp) if checkpointer is not None else None
    if kl_steps:
        settings["kl"] = [kl_steps, kl_weight]
        fp = fingerprint(settings, np.asarray(x, dtype=np.float64), np.asarray(u, dtype=np.float64))
    gen_kl = generator(seed, "kl", device=dev)
    rngs = {"batches": gen, "kl": gen_kl} if kl_steps else {"batches": gen}
    evals0 = system.energy_evals
    if state is not None:
        start, extra = restore(state, model=model, optimizer=opt, scheduler=sched, rng=rngs)
        hist, t_before = list(extra["hist"]), float(extra["seconds"])

    for step in progress(range(start, total), total=total - start, desc="train"):
        idx = torch.randint(0, len(y_tr), (n_batch,), generator=gen).to(dev)
        lq = model(y_tr[idx[part]])
        nll = -lq.mean()
        loss = nll
        em = torch.zeros((), dtype=torch.float64, device=dev)
        if step >= steps:  # Stage II: centred energy matching
            ut = ut_tr[idx]
            em = _energy_matching(-lq, (ut - ut.mean())[part], dist)
            loss = nll + energy_weight * em
        if step >= steps + stage2_steps:  # Stage III: reverse KL by the score function
            loss = nll + kl_weight * _reverse_kl_surrogate(model, system, order, zmat, n_batch, gen_kl)
        opt.zero_grad()
        (loss / n_free).backward()
        if dist.active:
            dist.average_gradients(model.parameters())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == total - 1:
            row = {"step": step, "nll": dist.all_mean(float(nll.detach())),
                   "energy_match": dist.all_mean(float(em.detach()))}
            hist.append(row)
            log.debug("step %d nll %.3f em %.3f", step, row["nll"], row["energy_match"])
        if checkpointer is not None and checkpointer.due(step + 1, total):
            checkpointer.save(step + 1, fp, model=model, optimizer=opt, scheduler=sched, rng=rngs,
                              extra={"hist": hist, "seconds": t_before + time.perf_counter() - t0})
        if time_limit is not None and dist.all_mean(float(time.perf_counter() - t0 > time_limit)) > 0:
            stopped = step + 1
            log.warning("training stopped at step %d by the time limit", stopped)
            break
    model.eval()
    with torch.no_grad():
        val_nll = float(-torch.cat([model.log_prob(y_va[i:i + 1024]) for i in range(0, len(y_va), 1024)]).mean()) if n_val else None
    info = {"steps": steps, "stage2_steps": stage2_steps, "kl_steps": kl_steps,
            "energy_evals_train": int(system.energy_evals - evals0), "steps_done": stopped or total, "train_frames": len(y_tr),
            "val_frames": n_val, "val_nll": val_nll, "train_nll": hist[-1]["nll"], "n_free": n_free,
            "box": model.radix.a, "seconds_train": t_before + time.perf_counter() - t0, "history": hist,
            "device": str(dev), "world_size": dist.world, "precision": precision}
    bundle = {
        "format": FORMAT, "config": dict(model.config), "radix": model.radix.state(), "order": list(map(int, order)),
        "invariant": bool(system.invariant), "z": [int(v) for v in np.asarray(system.z)],
        "coords": zmat.state() if zmat is not None else None,
        "ref_dist": model.ref_dist.detach().float().cpu().clone(),
        "state_dict": {k: (v.float() if v.is_floating_point() else v).detach().cpu()
                       for k, v in model.state_dict().items()},
        "system": {"name": system.name, "kind": system.kind, "n_atoms": system.n_atoms,
                   "temperature": system.temperature, "env": getattr(system, "env", None),
                   "constraints": getattr(system, "constraints", "none")},
        "frames_digest": frames_digest(x), "n_frames_used": int(len(x)),
        "info": {k: v for k, v in info.items() if k not in ("history", "seconds_train", "device", "world_size")},
    }
    return bundle, info


def _reverse_kl_surrogate(model, system, order, zmat, n: int, gen):
    """mean(A log q) over n model samples, whose gradient is the score-function estimate of
    grad KL(q || p) with the robust advantage A of :func:`train` (Stage III)."""
    import torch

    y, _ = model.sample(n, gen)
    xq, lj = free_to_frames(y.cpu().numpy(), order, system.invariant, zmat)
    ut = torch.as_tensor(system.reduced_energy(xq) - lj, device=y.device)
    lq = model(y)
    w = ut + lq.detach()
    ok = torch.isfinite(w)
    med = w[ok].median() if ok.any() else torch.zeros((), dtype=w.dtype, device=w.device)
    adv = torch.where(ok, (w - med).clamp(-10.0, 10.0), torch.full_like(w, 10.0))
    return (adv * lq).mean()


def _global_mean(t, dist):
    """The mean of ``t`` (detached) over the global batch: this rank's part and the others' (equal sizes)."""
    if not dist.active:
        return t.detach().mean()
    import torch.distributed as td

    total = t.detach().sum().reshape(1).clone()
    td.all_reduce(total)
    return total[0] / (t.numel() * dist.world)


def _energy_matching(a, c, dist):
    """Stage II term (Eq. 24): mean_i |(a_i - mean a) - c_i| over the global batch, with a = -log q on
    this rank's frames and c the target energies centred over the global batch.

    Its gradient is (1/B) sum_i (s_i - mean s) da_i with s_i the sign of the i-th term, so with
    the global mean of a and of s (all-reduced, detached) the local loss
    mean_local |a - m - c| - mean(s) (mean_local a - its detached value) has, averaged over the
    ranks, the global value and the global gradient (one process: the plain autograd gradient)."""
    m = _global_mean(a, dist)
    r = (a - m) - c
    s_bar = _global_mean(r.sign(), dist)
    a_bar = a.mean()
    return r.abs().mean() - s_bar * (a_bar - a_bar.detach())



def model_from_bundle(bundle: dict):
    """The trained CARD model of a bundle (in eval mode, on the CPU; the caller's RNG is left alone)."""
    from icmlkit.lib.core.runtime import seeded
    from icmlkit.lib.estimate_fe.model import CARD

    c = bundle["config"]
    radix = RadixMap.from_state(bundle["radix"])
    z = np.asarray(bundle["z"])[bundle["order"]]
    with seeded(0, "load"):  # the weights are overwritten below; construction must not consume the caller's RNG
        model = CARD(radix, z, bundle["ref_dist"], d=c["d"], heads=c["heads"], enc_layers=c["enc_layers"],
                     dec_layers=c["dec_layers"], K=c["K"], eps=c["eps"], max_shape=c["max_shape"], n_freq=c["n_freq"],
                     max_atoms=c.get("max_atoms"), d_max=c.get("d_max"))
    model.load_state_dict(bundle["state_dict"])
    model.eval()
    return model


save = write_torch  # a model bundle, written atomically


def load(path) -> dict:
    """A model file, read with ``weights_only=True``; its fields are checked (:func:`check_bundle`)."""
    bundle = read_torch(path, "CARD model file", FORMAT)
    check_bundle(bundle, str(path))
    bundle["_file"] = str(path)  # for the errors of check_system (never written: train builds a new bundle)
    return bundle


_BUNDLE_FIELDS = {"config": dict, "radix": dict, "order": list, "invariant": bool, "z": list, "state_dict": dict,
                  "system": dict, "n_frames_used": int}


def check_bundle(bundle: dict, where: str) -> None:
    """InputError naming the first missing or mistyped field of a model file (or weights that do not fit)."""
    for key, typ in _BUNDLE_FIELDS.items():
        if not isinstance(bundle.get(key), typ):
            raise InputError(f"not a complete CARD model file (field {key!r} missing or not a {typ.__name__})", where)
    try:
        model_from_bundle(bundle)
        zmatrix_of(bundle)
    except (KeyError, TypeError, ValueError, IndexError, RuntimeError, InputError) as exc:
        raise InputError(f"the CARD model file's weights or coordinates do not fit its configuration ({exc})",
                         where) from None


def check_system(bundle: dict, system, where: str) -> None:
    """Refuse a model trained for another system: the atoms and atomic numbers, then the recorded name,
    environment and temperature (issue 59: a model of trap4 used for dw4, or of vacuum used in obc2, was a
    silent wrong answer), then the constraints."""
    rec = bundle["system"]
    n = rec["n_atoms"]
    if system.n_atoms != n:
        raise InputError(f"the model was trained for {n} atoms but the system {system.name} has {system.n_atoms}", where)
    if [int(v) for v in np.asarray(system.z)] != list(bundle["z"]):
        raise InputError(f"the model's atomic numbers differ from the system {system.name}'s", where)
    diffs = [f"{k} {rec[k]!r}, not {v!r}" for k, v in (("name", system.name), ("env", getattr(system, "env", None)))
             if k in rec and rec[k] != v]
    t = system.temperature
    if rec.get("temperature") is not None and t is not None and abs(float(rec["temperature"]) - float(t)) > 1e-9:
        diffs.append(f"temperature {float(rec['temperature']):g} K, not {float(t):g} K")
    if diffs:
        raise UsageError(f"{bundle.get('_file', where)}: the model was trained for another system ({'; '.join(diffs)}); "
                         "give the system, --env and --temperature it was trained with")
    from icmlkit.lib.estimate_fe.mm import check_constraints

    check_constraints(rec.get("constraints", "none"), system, "the model", where)


def draw(model, bundle: dict, system, n_samples: int, seed: int, dev) -> dict:
    """``n_samples`` samples of a trained ``model`` (its ``bundle``) as frames of ``system``: {x (M, N, 3)
    Angstrom, lq (log q of the free coordinates), ut (beta U - log J of the gauge/chart on them; the
    forward work is ut + lq), seconds_sampling, seconds_energy}. The samples come from
    ``generator(seed, "samples", device=dev)``; M energy evaluations."""
    import torch

    from icmlkit.lib.core.runtime import generator

    with torch.no_grad():
        gen = generator(seed, "samples", device=dev)
        t_s = time.perf_counter()
        y_q, lq_q = model.sample(n_samples, gen)
        seconds_sampling = time.perf_counter() - t_s
    y_q, lq_q = y_q.cpu().numpy(), lq_q.cpu().numpy()
    t_e = time.perf_counter()
    x_q, lj = free_to_frames(y_q, bundle["order"], bundle["invariant"], zmatrix_of(bundle))
    ut_q = system.reduced_energy(x_q) - lj
    return {"x": x_q, "lq": lq_q, "ut": ut_q, "seconds_sampling": seconds_sampling,
            "seconds_energy": time.perf_counter() - t_e}


def estimate(bundle: dict, system, x: np.ndarray, u: np.ndarray, *, n_samples: int = 2000, seed: int = 0,
             estimator: str = "bar", decorrelate_frames: bool = True, skip_frames: int = 0,
             frames_name: str = "frames", threads: int = 1, device=None) -> dict:
    """Free energy of ``system`` from a trained bundle and target frames (see the module docstring).

    The model runs on ``device``; its samples come from ``generator(seed, "samples", device=device)``
    (:func:`draw`)."""
    import torch

    dev = torch.device(device) if device is not None else torch.device("cpu")
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    check_system(bundle, system, frames_name)
    system.check_frames(x, frames_name)
    check_energies(u, frames_name)
    if not np.isfinite(x).all():
        raise InputError("frames contain non-finite coordinates (field 'x')", frames_name)
    model = model_from_bundle(bundle).to(dev)
    order = bundle["order"]
    x, u = x[skip_frames:], u[skip_frames:]
    if len(x) < 10:
        raise InputError(f"only {len(x)} target frames left for the estimate (need >= 10)", frames_name)
    idx = decorrelate(u) if decorrelate_frames else np.arange(len(u))
    zmat = zmatrix_of(bundle)
    prep = prepare(x[idx], u[idx], order, bundle["invariant"], zmat)
    inside = model.radix.inside(torch.as_tensor(prep.y, device=dev)).cpu().numpy()
    if not inside.all():
        k = int(np.flatnonzero(~inside)[0])
        raise InputError(f"{int((~inside).sum())} target frames lie outside the model's box (a = {model.radix.a:.3g}; "
                         f"first: frame {int(idx[k]) + skip_frames}); retrain with a larger --box or --margin", frames_name)
    with torch.no_grad():
        lq_t = torch.cat([model.log_prob(torch.as_tensor(prep.y[i:i + 1024], device=dev))
                          for i in range(0, len(prep.y), 1024)]).cpu().numpy()
    evals0 = system.energy_evals
    d = draw(model, bundle, system, n_samples, seed, dev)
    ut_q, lq_q, seconds_sampling, seconds_energy = d["ut"], d["lq"], d["seconds_sampling"], d["seconds_energy"]
    nonfinite = int((~np.isfinite(ut_q)).sum())
    ut_q = np.where(np.isfinite(ut_q), ut_q, np.inf)
    w_F = ut_q + lq_q  # u_t - u_q on model samples
    w_R = -(lq_t + prep.u_t)  # u_q - u_t on target frames
    res = bar_estimate(w_F, w_R, estimator)
    shift = -G.LOG_8PI2 if bundle["invariant"] else 0.0
    out = {
        "f_kT": res["delta_f"] + shift, "f_err_kT": res["delta_f_err"],
        "f_exp_forward_kT": res["exp_forward"] + shift, "f_exp_reverse_kT": res["exp_reverse"] + shift,
        "overlap": res["overlap"], "ess_forward": res["ess_forward"], "ess_reverse": res["ess_reverse"],
        "n_model_samples": res["n_model"], "n_target_frames": res["n_target"], "nonfinite_model_energies": nonfinite,
        "energy_evals": int(system.energy_evals - evals0), "seconds_estimate": time.perf_counter() - t0,
        "seconds_energy": seconds_energy, "seconds_sampling": seconds_sampling, "estimator": estimator,
        "measure": "per volume V, lengths in Angstrom (F/kT = -log(Z/V))" if bundle["invariant"] else "F/kT = -log Z, lengths in Angstrom",
    }
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}
