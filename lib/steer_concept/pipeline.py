"""The library calls of ``steer-concept fit`` and ``run``, and :func:`fit_steerings`: embed, fit and
compare the four methods in one go (used by the demo and the benchmark).

Neutral statistics come from every token of the neutral texts (``pool=all``: the covariance of the
activations the hook will see); the concept means from the mean-pooled activations of the concept
texts -- the same choice for every method, so the comparison is fair. The texts are embedded once
for all methods.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.steer_concept.hooks import POOLS, Encoder
from icmlkit.lib.steer_concept.io import check_matrix, layer_keys, pick_array
from icmlkit.lib.steer_concept.stats import DEFAULT_EIG_THRESHOLD, concept_mean, neutral_stats
from icmlkit.lib.steer_concept.steer import METHODS, Steering, fit_step

LABELS = {"casteer": "CASteer", "leace-switch": "LEACE-Switch", "midsteer": "MidSteer", "leace": "LEACE"}


def fit_steerings(loaded, *, layers, site: str, neutral, source, target, methods=tuple(LABELS),
                  method_layers: dict | None = None, concept: str = "source->target", max_length: int = 64,
                  batch_size: int = 64, device="cpu", shrinkage=None) -> tuple[list, dict]:
    """Fit one :class:`Steering` per method at ``layers``/``site``.

    ``method_layers`` maps a method to a subset of ``layers`` it is fitted at (e.g. LEACE at one
    layer while the switches use all). Returns ``([(label, steering)], info)``; ``info["source"]``
    and ``info["target"]`` hold the pooled concept embeddings (reusable as probe-training data).
    """
    t0 = time.perf_counter()
    kw = dict(layers=layers, site=site, max_length=max_length, batch_size=batch_size, device=device)
    enc_all = Encoder(loaded, pool="all", **kw)
    enc_mean = Encoder(loaded, pool="mean", **kw)
    neu = enc_all.embed(neutral, desc="neutral tokens")
    src = enc_mean.embed(source, desc="source texts")
    tgt = enc_mean.embed(target, desc="target texts")
    t_embed = time.perf_counter() - t0
    t1 = time.perf_counter()
    stats = {L: neutral_stats(neu[f"layer_{L}"], shrinkage=shrinkage) for L in enc_mean.layers}
    means = {L: (concept_mean(src[f"layer_{L}"]), concept_mean(tgt[f"layer_{L}"])) for L in enc_mean.layers}
    config = {**enc_mean.config(), "neutral_pool": "all", "n_neutral_texts": len(neutral),
              "n_source_texts": len(source), "n_target_texts": len(target)}
    out = []
    for m in methods:
        fit_layers = (method_layers or {}).get(m, enc_mean.layers)
        bad = [L for L in fit_layers if L not in enc_mean.layers]
        if bad:
            raise UsageError(f"method_layers[{m!r}] = {bad} is not among the embedded layers {enc_mean.layers}")
        steps = [fit_step(means[L][0], means[L][1], stats[L], method=m, layer=L, concept=concept)
                 for L in fit_layers]
        out.append((LABELS.get(m, m), Steering(steps, {**config, "layers": list(fit_layers)})))
    first = enc_mean.layers[0]
    info = {"seconds_embed": round(t_embed, 2), "seconds_fit": round(time.perf_counter() - t1, 3),
            "neutral_token_rows": int(neu[f"layer_{first}"].shape[0]),
            "effective_rank": {str(st.layer): st.info["effective_rank"] for st in out[0][1].steps} if out else {},
            "s_norm": {}, "t_norm": {}, "source": src, "target": tgt}
    for label, st in out:
        if st.steps:
            info["s_norm"][label] = round(st.steps[0].info["s_norm"], 4)
            info["t_norm"][label] = round(st.steps[0].info["t_norm"], 4)
    return out, info


# --------------------------------------------------------------------------- `fit` (from activation files)

@dataclass
class FitConfig:
    """Settings of ``steer-concept fit`` (the statistics and the steer of every layer and concept)."""

    method: str = field(default="midsteer", metadata={"help": "The steer: " + ", ".join(METHODS) + ".",
                                                       "choices": METHODS, "flag": "--method"})
    beta: float | None = field(default=None, metadata={
        "help": "Default strength stored in the file [leace 1, leace-switch 2, midsteer 1, casteer 2]."})
    clip: bool | None = field(default=None, metadata={
        "help": "Intermediate clipping of negative scores [on, as in the official code; off for leace]."})
    renormalize: bool = field(default=False, metadata={
        "help": "Rescale each steered activation to its original norm."})
    stats: str = field(default="neutral", metadata={
        "help": "Where mu0 and Sigma come from: neutral (the --neutral rows: the MidSteer framework, the official "
                "code) or concept (each concept's pooled --source and --target rows: the labelled data of LEACE, "
                "Belrose et al.; with it --method leace equals concept-erasure's eraser).",
        "choices": ("neutral", "concept")})
    shrinkage: str = field(default="none", metadata={
        "help": "Covariance shrinkage toward a scaled identity: none, auto (Ledoit-Wolf) or a number in [0, 1]."})
    eig_threshold: float | None = field(default=DEFAULT_EIG_THRESHOLD, metadata={
        "help": "Drop the eigenvalues of Sigma at or below this times max(1, largest) (pseudo-inverse; 1e-10 was "
                "this project's rule). Default: the official cut, torch.linalg.pinv's largest * d * eps.",
        "min": 0.0})
    identity_cov: bool = field(default=False, metadata={
        "help": "Sigma = I (no whitening), as the official identity_cov flag."})
    zero_mean: bool = field(default=False, metadata={"help": "mu0 = 0 (no centring), as the official "
                                                               "zero_mu_neutral flag."})
    layers: str | None = field(default=None, metadata={
        "help": "Fit only these layers of the files (comma-separated; default: every layer_<L> present in all)."})
    key: str | None = field(default=None, metadata={
        "help": "For plain .npz arrays without layer_<L> keys: the array to use."})
    concepts: list[str] = field(default_factory=list, metadata={
        "help": "A name per concept (default: the source file stems)."})

    def shrink(self):
        """``shrinkage`` as :func:`.stats.neutral_stats` takes it (None, "auto" or a float)."""
        text = str(self.shrinkage).strip().lower()
        if text in ("none", "0", "0.0", "off"):
            return None
        if text == "auto":
            return "auto"
        try:
            value = float(text)
        except ValueError:
            raise UsageError(f"--shrinkage {self.shrinkage!r}: give none, auto or a number in [0, 1]") from None
        if not 0 <= value <= 1:
            raise UsageError(f"--shrinkage {self.shrinkage!r} is not in [0, 1]")
        return value

    def layer_list(self) -> list[int] | None:
        if not self.layers:
            return None
        try:
            return [int(x) for x in str(self.layers).split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--layers {self.layers!r}: give layer indices separated by commas") from None

    def check(self) -> None:
        self.shrink()
        self.layer_list()


@dataclass
class FitResult:
    steering: Steering
    summary: dict


def fit(cfg: FitConfig, sources: list, targets: list, neutral=None) -> FitResult:
    """Fit a steering transform from loaded activation files (:class:`.io.ActivationFile`).

    1. Layers: every ``layer_<L>`` present in all files (or ``cfg.layers``); plain arrays (no
       layers): ``cfg.key`` or the only 2-D float array of each file.
    2. Per layer, float64: mu0 and Sigma from the neutral rows (every token when embedded with
       ``--pool all``), mu_s and mu_t from the concept rows (:mod:`.stats`).
    3. Per layer and concept: the steer of ``cfg.method`` (:func:`.steer.fit_step`); no targets
       erases each source concept (target = the neutral mean).
    4. Steps ordered concept after concept (every layer of concept 1, then concept 2, ...).
    """
    t0 = time.perf_counter()
    if targets and len(targets) != len(sources):
        raise UsageError(f"--target: give one --target per --source ({len(sources)} sources, {len(targets)} "
                         "targets), or none to erase")
    if cfg.concepts and len(cfg.concepts) != len(sources):
        raise UsageError("--concept: give one --concept per --source")
    concept_stats = cfg.stats == "concept"
    if concept_stats:
        if not targets:
            raise UsageError("--stats concept: needs a --target per --source (the statistics are those of the "
                             "pooled source and target rows)")
        if neutral is not None:
            raise UsageError("--neutral: not used with --stats concept (mu0 and Sigma come from the concept rows)")
    elif neutral is None and not (cfg.method == "casteer" or (cfg.identity_cov and cfg.zero_mean)):
        raise UsageError(f"--neutral: --method {cfg.method} needs neutral statistics (or --stats concept)")
    shrink = cfg.shrink()
    files = list(sources) + list(targets) + ([neutral] if neutral is not None else [])
    per_file = [layer_keys(f.arrays) for f in files]
    if all(per_file):
        common = sorted(set.intersection(*(set(k) for k in per_file)))
        want = cfg.layer_list()
        if want:
            missing = [L for L in want if L not in common]
            if missing:
                raise InputError(f"layers {missing} are not in every input (common layers: {common})", "--layers")
            common = want
        if not common:
            raise InputError(f"the inputs share no layer_<L> array ({[sorted(k) for k in per_file]})",
                             sources[0].name)
        layer_list = [(L, f"layer_{L}") for L in common]
    else:
        layer_list = [(None, None)]

    def rows(f, field_, dim=None):
        if field_ is None:
            field_, x = pick_array(f.arrays, cfg.key, f.name)
        else:
            x = f.arrays[field_]
        return check_matrix(x, f.name, field_, dim)

    names = cfg.concepts or [Path(s.name).stem + (f"->{Path(targets[c].name).stem}" if targets else "")
                             for c, s in enumerate(sources)]
    by_layer, n_neutral = [], 0
    for L, field_ in layer_list:
        stats = None
        if neutral is not None:
            stats = neutral_stats(rows(neutral, field_), shrinkage=shrink,
                                  name=f"{neutral.name} ({field_ or cfg.key or 'array'})")
            n_neutral = stats.n
        steps = []
        for c, src in enumerate(sources):
            xs = rows(src, field_, stats.dim if stats else None)
            xt = rows(targets[c], field_, xs.shape[1]) if targets else None
            mu_t = concept_mean(xt) if targets else None
            st_c = stats
            if concept_stats:  # LEACE's own statistics: the labelled (source + target) rows
                import numpy as np

                st_c = neutral_stats(np.concatenate([xs, xt]), shrinkage=shrink,
                                     name=f"{src.name} + {targets[c].name} ({field_ or cfg.key or 'array'})")
                n_neutral = st_c.n
            steps.append(fit_step(concept_mean(xs), mu_t, st_c, method=cfg.method, beta=cfg.beta, clip=cfg.clip,
                                  renormalize=cfg.renormalize, identity_cov=cfg.identity_cov,
                                  zero_mean=cfg.zero_mean, eig_threshold=cfg.eig_threshold, layer=L,
                                  concept=names[c]))
        by_layer.append(steps)
    steps = [by_layer[li][c] for c in range(len(sources)) for li in range(len(layer_list))]
    meta = dict(sources[0].meta)
    meta.update({"method": cfg.method, "sources": [f.name for f in sources], "targets": [f.name for f in targets],
                 "neutral": neutral.name if neutral is not None else None, "stats": cfg.stats})
    if neutral is not None and neutral.meta.get("pool"):
        meta["neutral_pool"] = neutral.meta["pool"]
    if layer_list == [(None, None)]:  # plain arrays: `apply` steers this array name only (or --key)
        meta["array"] = pick_array(sources[0].arrays, cfg.key, sources[0].name)[0]
    steering = Steering(steps, meta)
    first = steps[0]
    summary = {"method": cfg.method, "steps": len(steps), "layers": steering.layers, "dim": first.dim,
               "beta": first.beta, "clip": first.clip, "s_norm": first.info["s_norm"], "t_norm": first.info["t_norm"],
               "effective_rank": first.info["effective_rank"], "n_neutral": n_neutral,
               "shrinkage": first.info["shrinkage"], "stats": cfg.stats, "seconds": round(time.perf_counter() - t0, 4)}
    return FitResult(steering, summary)


# --------------------------------------------------------------------------- `run` (the steer hooked in)

@dataclass
class RunConfig:
    """Settings of ``steer-concept run``."""

    strength: float | None = field(default=None, metadata={
        "help": "Replace every step's beta (applied at each layer)."})
    layers: str | None = field(default=None, metadata={"help": "Layers to read out (default: the steered layers)."})
    pool: str | None = field(default=None, metadata={
        "help": "Pooling of the read-out (default: the steering file's).", "choices": POOLS})
    batch_size: int = field(default=64, metadata={"help": "Texts per forward pass.", "min": 1})
    max_length: int = field(default=64, metadata={"help": "Tokens per text (longer texts are truncated).", "min": 2})
    compare: bool = field(default=False, metadata={
        "help": "Also embed without the steer and report the mean 1 - cos of the sentence embeddings (disturbance)."})


@dataclass
class RunResult:
    """``arrays`` and ``meta``: the activation file (as ``embed`` writes it); ``summary``."""

    arrays: dict
    meta: dict
    summary: dict


def disturbance(steered, unsteered) -> float:
    """Mean 1 - cos(steered, unsteered) over rows, in float64 with each cosine clipped to [-1, 1]
    (the score of ``run --compare`` and of ``eval``).

    Why the clip: 1 - cos is >= 0 mathematically, but the cosine of two (nearly) equal float32
    embeddings can round to slightly above 1 (by ~1e-8 when computed in float32, ~1e-16 in float64),
    which gave a slightly negative disturbance at strength 0 or for texts the steer barely moves.
    Clamping each row at 0 removes only that rounding."""
    from icmlkit.lib.steer_concept.evaluate import _one_minus_cos

    return _one_minus_cos(steered, unsteered)


def run_steered(cfg: RunConfig, loaded, steering: Steering, texts: list[str], *, device="cpu") -> RunResult:
    """Embed ``texts`` with ``steering`` hooked into ``loaded`` at the fitted site and layers
    (forward hooks: each clones the site's output to float64, applies the layer's steps in order and
    casts back to the model's dtype); with ``compare`` also unsteered, for the disturbance."""

    if steering.layers == [None]:
        raise UsageError("STEER: the steering file was fitted on plain arrays (no layers); use `apply`")
    steering.check_model(loaded)
    t0 = time.perf_counter()
    sc = steering.config
    kw = dict(site=sc.get("site", "attn"), pool=cfg.pool or sc.get("pool", "mean"), batch_size=cfg.batch_size,
              max_length=cfg.max_length, device=device)
    read = Encoder(loaded, layers=cfg.layers, **kw).layers if cfg.layers else []
    enc = Encoder(loaded, layers=sorted(set(read) | set(steering.layers)), **kw)
    res = enc.embed(texts, steering=steering, strength=cfg.strength)
    dist = None
    if cfg.compare:
        base = enc.embed(texts)
        dist = disturbance(res["pooled"], base["pooled"])
    summary = {"model": loaded.name, "texts": len(texts), "layers": enc.layers, "site": enc.site,
               "strength": cfg.strength, "disturbance": dist, "seconds": round(time.perf_counter() - t0, 3)}
    return RunResult(res, {**enc.config(), "strength": cfg.strength}, summary)


# --------------------------------------------------------------------------- `complete` (steered generation)

@dataclass
class CompleteConfig:
    """Settings of ``steer-concept complete``: greedy continuations of a causal language model with the steer
    hooked in. The official LLM script's setting is ``--tokens generated --clip off``."""

    strength: float | None = field(default=None, metadata={
        "help": "Replace every step's beta (applied at each layer)."})
    tokens: str = field(default="all", metadata={
        "help": "Which positions the steer touches: all (the prompt and every generated token, as run and eval "
                "steer every token) or generated (the generated tokens only, as the official LLM script).",
        "choices": ("all", "generated")})
    clip: str = field(default="file", metadata={
        "help": "Intermediate clipping: file (each step's own, as fitted), off (the official LLM script's default) "
                "or on.", "choices": ("file", "on", "off")})
    max_new_tokens: int = field(default=32, metadata={"help": "Tokens generated per prompt (greedy).", "min": 1})
    batch_size: int = field(default=8, metadata={"help": "Prompts per batch.", "min": 1})
    compare: bool = field(default=False, metadata={
        "help": "Also generate without the steer (the 'unsteered' field of each row)."})


def complete_steered(cfg: CompleteConfig, loaded, steering: Steering, prompts: list[str], *, device=None) -> RunResult:
    """Greedy continuations of ``prompts`` by ``loaded`` (a causal LM) with ``steering`` hooked at its site
    and layers (:func:`~icmlkit.lib.steer_concept.hooks.steering_hooks` with ``tokens`` and ``clip``).
    ``arrays`` holds the rows (prompt, completion, new_tokens[, unsteered])."""
    from icmlkit.lib.hf.generate import greedy_generate
    from icmlkit.lib.hf.hooks import site_modules
    from icmlkit.lib.steer_concept.hooks import steering_hooks

    if steering.layers == [None]:
        raise UsageError("STEER: the steering file was fitted on plain arrays (no layers); use `apply`")
    steering.check_model(loaded)
    t0 = time.perf_counter()
    site = steering.config.get("site", "attn")
    modules = site_modules(loaded.model, list(steering.layers), site)
    gen = dict(max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size, device=device)
    clip = {"file": None, "on": True, "off": False}[cfg.clip]
    with steering_hooks(modules, steering, cfg.strength, tokens=cfg.tokens, clip=clip):
        out = greedy_generate(loaded.model, loaded.tokenizer, prompts, **gen)
    base = greedy_generate(loaded.model, loaded.tokenizer, prompts, **gen) if cfg.compare else None
    rows = []
    for i, (p, g) in enumerate(zip(prompts, out)):
        row = {"prompt": p, "completion": g.text, "new_tokens": len(g.token_ids)}
        if base is not None:
            row["unsteered"] = base[i].text
        rows.append(row)
    changed = None if base is None else sum(r["completion"] != r["unsteered"] for r in rows)
    summary = {"model": loaded.name, "prompts": len(prompts), "layers": list(steering.layers), "site": site,
               "strength": cfg.strength, "tokens": cfg.tokens, "clip": cfg.clip, "max_new_tokens": cfg.max_new_tokens,
               "changed": changed, "seconds": round(time.perf_counter() - t0, 3)}
    return RunResult({"rows": rows}, {"tokens": cfg.tokens, "clip": cfg.clip}, summary)
