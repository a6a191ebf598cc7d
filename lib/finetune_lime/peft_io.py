"""peft interop: export an adapter as a Hugging Face ``peft`` LoRA adapter folder, and import a peft
LoRA adapter folder into our own module swap (no peft code runs here: the folder is JSON and
safetensors, written and read directly, so the method's code never depends on peft internals).

A peft LoRA folder holds ``adapter_config.json`` (peft_type LORA, r, lora_alpha, target_modules, ...)
and ``adapter_model.safetensors`` with the tensors ``base_model.model.<module path>.lora_A.weight``
(r x d_in) and ``.lora_B.weight`` (H x r) per Linear, ``.lora_embedding_A`` (r x vocab) and
``.lora_embedding_B`` (d x r) per embedding; peft adds (lora_alpha / r) B A x to the frozen output,
which is our ``lora`` layer exactly (our alpha is peft's lora_alpha, our default alpha = 2r).

**LiME cannot be merged** into the base weights, nor be written as a peft LoRA: its update
delta * p(x) is modulated by an expert mixture p(x) chosen per token from that token's own
activations (and, with the batch normaliser, from the rest of its batch), so no fixed weight matrix
reproduces it. What :func:`export_peft` writes for a LiME-LoRA / LiME-LoRA-FA adapter is a fixed
low-rank update diag(v) (alpha/r) B A with the routed experts DROPPED (``part``):

- ``ba`` (default): v = 1, the shared low-rank module B A alone (LiME with every expert vector
  replaced by ones and without p_s);
- ``shared``: v = gamma_s p_s, exactly LiME's input-independent term (LiME minus its routed term
  delta * p(x));
- ``mean``: v = mean_e P_e + gamma_s p_s, every token given the uniform expert mixture (exact only
  when all expert vectors are equal).

None of them is the LiME model; each is a plain LoRA that peft loads and can merge.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.finetune_lime.config import AdapterConfig

PREFIX = "base_model.model."
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
EXPORTABLE = ("lora", "lime-lora", "lime-lorafa")
LIME_PARTS = ("ba", "shared", "mean")
INIT_METHODS = ("lora", "lime-lora", "lime-lorafa")   # train --init-peft: methods with lora_A / lora_B of peft's shapes
NOT_MERGEABLE = ("LiME cannot be merged into the base weights or written as one LoRA: its update delta*p(x) is "
                 "modulated by experts routed per token from the input itself")

# adapter_config.json keys read or harmless (initialisation, bookkeeping); any other key must be at its
# neutral value (null, false, empty), or the folder is refused as a LoRA variant we do not run
_KNOWN = {"peft_type", "task_type", "base_model_name_or_path", "revision", "inference_mode", "r", "lora_alpha",
          "lora_dropout", "target_modules", "exclude_modules", "init_lora_weights", "loftq_config", "eva_config",
          "corda_config", "lora_ga_config", "layers_to_transform", "layers_pattern", "auto_mapping", "peft_version",
          "megatron_config", "megatron_core", "qalora_group_size", "ensure_weight_tying", "use_rslora"}
# keys whose non-neutral value names a variant, with the words of the refusal
_VARIANTS = {"use_dora": "DoRA (use_dora)", "lora_bias": "a LoRA bias (lora_bias)", "use_qalora": "QA-LoRA",
             "fan_in_fan_out": "fan_in_fan_out (Conv1D layers)", "modules_to_save": "modules_to_save (full copies of "
             "modules)", "rank_pattern": "per-module ranks (rank_pattern)", "alpha_pattern": "per-module alphas "
             "(alpha_pattern)", "target_parameters": "target_parameters", "layer_replication": "layer_replication",
             "trainable_token_indices": "trainable_token_indices", "alora_invocation_tokens": "activated LoRA"}


def _neutral(v) -> bool:
    return v is None or v is False or v == {} or v == [] or v == ""


# --------------------------------------------------------------------------- export


@dataclass
class PeftExport:
    """What :func:`write_peft_folder` writes: the adapter_config.json object, the tensors by peft key,
    the safetensors metadata, and the JSON summary."""

    config: dict
    tensors: dict
    metadata: dict
    summary: dict


def _layer_paths(tensors: dict) -> list[str]:
    return sorted(k[: -len(".lora_A")] for k in tensors if k.endswith(".lora_A"))


def _suffix_match(name: str, target: str) -> bool:
    return name == target or name.endswith("." + target)


def export_peft(cfg: AdapterConfig, tensors: dict, meta: dict | None = None, *, part: str | None = None,
                source: str = "adapter", task_type: str | None = "CAUSAL_LM") -> PeftExport:
    """The peft LoRA folder of an adapter (``cfg``, ``tensors`` by our names, ``meta`` as read by
    :func:`~icmlkit.lib.finetune_lime.adapter.read_adapter`). ``lora``: exact. ``lime-lora`` /
    ``lime-lorafa``: the fixed part ``part`` (ba | shared | mean, see the module docstring), the routed
    experts dropped. Other methods: a UsageError (MoLoRA, HydraLoRA, DoRA/SliceFine/prompt bases are
    not one LoRA either)."""
    import numpy as np

    meta = meta or {}
    if cfg.method not in EXPORTABLE:
        raise UsageError(f"export-peft writes plain LoRA: --method lora exactly, lime-lora / lime-lorafa as their "
                         f"shared B·A part; a {cfg.method} adapter has no peft LoRA form")
    lime = cfg.method != "lora"
    if not lime and part is not None:
        raise UsageError("--lime-part applies to LiME adapters only (a lora adapter is exported exactly)")
    part = (part or "ba") if lime else "lora"
    if part not in LIME_PARTS + ("lora",):
        raise UsageError(f"--lime-part must be one of {', '.join(LIME_PARTS)}, not {part!r}")
    if part == "shared" and not cfg.shared:
        raise UsageError("--lime-part shared: the adapter was trained without the shared vector p_s (--no-shared)")
    paths = _layer_paths(tensors)
    if not paths:
        raise InputError("the adapter holds no lora_A tensors", source)
    linear = [p for p in paths if any(_suffix_match(p, t) for t in cfg.targets)]
    embed = [p for p in paths if p not in linear]
    if len(embed) != (1 if cfg.embeddings else 0):
        raise InputError(f"cannot tell the wrapped layers apart (targets {cfg.targets}, layers {paths})", source)
    out: dict = {}
    for p in paths:
        A = np.asarray(tensors[f"{p}.lora_A"], dtype=np.float32)
        B = np.asarray(tensors[f"{p}.lora_B"], dtype=np.float32)
        if part in ("shared", "mean"):
            v = np.zeros(B.shape[0], dtype=np.float64)
            if part == "mean":
                v = v + np.asarray(tensors[f"{p}.experts"], dtype=np.float64).mean(0)
            if cfg.shared:
                v = v + float(np.asarray(tensors[f"{p}.gamma_s"]).reshape(-1)[0]) * np.asarray(
                    tensors[f"{p}.shared"], dtype=np.float64)
            B = (v[:, None] * B).astype(np.float32)
        if p in embed:
            out[f"{PREFIX}{p}.lora_embedding_A"], out[f"{PREFIX}{p}.lora_embedding_B"] = A, B
        else:
            out[f"{PREFIX}{p}.lora_A.weight"], out[f"{PREFIX}{p}.lora_B.weight"] = A, B
    alpha = float(cfg.alpha) if cfg.alpha is not None else 2.0 * cfg.rank
    alpha_json = int(alpha) if alpha == int(alpha) else alpha
    config = {"peft_type": "LORA", "task_type": task_type, "base_model_name_or_path": meta.get("model") or None,
              "r": int(cfg.rank), "lora_alpha": alpha_json, "lora_dropout": float(cfg.dropout),
              "target_modules": paths, "bias": "none", "fan_in_fan_out": False, "use_dora": False,
              "use_rslora": False, "lora_bias": False, "modules_to_save": None, "rank_pattern": {},
              "alpha_pattern": {}, "init_lora_weights": True, "inference_mode": True}
    dropped = [] if not lime else (["experts_P (routed)", "shared_p_s", "gamma_s"] if part == "ba" else
                                   ["experts_P (routed)"] if part == "shared" else ["routing (uniform mixture)"])
    note = ("exact: the lora adapter" if not lime else
            f"NOT the LiME model: the fixed part '{part}' of {cfg.method} with its routed experts dropped; "
            + NOT_MERGEABLE)
    metadata = {"format": "pt", "icmlkit": json.dumps({"tool": "finetune-lime", "method": cfg.method, "part": part,
                                                       "source": str(source), "exact": not lime}, sort_keys=True)}
    summary = {"method": cfg.method, "part": part, "exact": not lime, "r": int(cfg.rank), "lora_alpha": alpha_json,
               "scaling": alpha / cfg.rank, "layers": len(paths), "embeddings": bool(embed),
               "params": int(sum(a.size for a in out.values())), "dropped": dropped, "note": note}
    return PeftExport(config=config, tensors=out, metadata=metadata, summary=summary)


def write_peft_folder(folder, exp: PeftExport) -> None:
    """Write ``adapter_config.json`` and ``adapter_model.safetensors`` into ``folder`` (each file atomically;
    the CLI builds the folder itself atomically as FOLDER.partial)."""
    from icmlkit.lib.core.io import write_json, write_safetensors

    folder = Path(folder)
    write_json(folder / CONFIG_FILE, exp.config)
    write_safetensors(folder / WEIGHTS_FILE, exp.tensors, exp.metadata)


def save_peft(path, exp: PeftExport, *, overwrite: bool = False) -> None:
    """The whole folder ``path`` written atomically (built as ``path.partial``, then renamed)."""
    from icmlkit.lib.core.io import atomic_dir

    with atomic_dir(path, overwrite=overwrite) as tmp:
        write_peft_folder(tmp, exp)


# --------------------------------------------------------------------------- import


@dataclass
class PeftImport:
    """A peft LoRA folder read against a model: our ``lora`` config, the tensors by our names (torch,
    float32), the folder's recorded base model, and the summary."""

    cfg: AdapterConfig
    tensors: dict
    base_model: str | None
    summary: dict = field(default_factory=dict)


def is_peft_folder(path) -> bool:
    p = Path(str(path))
    return p.is_dir() and (p / CONFIG_FILE).is_file()


def _read_peft_tensors(folder: Path, where: str) -> dict:
    # the safetensors package, not lib/core/io.read_safetensors: peft folders are often saved in
    # bfloat16, which core's numpy reader cannot represent
    st = folder / WEIGHTS_FILE
    try:
        from safetensors import safe_open

        out = {}
        with safe_open(str(st), framework="pt") as fh:
            for k in fh.keys():
                out[k] = fh.get_tensor(k)
        return out
    except Exception as exc:  # the safetensors package's own errors (truncated, bad header, not a file)
        msg = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise InputError(f"{WEIGHTS_FILE} is unreadable ({msg})", where) from None


@dataclass
class PeftFolderConfig:
    """The checked adapter_config.json of a peft LoRA folder: rank, our alpha, dropout, the recorded base
    model, the raw object."""

    r: int
    alpha: float
    lora_alpha: float
    dropout: float
    base_model: str | None
    raw: dict


def read_peft_config(folder, model_spec=None) -> PeftFolderConfig:
    """The folder's adapter_config.json, checked without the model (so a bad folder fails before a model
    loads): a folder with adapter_config.json and adapter_model.safetensors, peft_type LORA, no LoRA variant
    we do not run (InputError), the recorded base model ``model_spec`` when both are known (UsageError)."""
    from icmlkit.lib.core.io import display_name, load_json

    folder = Path(str(folder))
    where = display_name(folder)
    if not folder.is_dir():
        raise InputError("not a peft adapter folder (not a folder)", where)
    if not (folder / CONFIG_FILE).is_file():
        raise InputError(f"not a peft adapter folder (no {CONFIG_FILE})", where)
    conf = load_json(folder / CONFIG_FILE, dict, "peft adapter config")
    ptype = conf.get("peft_type")
    if ptype != "LORA":
        raise InputError(f"peft type {ptype!r}, not LORA: finetune-lime imports plain LoRA adapters only", where)
    for k, what in _VARIANTS.items():
        if not _neutral(conf.get(k)):
            raise InputError(f"a LoRA variant with {what}: finetune-lime imports plain LoRA only", where)
    if conf.get("bias", "none") not in ("none", None):
        raise InputError(f"bias {conf.get('bias')!r}: the adapter trains the base biases; finetune-lime imports "
                         "plain LoRA only (bias 'none')", where)
    odd = sorted(k for k, v in conf.items() if k not in _KNOWN and k not in _VARIANTS and k != "bias"
                 and not _neutral(v))
    if odd:
        raise InputError(f"unsupported LoRA option(s) {', '.join(odd)}: finetune-lime imports plain LoRA only", where)
    try:
        r = int(conf.get("r"))
        lora_alpha = float(conf.get("lora_alpha", 8))
        dropout = float(conf.get("lora_dropout") or 0.0)
        if r <= 0 or not (0 < lora_alpha < math.inf) or not (0 <= dropout < 1):
            raise ValueError("out of range")
    except (TypeError, ValueError) as exc:
        raise InputError(f"r / lora_alpha / lora_dropout unreadable ({exc})", where) from None
    # our delta = (alpha/r) B A: rsLoRA's lora_alpha/sqrt(r) is our alpha = lora_alpha sqrt(r)
    alpha = lora_alpha * math.sqrt(r) if conf.get("use_rslora") else lora_alpha
    base = conf.get("base_model_name_or_path") or None
    if base is not None and not isinstance(base, str):
        raise InputError("base_model_name_or_path is not a string", where)
    if base and model_spec is not None and not _same_base(base, model_spec):
        raise UsageError(f"{where}: the peft adapter was trained on base model {base!r}, not {str(model_spec)!r}; "
                         "give that model")
    if not (folder / WEIGHTS_FILE).is_file():
        extra = " (adapter_model.bin is not read: save it with safe_serialization=True)" \
            if (folder / "adapter_model.bin").exists() else ""
        raise InputError(f"no {WEIGHTS_FILE}{extra}", where)
    return PeftFolderConfig(r=r, alpha=alpha, lora_alpha=lora_alpha, dropout=dropout, base_model=base, raw=conf)


def read_peft(folder, model, model_spec=None) -> PeftImport:
    """Read the peft LoRA adapter ``folder`` for ``model`` (not modified) and check that it fits.

    Refused (one line naming the folder): everything :func:`read_peft_config` refuses (not a peft LoRA
    folder, DoRA, prompt tuning, another base model, ...); tensors naming modules the model lacks, not
    nn.Linear / the input embedding, or of other shapes -> InputError (exit 1)."""
    import torch
    import torch.nn as nn

    from icmlkit.lib.core.io import display_name
    from icmlkit.lib.finetune_lime.adapter import input_embedding_name

    pc = read_peft_config(folder, model_spec)
    conf, r, alpha, dropout, base = pc.raw, pc.r, pc.alpha, pc.dropout, pc.base_model
    lora_alpha = pc.lora_alpha
    folder = Path(str(folder))
    where = display_name(folder)
    raw = _read_peft_tensors(folder, where)
    mods = dict(model.named_modules())
    emb_name = input_embedding_name(model)
    lin, emb, tensors = set(), set(), {}
    for k, t in raw.items():
        if not k.startswith(PREFIX):
            raise InputError(f"unexpected tensor {k!r} (peft LoRA keys start with {PREFIX!r})", where)
        rest = k[len(PREFIX):]
        for suf, kind, ours in ((".lora_A.weight", "linear", "lora_A"), (".lora_B.weight", "linear", "lora_B"),
                                (".lora_embedding_A", "embedding", "lora_A"),
                                (".lora_embedding_B", "embedding", "lora_B"), (".base_layer.weight", "base", None)):
            if rest.endswith(suf):
                path = rest[: -len(suf)]
                break
        else:
            raise InputError(f"unexpected tensor {k!r}: not plain LoRA (e.g. DoRA's lora_magnitude_vector, a "
                             "LoRA bias)", where)
        m = mods.get(path)
        if kind == "base":   # peft saves the embedding's own weight beside its LoRA: it must be the model's
            if m is None or not hasattr(m, "weight") or tuple(m.weight.shape) != tuple(t.shape) or not torch.equal(
                    m.weight.detach().cpu().float(), t.float()):
                raise InputError(f"it carries its own weights of {path!r}, which differ from the model's (another "
                                 "base model, or a resized vocabulary)", where)
            continue
        if kind == "linear" and not isinstance(m, nn.Linear):
            raise InputError(f"its target module {path!r} is {'missing from' if m is None else 'not an nn.Linear of'}"
                             " the model: the target modules do not match", where)
        if kind == "embedding" and (m is None or path != emb_name):
            raise InputError(f"its embedding target {path!r} is not the model's input embedding "
                             f"({emb_name or 'none'}): the target modules do not match", where)
        d_in = m.in_features if kind == "linear" else m.num_embeddings
        H = m.out_features if kind == "linear" else m.embedding_dim
        want = (r, d_in) if ours == "lora_A" else (H, r)
        if tuple(t.shape) != want:
            raise InputError(f"tensor {k!r} has shape {tuple(t.shape)}, the model needs {want} (r = {r})", where)
        if not torch.isfinite(t.float()).all():
            raise InputError(f"tensor {k!r} holds NaN or infinite values", where)
        (lin if kind == "linear" else emb).add(path)
        tensors[f"{path}.{ours}"] = t.detach().float().contiguous()
    for p in lin | emb:
        if f"{p}.lora_A" not in tensors or f"{p}.lora_B" not in tensors:
            raise InputError(f"module {p!r} has only one of lora_A / lora_B", where)
    if not lin and not emb:
        raise InputError("no LoRA tensors", where)
    if not lin:
        raise InputError("only an embedding LoRA: finetune-lime wraps at least one nn.Linear", where)
    targets = sorted(lin)
    tm = conf.get("target_modules")
    if isinstance(tm, list) and tm and all(isinstance(x, str) for x in tm):
        # the folder's own suffixes when they name exactly the Linear layers it holds
        hit = {n for n, mm in mods.items() if isinstance(mm, nn.Linear) and n and any(_suffix_match(n, x) for x in tm)}
        if hit == lin:
            targets = sorted(set(tm))
    cfg = AdapterConfig(method="lora", rank=r, alpha=alpha, dropout=dropout, targets=targets, embeddings=bool(emb))
    cfg.check()
    summary = {"peft_type": "LORA", "base_model": base, "r": r, "lora_alpha": lora_alpha,
               "use_rslora": bool(conf.get("use_rslora")), "alpha": alpha, "scaling": alpha / r,
               "targets": targets, "layers": len(lin) + len(emb), "embeddings": bool(emb),
               "params": int(sum(t.numel() for t in tensors.values()))}
    return PeftImport(cfg=cfg, tensors=tensors, base_model=base, summary=summary)


def _same_base(recorded: str, given) -> bool:
    """``same_model``, also when the record is a hub id (``org/name``) and the given model its name
    (``HuggingFaceTB/SmolLM2-135M-Instruct`` and ``smollm2``)."""
    from icmlkit.lib.hf.models import same_model

    if same_model(recorded, given):
        return True
    rp = Path(recorded)
    return not rp.exists() and len(rp.parts) == 2 and same_model(rp.name, given)


def load_peft(model, folder, model_spec=None):
    """``model`` with the peft LoRA of ``folder`` inserted as our ``lora`` layers (an
    :class:`~icmlkit.lib.finetune_lime.adapter.Adapted`), after :func:`read_peft`'s checks."""
    from icmlkit.lib.core.io import display_name
    from icmlkit.lib.finetune_lime.adapter import apply_adapter

    imp = read_peft(folder, model, model_spec)
    ad = apply_adapter(model, imp.cfg, seed=0)
    ad.load_adapter_state(imp.tensors, display_name(folder))
    return ad, imp


def import_peft(folder, model, model_spec: str):
    """(tensors, metadata, summary) of our adapter file for the peft LoRA ``folder`` on ``model``
    (inserted and loaded once, so every check of :func:`load_peft` runs)."""
    from icmlkit.lib.core.io import display_name
    from icmlkit.lib.finetune_lime.adapter import adapter_metadata, count_parts

    ad, imp = load_peft(model, folder, model_spec)
    tensors = {k: v.detach().cpu().contiguous() for k, v in ad.adapter_state().items()}
    meta = adapter_metadata(imp.cfg, model_spec, {"peft": {"source": display_name(folder),
                                                            "base_model": imp.base_model}, "steps": 0})
    c = count_parts(ad)
    summary = {"method": "lora", **imp.summary, "trainable_params": c["trainable"]}
    return tensors, meta, summary


def init_config(acfg: AdapterConfig, imp: PeftImport, given: set | frozenset = frozenset()) -> AdapterConfig:
    """``train --init-peft``: ``acfg`` with the folder's rank, alpha, targets and embeddings; a UsageError
    when the method cannot start from a LoRA or an option in ``given`` (set on the command line) differs."""
    import dataclasses

    if acfg.method not in INIT_METHODS:
        raise UsageError(f"--init-peft starts {', '.join(INIT_METHODS)} from a LoRA (their lora_A / lora_B), not "
                         f"--method {acfg.method}")
    new = {"rank": imp.cfg.rank, "alpha": imp.cfg.alpha, "targets": list(imp.cfg.targets),
           "embeddings": imp.cfg.embeddings}
    def differs(k):
        a, b = getattr(acfg, k), new[k]
        return sorted(a) != sorted(b) if k == "targets" else a != b

    clash = [k for k in sorted(given) if k in new and differs(k)]
    if clash:
        raise UsageError(f"--init-peft: --{', --'.join(c.replace('_', '-') for c in clash)} differ from the peft "
                         f"adapter's ({', '.join(f'{c} = {new[c]}' for c in clash)}); leave them out")
    out = dataclasses.replace(acfg, **new)
    out.check()
    return out
