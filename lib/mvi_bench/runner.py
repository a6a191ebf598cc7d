"""``mvi-bench run``: the protocol over a data set, with a JSONL response cache.

1. Pairs in a deterministic order (sorted pair ids); ``--shard K/N`` takes a contiguous slice of
   the *pairs*, so shards never split a pair and their outputs concatenate to the full run.
2. Per pair one seeded permutation (both images alike), and its cyclic shifts with circular
   evaluation; per (item, shift) one prompt (image first, then text).
3. Images above ``max_pixels`` are downscaled (aspect kept, bicubic, PNG) before any model sees
   them, identically for every adapter.
4. Each reply is appended to the cache (``<output>.cache.jsonl``) as soon as it arrives, keyed by
   (model, template hash, generation settings, item, permutation); ``resume`` reuses the cached
   replies of a killed run, so the final records and tables are the same as an uninterrupted run's.
5. Parsing (robust or official), the optional judge for unparsable replies, correctness.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from icmlkit.lib.core import console
from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.mvi_bench.config import LETTERS, RunConfig, ScoreConfig
from icmlkit.lib.mvi_bench.data import Dataset, Item
from icmlkit.lib.mvi_bench.models import Judge, Model, Request
from icmlkit.lib.mvi_bench.protocol import build_prompt, parse_reply, permutation, rotations, template_hash

RECORD_COLUMNS = ["id", "pair_id", "category", "level", "subcategory", "type", "rotation", "permutation", "reply",
                  "letter", "answer_letter", "valid", "correct", "latency_s", "model", "template_hash"]


@dataclass
class RunResult:
    records: list[dict]
    summary: dict
    settings: dict


def prepare_image(data: bytes, max_pixels: int) -> tuple[bytes, str]:
    """(bytes, mime): unchanged when within ``max_pixels``, else downscaled to fit and PNG-encoded."""
    from icmlkit.lib.mvi_bench.models import decode_rgb

    head = data[:12]
    mime = "image/png" if head.startswith(b"\x89PNG") else "image/jpeg" if head.startswith(b"\xff\xd8") else \
        "image/webp" if head[8:12] == b"WEBP" else "image/png"
    if not max_pixels:
        return data, mime
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        w, h = im.size
    if w * h <= max_pixels:
        return data, mime
    scale = (max_pixels / (w * h)) ** 0.5
    img = decode_rgb(data).resize((max(1, int(w * scale)), max(1, int(h * scale))), resample=Image.BICUBIC)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue(), "image/png"


class ResponseCache:
    """Append-only JSONL of replies; one line per (model, template, settings, item, permutation)."""

    def __init__(self, path: str | None, resume: bool, overwrite: bool):
        self.path = path
        self.entries: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._fh = None
        if path is None:
            return
        p = Path(path)
        if resume and p.is_file():
            for ln, raw in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                try:
                    e = json.loads(raw)
                    self.entries[e["key"]] = e
                except (ValueError, KeyError, TypeError):  # the killed run's last line may be cut
                    console.log.warning(f"{path}, line {ln}: unreadable cache line skipped")
        elif p.exists() and not overwrite:
            raise InputError("a response cache exists already; pass --resume to reuse it or --overwrite to restart",
                             str(path))

    def get(self, key: str) -> dict | None:
        return self.entries.get(key)

    def put(self, entry: dict) -> None:
        with self._lock:
            if self.path is None:
                self.entries[entry["key"]] = entry
                return
            if self._fh is None:
                self._fh = open(self.path, "a" if self.entries else "w", encoding="utf-8")
            self._fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
            self._fh.flush()
            self.entries[entry["key"]] = entry

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def cache_key(model: str, thash: str, cfg: RunConfig, item_id: str, perm: list[int]) -> str:
    blob = json.dumps([model, thash, cfg.temperature, cfg.max_new_tokens, cfg.max_pixels, item_id, perm])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _shard_pairs(pairs: list, shard: tuple[int, int]) -> list:
    k, n = shard
    return pairs[(k - 1) * len(pairs) // n: k * len(pairs) // n]


def run_bench(cfg: RunConfig, data: Dataset, model: Model, *, seed: int = 0, shard: tuple[int, int] = (1, 1),
              cache_path: str | None = None, resume: bool = False, overwrite: bool = False,
              judge: Judge | None = None, stop_after: int | None = None) -> RunResult:
    """Run ``model`` on ``data`` (steps in the module docstring). ``stop_after``: raise
    KeyboardInterrupt after that many new replies (tests and the benchmark simulate a kill)."""
    from icmlkit.lib.mvi_bench.metric import score_pairs

    thash = template_hash(cfg.system_prompt)
    tasks = []  # (item, rotation, permutation)
    for normal, misleading in _shard_pairs(data.pairs, shard):
        base = permutation(seed, normal.pair_id, len(normal.choices))
        for r, perm in enumerate(rotations(base, cfg.circular)):
            tasks.append((normal, r, perm))
            tasks.append((misleading, r, perm))
    if not tasks:
        raise UsageError(f"--shard {shard[0]}/{shard[1]} holds no pairs (the data has {len(data.pairs)})")
    cache = ResponseCache(cache_path, resume, overwrite)
    images: dict[str, tuple[bytes, str]] = {}

    def request(item: Item, r: int, perm: list[int]) -> Request:
        if item.id not in images:
            images[item.id] = prepare_image(item.image(), cfg.max_pixels)
        img, mime = images[item.id]
        options = [item.choices[j] for j in perm]
        gold = LETTERS[options.index(item.answer)]
        return Request(f"{item.id}/{r}", img, mime, build_prompt(item.question, options), options, gold)

    keys = [cache_key(model.name, thash, cfg, it.id, perm) for it, _, perm in tasks]
    todo = [i for i, k in enumerate(keys) if cache.get(k) is None]
    n_cached = len(tasks) - len(todo)
    new = [0]
    t0 = time.perf_counter()

    def work(i: int) -> None:
        it, r, perm = tasks[i]
        req = request(it, r, perm)
        t = time.perf_counter()
        reply = model.answer(req)
        lat = time.perf_counter() - t
        cache.put({"key": keys[i], "model": model.name, "template_hash": thash, "item": it.id, "permutation": perm,
                   "reply": reply, "latency_s": round(lat, 6)})

    try:
        if model.concurrent and cfg.concurrency > 1:
            for it, r, perm in tasks:  # images prepared once, before the threads
                request(it, r, perm)
            with ThreadPoolExecutor(max_workers=cfg.concurrency, thread_name_prefix="mvi") as pool:
                futures = [pool.submit(work, i) for i in todo]
                try:
                    for fut in as_completed(futures):
                        fut.result()
                        new[0] += 1
                        if stop_after is not None and new[0] >= stop_after:
                            raise KeyboardInterrupt
                except BaseException:
                    for f in futures:
                        f.cancel()
                    raise
        else:
            for i in console.progress(todo, total=len(todo), desc="mvi-bench"):
                work(i)
                new[0] += 1
                if stop_after is not None and new[0] >= stop_after:
                    raise KeyboardInterrupt
    finally:
        cache.close()
    seconds = time.perf_counter() - t0

    records = []
    n_judged = 0
    for i, (it, r, perm) in enumerate(tasks):
        e = cache.get(keys[i])
        options = [it.choices[j] for j in perm]
        gold = LETTERS[options.index(it.answer)]
        letter = parse_reply(e["reply"], options, cfg.parser)
        if letter is None and judge is not None:
            letter = judge.letter(it.question, options, e["reply"])
            n_judged += 1
        records.append({"id": it.id, "pair_id": it.pair_id, "category": it.category, "level": it.level,
                        "subcategory": it.subcategory, "type": it.type, "rotation": r, "permutation": perm,
                        "reply": e["reply"], "letter": letter, "answer_letter": gold, "valid": letter is not None,
                        "correct": letter == gold, "latency_s": e["latency_s"], "model": model.name,
                        "template_hash": thash})
    pairs = _pairs_of(records)
    sc = score_pairs(pairs, ScoreConfig(bootstrap=0), seed=seed, model=model.name).summary
    summary = {"model": model.name, "n_pairs": len(pairs), "n_prompts": len(records), "n_cached": n_cached,
               "acc_normal": sc["acc_normal"], "acc_misleading": sc["acc_misleading"],
               "mvi_sensitivity": sc["mvi_sensitivity"], "circular_consistency": sc["circular_consistency"],
               "vanilla_accuracy": sc["vanilla_accuracy"], "invalid_rate": sc["invalid_rate"], "n_judged": n_judged,
               "seconds": round(seconds, 3),
               "prompts_per_second": round(len(todo) / seconds, 3) if todo and seconds > 0 else None,
               "template_hash": thash}
    settings = {"model": model.name, "template_hash": thash, "seed": seed, "temperature": cfg.temperature,
                "max_new_tokens": cfg.max_new_tokens, "max_pixels": cfg.max_pixels, "parser": cfg.parser,
                "circular": cfg.circular, "shard": f"{shard[0]}/{shard[1]}", "system_prompt": bool(cfg.system_prompt),
                "adapter": model.settings()}
    return RunResult(records, summary, settings)


def _pairs_of(records: list[dict]) -> list[dict]:
    from icmlkit.lib.mvi_bench.metric import collect_pairs

    _, pairs = collect_pairs([("<run>", i + 1, r) for i, r in enumerate(records)])
    return pairs


def default_cache_path(output: str | None) -> str | None:
    if output is None or output == "-":
        return None
    return str(output) + ".cache.jsonl"


def remove_empty(path: str | None) -> None:
    if path and os.path.isfile(path) and os.path.getsize(path) == 0:
        os.unlink(path)
