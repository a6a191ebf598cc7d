"""One CARD model for many molecules, applied to molecules it never saw (issue 28, the paper's transfer claim).

The paper trains one model per environment on 40k molecules and applies it to unseen ones. Here
(reconstructed at small scale; the selection rule, the reference conformer and the estimator
without end-state MD are this implementation's choices):

- :func:`select_freesolv`: FreeSolv molecules by a stated rule (:data:`RULE`: 2-3 heavy atoms read
  from the SMILES, elements C, N, O, S, Cl, no bracket atoms, no triple bond), and
  :func:`split`: a held-out set chosen by the SHA-256 of the compound id (deterministic, independent
  of the list order), disjoint from the training set;
- :func:`context`: what the model needs of a molecule without any MD of it: the depth-first atom
  order, the internal-coordinate chart with boxes from the force field
  (:func:`~icmlkit.lib.estimate_fe.internal.build_zmatrix`), the unit-box radix map, the atomic numbers and
  one reference conformer: the energy-minimised input structure;
- :func:`train_multi`: Stage I (NLL) on the training molecules' frames, one molecule per step
  (drawn from the stream ``generator(seed, "molecules")``), the NLL per free coordinate so every
  size weighs the same; the weights are shared, the model is re-bound to each molecule
  (:meth:`~icmlkit.lib.estimate_fe.model.CARD.bind`);
- :func:`estimate_unseen`: F of a molecule from model samples alone (no target frames, no MD):
  the EXP forward estimate f = -log mean exp(-w_F) with w_F = u_t - u_q, a bootstrap interval
  over the samples, and the forward ESS; :func:`hydration_unseen`: the hydration free energy from
  both environments' models, the paper's per-environment difference and a paired estimate on pooled
  samples scored in both environments (**reconstructed**).

Molecules may carry X-H constraints (``constraints="hbonds"``): the chart then holds those bond
lengths fixed; a model records its setting and is refused for molecules of another.
"""
from __future__ import annotations

import hashlib
import math
import re
import time
from dataclasses import dataclass

import numpy as np

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.console import progress
from icmlkit.lib.estimate_fe import gauge as G

FORMAT = "icmlkit-card-multi-1"
RULE = {"heavy_atoms": (2, 3), "elements": ("C", "N", "O", "S", "Cl"), "no_brackets": True, "no_triple_bonds": True}
_TOKEN = re.compile(r"\[[^\]]+\]|Br|Cl|[BCNOSPFI]|[bcnops]")
_MOLECULE_BUFFERS = ("z", "ref_dist", "allowed", "free", "slot_atom", "slot_level", "mask_content", "mask_query")


def rule_ok(smiles: str, rule: dict = RULE) -> bool:
    """Whether a SMILES string passes the selection rule (atoms counted by a SMILES tokeniser)."""
    atoms = _TOKEN.findall(smiles)
    if rule["no_brackets"] and any(a.startswith("[") for a in atoms):
        return False
    if rule["no_triple_bonds"] and "#" in smiles:
        return False
    lo, hi = rule["heavy_atoms"]
    return lo <= len(atoms) <= hi and {a.capitalize() for a in atoms} <= set(rule["elements"])


def select_freesolv(database, rule: dict = RULE) -> list[dict]:
    """The FreeSolv entries (compound, smiles, name) of ``database`` (database.txt) passing ``rule``,
    sorted by compound id."""
    from pathlib import Path

    out = []
    for k, line in enumerate(Path(database).read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("#") or not line.strip():
            continue
        f = [s.strip() for s in line.split(";")]
        if len(f) < 3:
            raise InputError(f"line {k}: expected ';'-separated fields (compound; SMILES; name; ...)", str(database))
        if rule_ok(f[1], rule):
            out.append({"compound": f[0], "smiles": f[1], "name": f[2]})
    return sorted(out, key=lambda e: e["compound"])


def split(compounds, n_held_out: int) -> tuple[list[str], list[str]]:
    """(training, held-out) compound ids: the held-out ones are the ``n_held_out`` smallest SHA-256
    digests of the ids, so the split depends on the ids alone, not on their order."""
    ids = sorted(set(compounds))
    if not 0 < n_held_out < len(ids):
        raise InputError(f"cannot hold out {n_held_out} of {len(ids)} molecules")
    held = set(sorted(ids, key=lambda c: hashlib.sha256(c.encode()).hexdigest())[:n_held_out])
    return [c for c in ids if c not in held], sorted(held)


@dataclass
class Context:
    """What the multi-molecule model needs of one molecule (no MD of it)."""

    name: str
    order: list
    zmat: object
    radix: object
    z: np.ndarray  # atomic numbers in model order
    ref_dist: np.ndarray  # (1, N, N) distances of the reference conformer


def context(system, reference: np.ndarray, r: int = 4, L: int = 3) -> Context:
    """The context of ``system`` (a molecule with a bond graph and force-field harmonic terms) with
    ``reference`` (N, 3), one conformer in the system's atom order (e.g. its minimised structure)."""
    from icmlkit.lib.estimate_fe.internal import build_zmatrix
    from icmlkit.lib.estimate_fe.radix import RadixMap

    if not system.bonds or getattr(system, "bonded_params", lambda: None)() is None:
        raise InputError("a transferable model needs a molecule with a bond graph and harmonic bond/angle terms",
                         system.name)
    order = G.dfs_order(system.z, system.bonds)
    zmat = build_zmatrix(system, order, np.asarray(reference)[None])
    radix = RadixMap(np.zeros((system.n_atoms, 3)), 1.0, zmat.free, r=r, L=L)
    ref = np.asarray(reference, dtype=np.float64)[order]
    d = np.linalg.norm(ref[:, None] - ref[None], axis=-1)[None]
    return Context(system.name, order, zmat, radix, np.asarray(system.z)[order], d)


def _model(cfg: dict, ctx: Context):
    from icmlkit.lib.estimate_fe.model import CARD

    return CARD(ctx.radix, ctx.z, ctx.ref_dist, d=cfg["d"], heads=cfg["heads"], enc_layers=cfg["enc_layers"],
                dec_layers=cfg["dec_layers"], K=cfg["K"], eps=cfg.get("eps", 1e-6), max_shape=cfg.get("max_shape", 200.0),
                n_freq=cfg.get("n_freq", 6), max_atoms=cfg["max_atoms"], d_max=cfg["d_max"])


def train_multi(contexts: list, frames: dict, *, steps: int = 1000, batch: int = 128, lr: float = 2e-3, seed: int = 0,
                d: int = 32, heads: int = 4, layers: int = 2, K: int = 8, time_limit: float | None = None,
                threads: int = 1, device=None, checkpointer=None) -> tuple[dict, dict]:
    """Stage I of one model over the molecules of ``contexts``; ``frames[name]`` = (x (M, N, 3) Angstrom,
    u (M,) = beta U) of that molecule. Returns (bundle, info); the bundle lists its training molecules.
    ``checkpointer`` (:class:`~icmlkit.lib.core.checkpoint.Checkpointer`) saves the model, optimiser,
    schedule and both random streams every ``every`` steps and resumes from them (same bundle bytes
    as an uninterrupted run)."""
    import torch

    from icmlkit.lib.core.checkpoint import fingerprint, restore
    from icmlkit.lib.core.runtime import generator, seeded
    from icmlkit.lib.estimate_fe.card import prepare

    dev = torch.device(device) if device is not None else torch.device("cpu")
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    names = [c.name for c in contexts]
    if len(set(names)) != len(names) or set(names) != set(frames):
        raise InputError("train_multi: one frames entry per context, names unique")
    cfg = {"d": d, "heads": heads, "enc_layers": layers, "dec_layers": layers, "K": K,
           "max_atoms": max(len(c.z) for c in contexts),
           "d_max": 1.5 * max(float(c.ref_dist.max()) for c in contexts) + 1e-3}
    with seeded(seed, "init"):
        model = _model(cfg, contexts[0]).to(dev)
    data = []
    for c in contexts:
        x, u = frames[c.name]
        p = prepare(x, u, c.order, True, c.zmat)
        inside = ((p.y >= 0) & (p.y < 1)) | ~c.zmat.free
        if not inside.all():
            raise InputError(f"{int((~inside.reshape(len(x), -1).all(1)).sum())} frames of {c.name} lie outside its "
                             "force-field internal-coordinate boxes")
        data.append(torch.as_tensor(p.y, device=dev))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, min(100, steps // 10))) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    gen_m, gen_b = generator(seed, "molecules"), generator(seed, "batches")
    rngs = {"molecules": gen_m, "batches": gen_b}
    hist, done, start, t_before = [], steps, 0, 0.0
    fp = fingerprint({"steps": steps, "batch": batch, "lr": lr, "seed": seed, "config": cfg, "names": names},
                     *[t.cpu().numpy() for t in data])
    state = checkpointer.load(fp) if checkpointer is not None else None
    if state is not None:
        start, extra = restore(state, model=model, optimizer=opt, scheduler=sched, rng=rngs)
        hist, t_before = list(extra["hist"]), float(extra["seconds"])
    for step in progress(range(start, steps), total=steps - start, desc="train-multi"):
        m = int(torch.randint(0, len(contexts), (1,), generator=gen_m))
        c = contexts[m]
        model.bind(c.radix, c.z, c.ref_dist)
        idx = torch.randint(0, len(data[m]), (min(batch, len(data[m])),), generator=gen_b).to(dev)
        nll = -model.log_prob(data[m][idx]).mean() / float(c.zmat.free.sum())
        opt.zero_grad()
        nll.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            hist.append({"step": step, "molecule": c.name, "nll_per_coord": float(nll.detach())})
        if checkpointer is not None and checkpointer.due(step + 1, steps):
            model.bind(contexts[0].radix, contexts[0].z, contexts[0].ref_dist)  # the buffers' shapes of a fresh model
            checkpointer.save(step + 1, fp, model=model, optimizer=opt, scheduler=sched, rng=rngs,
                              extra={"hist": hist, "seconds": t_before + time.perf_counter() - t0})
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            done = step + 1
            break
    state = {k: v.detach().float().cpu() if v.is_floating_point() else v.detach().cpu()
             for k, v in model.state_dict().items() if k not in _MOLECULE_BUFFERS}
    bundle = {"format": FORMAT, "config": cfg, "r": contexts[0].radix.r, "L": contexts[0].radix.L,
              "molecules": sorted(names), "state_dict": state, "steps_done": done}
    info = {"steps": steps, "steps_done": done, "seconds_train": t_before + time.perf_counter() - t0, "history": hist,
            "molecules": sorted(names), "frames_per_molecule": {c.name: int(len(frames[c.name][0])) for c in contexts}}
    return bundle, info


def model_for(bundle: dict, ctx: Context):
    """The multi-molecule model of ``bundle`` bound to ``ctx`` (eval mode, CPU)."""
    from icmlkit.lib.core.runtime import seeded

    if bundle.get("format") != FORMAT:
        raise InputError(f"not a multi-molecule CARD model (format {FORMAT} expected)")
    if len(ctx.z) > bundle["config"]["max_atoms"]:
        raise InputError(f"{ctx.name} has {len(ctx.z)} atoms; this model handles at most {bundle['config']['max_atoms']}")
    with seeded(0, "load"):
        model = _model(bundle["config"], ctx)
    missing, unexpected = model.load_state_dict(bundle["state_dict"], strict=False)
    if unexpected or set(missing) - set(_MOLECULE_BUFFERS):
        raise InputError(f"the model's weights do not fit its configuration (missing {missing}, unexpected {unexpected})")
    return model.eval()


def _draw(bundle: dict, ctx: Context, n_samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n_samples`` frames (Angstrom) of the model bound to ``ctx`` and their log density in frame
    space (log q in the unit box minus the log-Jacobian of the map to frames)."""
    import torch

    from icmlkit.lib.core.runtime import generator
    from icmlkit.lib.estimate_fe.card import free_to_frames

    model = model_for(bundle, ctx)
    with torch.no_grad():
        y, lq = model.sample(n_samples, generator(seed, "samples"))
    x, lj = free_to_frames(y.numpy(), ctx.order, True, ctx.zmat)
    return x, lq.numpy() - lj


def _works(system, x: np.ndarray, log_qx: np.ndarray) -> np.ndarray:
    """Forward works u_t + log q_x (= u_t - u_q) of model frames (+inf where the energy is not finite)."""
    u = system.reduced_energy(x)
    return np.where(np.isfinite(u), u + log_qx, np.inf)


def estimate_unseen(bundle: dict, ctx: Context, system, *, n_samples: int = 2000, seed: int = 0,
                    n_boot: int = 1000) -> dict:
    """F/kT (per volume, Angstrom) of ``system`` from model samples alone: EXP forward, a bootstrap 95 %
    interval over the samples, the forward ESS, energy evaluations and seconds. Raises nothing on
    a poor proposal: the ESS says how far to trust it."""
    from icmlkit.lib.estimate_fe.estimate import ess_fraction, exp_estimate

    t0 = time.perf_counter()
    x, log_qx = _draw(bundle, ctx, n_samples, seed)
    e0 = system.energy_evals
    w = _works(system, x, log_qx)
    f = exp_estimate(w) - G.LOG_8PI2
    rng = np.random.default_rng(seed)
    boot = np.array([exp_estimate(w[rng.integers(0, len(w), len(w))]) for _ in range(n_boot)]) - G.LOG_8PI2
    return {"f_kT": f, "f_boot_kT": boot, "ci_kT": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))],
            "ess_forward": ess_fraction(-w), "energy_evals": int(system.energy_evals - e0),
            "seconds": time.perf_counter() - t0, "n_samples": n_samples}


def hydration_unseen(bundles: dict, contexts: dict, systems: dict, *, n_samples: int = 2000, seed: int = 0,
                     n_boot: int = 1000) -> dict:
    """Delta F/kT = F(obc2) - F(vacuum) of a molecule no model saw, from model samples alone, two ways.

    ``independent`` (the paper's: F per environment from its own model, then the difference):
    EXP forward of each model against its own environment's energy. ``paired`` (**reconstructed**,
    not in the paper): every sample of both models is scored in both environments, so each
    environment's partition function is estimated on the same pooled samples,
    F_e = -log mean_i exp(-(u_e(x_i) + log q_src(i)(x_i))), and the proposal's errors largely
    cancel in the difference (common random numbers). It costs twice the energy evaluations.
    Bootstrap 95 % intervals resample each model's samples (the same indices for both
    environments); the forward ESS of each model in its own and in the other environment is
    returned. ``bundles``, ``contexts`` and ``systems`` are keyed by environment."""
    from icmlkit.lib.estimate_fe.estimate import ess_fraction, exp_estimate

    source, target = envs = ("vacuum", "obc2")
    t0 = time.perf_counter()
    e0 = {e: systems[e].energy_evals for e in envs}
    w = {}  # w[src][env]: works of src's samples in env
    for k, src in enumerate(envs):
        x, log_qx = _draw(bundles[src], contexts[src], n_samples, seed + k)
        w[src] = {env: _works(systems[env], x, log_qx) for env in envs}

    def both(idx):
        indep = exp_estimate(w[target][target][idx[target]]) - exp_estimate(w[source][source][idx[source]])
        pooled = {env: np.concatenate([w[src][env][idx[src]] for src in envs]) for env in envs}
        return indep, exp_estimate(pooled[target]) - exp_estimate(pooled[source])

    full = {src: np.arange(n_samples) for src in envs}
    indep, paired = both(full)
    rng = np.random.default_rng(seed)
    boot = np.array([both({src: rng.integers(0, n_samples, n_samples) for src in envs}) for _ in range(n_boot)])
    ci = lambda b: [float(np.percentile(b, 2.5)), float(np.percentile(b, 97.5))]  # noqa: E731
    return {"delta_f_independent_kT": indep, "delta_f_paired_kT": paired,
            "boot_independent_kT": boot[:, 0], "boot_paired_kT": boot[:, 1],
            "ci_independent_kT": ci(boot[:, 0]), "ci_paired_kT": ci(boot[:, 1]),
            "ess_forward": {src: {env: ess_fraction(-w[src][env]) for env in envs} for src in envs},
            "energy_evals_independent": 2 * n_samples,
            "energy_evals_paired": int(sum(systems[e].energy_evals - e0[e] for e in envs)),
            "seconds": time.perf_counter() - t0, "n_samples": n_samples}


def fit(systems: list, *, md_frames: int = 600, md_interval: int = 20, md_equil: int = 2000, seed: int = 0,
        checkpointer=None, **train_kw) -> tuple[dict, dict]:
    """One model for the molecules ``systems`` (all in one environment): (1) MD of each molecule
    (``md_frames`` frames every ``md_interval`` fs after ``md_equil``, seed stream
    ``transfer-<name>-<env>`` of ``seed``); (2) its context from the energy-minimised input structure;
    (3) :func:`train_multi` (Stage I, one molecule per step). Returns (bundle, summary)."""
    from icmlkit.lib.core.runtime import stream_seed

    envs = {s.env for s in systems}
    if len(envs) != 1:
        raise UsageError(f"one environment per model; got {sorted(envs)}")
    env = envs.pop()
    held = {getattr(s, "constraints", "none") for s in systems}
    if len(held) != 1:
        raise UsageError(f"one --constraints setting per model; got {sorted(held)}")
    if len({s.name for s in systems}) != len(systems):
        raise UsageError("each molecule once")
    ctxs, frames, md_s, md_evals = [], {}, 0.0, 0
    for s in progress(systems, desc=f"MD ({env})"):
        ctxs.append(context(s, s.minimised()))
        fr = s.sample(md_frames, seed=stream_seed(seed, f"transfer-{s.name}-{env}"), interval=md_interval, equil=md_equil)
        frames[s.name] = (fr["x"], fr["u"])
        md_s += fr["seconds_md"]
        md_evals += fr["energy_evals"]
    bundle, info = train_multi(ctxs, frames, seed=seed, checkpointer=checkpointer, **train_kw)
    bundle["env"], bundle["constraints"] = env, held.pop()
    return bundle, {"env": env, "constraints": bundle["constraints"], "molecules": sorted(s.name for s in systems), "seconds_md": md_s,
                    "energy_evals_md": md_evals, "seconds_train": info["seconds_train"], "steps_done": info["steps_done"],
                    "final_nll_per_coord": info["history"][-1]["nll_per_coord"], "frames_per_molecule": md_frames}


def hydration(bundles: dict, systems: dict, *, n_samples: int = 2000, seed: int = 0, n_boot: int = 1000) -> dict:
    """The hydration free energy (vacuum -> obc2, kcal/mol) of one molecule from the two environments'
    models, with no MD of it: contexts from each environment's minimised input structure,
    :func:`hydration_unseen` (the paper's per-environment difference and the paired estimate), and the
    cheapest baseline, the vertical energy gap U_obc2 - U_vac at the vacuum-minimised conformer.
    ``bundles`` and ``systems`` are keyed by environment; ``seen_in_training`` says whether a model
    was trained on this molecule (its estimate is then not a transfer)."""
    from icmlkit.lib.core.runtime import stream_seed
    from icmlkit.lib.estimate_fe.mm import check_constraints, kcal_per_kT, vertical_gap_kT

    envs = ("vacuum", "obc2")
    for e in envs:
        if bundles[e].get("env", e) != e:
            raise UsageError(f"the {e} model was trained in {bundles[e]['env']}")
        check_constraints(bundles[e].get("constraints", "none"), systems[e], f"the {e} model", systems[e].name)
    kT = kcal_per_kT(systems["vacuum"].temperature)
    t0 = time.perf_counter()
    mins = {e: systems[e].minimised() for e in envs}
    ctxs = {e: context(systems[e], mins[e]) for e in envs}
    h = hydration_unseen(bundles, ctxs, systems, n_samples=n_samples, seed=stream_seed(seed, "transfer-eval"),
                         n_boot=n_boot)
    seconds = time.perf_counter() - t0
    gap = vertical_gap_kT(systems, mins["vacuum"])
    name = systems["vacuum"].name
    return {"molecule": name, "n_atoms": int(len(ctxs["vacuum"].z)), "n_samples": n_samples,
            "delta_g_independent_kcal": h["delta_f_independent_kT"] * kT,
            "ci_independent_kcal": [v * kT for v in h["ci_independent_kT"]],
            "delta_g_paired_kcal": h["delta_f_paired_kT"] * kT, "ci_paired_kcal": [v * kT for v in h["ci_paired_kT"]],
            "boot_independent_kcal": h["boot_independent_kT"] * kT, "boot_paired_kcal": h["boot_paired_kT"] * kT,
            "vertical_gap_kcal": gap * kT, "ess_forward": h["ess_forward"],
            "energy_evals_independent": h["energy_evals_independent"], "energy_evals_paired": h["energy_evals_paired"],
            "seconds": seconds, "seen_in_training": {e: name in bundles[e]["molecules"] for e in envs}}


__all__ = ["Context", "RULE", "context", "estimate_unseen", "fit", "hydration", "hydration_unseen", "model_for", "rule_ok", "select_freesolv", "split",
           "train_multi"]
