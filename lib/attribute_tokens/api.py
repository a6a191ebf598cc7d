"""The one-call functions behind every subcommand: examples from rows, ``attribute`` (one method on
one example), ``trace_rows``, ``evaluate``, ``timing``, and the output writers (JSONL, .npz, HTML).

Index spaces: the formatted text is ``prompt + target``; its tokens are the prompt's (with the
tokenizer's special tokens) followed by the target's (without), joined as id lists (no merge across
the boundary). Spans are inclusive token indices of that sequence (``span_unit="token"``) or
inclusive character offsets of ``prompt + target`` (``span_unit="char"``, what ``generate`` writes).
G (the generated part that hops go through) = the hull of the reasoning span and the output span;
P = the tokens before the target. [reconstructed: the official tool's span conventions are its own.]
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from icmlkit.lib.core.errors import InputError, UsageError

STOP_TEXT = {"", ",", ".", ";", ":", "!", "?", "\n", "\n\n", "'", '"', "(", ")", "-"}
IFR_METHODS = ("flashtrace", "ifr-span", "ifr-tokenwise")
TRACE_KEYS = ("method", "hops", "n_examples", "n_prompt_tokens", "n_target_tokens", "thinking_ratios", "seconds")


@dataclass
class Example:
    """One prepared example (token ids, index spaces, masks)."""

    id: str
    ids: list
    tokens: list
    n_prompt: int
    output_span: tuple
    reasoning_span: tuple | None
    gen_span: tuple
    gold: "object"          # np.bool_ [N]
    stop: "object"          # np.bool_ [N]
    has_gold: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def eligible(self):
        import numpy as np

        m = np.zeros(self.n, dtype=bool)
        m[:self.n_prompt] = True
        return m & ~self.stop


@dataclass
class Bundle:
    model: object
    tokenizer: object
    name: str = "model"


def load(spec: str, device=None) -> Bundle:
    """A supported decoder through lib/hf (local folder, .gguf or ``smollm2``); others are refused."""
    from icmlkit.lib.attribute_tokens.ifr import check_supported
    from icmlkit.lib.hf import load_causal_lm

    lm = load_causal_lm(spec, device=device)
    try:
        check_supported(lm.model)
    except UsageError as exc:
        raise InputError(str(exc), str(spec)) from None
    return Bundle(lm.model, lm.tokenizer, lm.name)


# ------------------------------------------------------------------------------ rows -> examples

def parse_span(value, where: str, field_name: str, line=None):
    """``[a, b]``, ``(a, b)`` or ``"a:b"`` -> (a, b) ints with a <= b; None stays None."""
    if value is None:
        return None
    try:
        if isinstance(value, str):
            a, b = value.split(":")
            a, b = int(a), int(b)
        elif isinstance(value, (list, tuple)) and len(value) == 2 and all(
                isinstance(v, int) and not isinstance(v, bool) for v in value):
            a, b = int(value[0]), int(value[1])
        else:
            raise ValueError
    except (ValueError, TypeError):
        raise InputError(f"field {field_name!r}: expected a span a:b or [a, b] of integers, got {value!r}"[:200],
                         where, line) from None
    if a < 0 or b < a:
        raise InputError(f"field {field_name!r}: span {a}:{b} is not 0 <= a <= b", where, line)
    return a, b


def _encode(tok, text: str, special: bool):
    enc = tok(text, add_special_tokens=special, return_offsets_mapping=True)
    return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]


def _char_to_tokens(span, offsets, where, field_name, line):
    a, b = span
    hit = [t for t, (s, e) in enumerate(offsets) if e > s and s <= b and e > a]
    if not hit:
        raise InputError(f"field {field_name!r}: character span {a}:{b} covers no token", where, line)
    return hit[0], hit[-1]


def _stop_mask(tok, ids):
    import numpy as np

    special = set(getattr(tok, "all_special_ids", []) or [])
    texts = [tok.decode([i]) for i in ids]
    return np.array([(i in special) or (t.strip() in STOP_TEXT) for i, t in zip(ids, texts)], dtype=bool), texts


def prepare(row: dict, tok, *, where: str = "input", line=None, span_unit: str = "token", chat: bool = False,
            require_gold: bool = False) -> Example:
    """An :class:`Example` from a row ``{id, prompt, target, output_span, reasoning_span, gold_spans}``;
    every defect is an InputError naming ``where``, the line and the field."""
    import numpy as np

    def bad(msg):
        return InputError(msg, where, line)

    for key in ("prompt", "target"):
        if not isinstance(row.get(key), str) or not row.get(key):
            raise bad(f"field {key!r}: expected a non-empty string")
    unit = row.get("span_unit", span_unit)
    if unit not in ("token", "char"):
        raise bad(f"field 'span_unit': expected token or char, got {unit!r}"[:200])
    prompt, target = row["prompt"], row["target"]
    shift_p = shift_t = 0
    if chat:
        from icmlkit.lib.hf import apply_chat_template

        formatted = apply_chat_template(tok, [{"role": "user", "content": prompt}])
        shift_p = formatted.index(prompt) if prompt in formatted else 0
        shift_t = len(formatted) - len(prompt)
        prompt = formatted
    p_ids, p_off = _encode(tok, prompt, special=not chat)
    t_ids, t_off = _encode(tok, target, special=False)
    if not p_ids or not t_ids:
        raise bad("the prompt or the target has no tokens")
    ids = p_ids + t_ids
    n, n_p = len(ids), len(p_ids)
    offsets = p_off + [(s + len(prompt), e + len(prompt)) for s, e in t_off]

    def span(name, value, in_prompt: bool):
        s = parse_span(value, where, name, line)
        if s is None:
            return None
        if unit == "char":
            sh = shift_p if in_prompt else shift_t
            s = _char_to_tokens((s[0] + sh, s[1] + sh), offsets, where, name, line)
        if s[1] >= n:
            raise bad(f"field {name!r}: span {s[0]}:{s[1]} is outside the sequence of {n} tokens")
        if in_prompt and s[1] >= n_p:
            raise bad(f"field {name!r}: span {s[0]}:{s[1]} is not inside the prompt (tokens 0:{n_p - 1})")
        if not in_prompt and s[0] < n_p:
            raise bad(f"field {name!r}: span {s[0]}:{s[1]} overlaps the prompt (tokens 0:{n_p - 1}); "
                      f"the target starts at token {n_p}")
        return s

    out = span("output_span", row.get("output_span"), False) if row.get("output_span") is not None else (n_p, n - 1)
    reas = span("reasoning_span", row.get("reasoning_span"), False)
    gold_spans = row.get("gold_spans")
    if gold_spans is not None and not isinstance(gold_spans, list):
        raise bad("field 'gold_spans': expected a list of spans")
    gold = np.zeros(n, dtype=bool)
    for g in gold_spans or []:
        a, b = span("gold_spans", g, True)
        gold[a:b + 1] = True
    if require_gold and not gold.any():
        raise bad("field 'gold_spans': evaluation needs at least one gold span")
    g0 = min(out[0], reas[0]) if reas else out[0]
    g1 = max(out[1], reas[1]) if reas else out[1]
    stop, texts = _stop_mask(tok, ids)
    if chat:  # chat-template tokens (role headers, markers) are masked like stop tokens
        lo, hi = shift_p, shift_p + len(row["prompt"])
        for t, (s0, e0) in enumerate(p_off):
            if not (s0 < hi and e0 > lo):
                stop[t] = True
    rid = row.get("id", f"row-{line}" if line is not None else "example")
    return Example(id=str(rid), ids=ids, tokens=texts, n_prompt=n_p, output_span=out, reasoning_span=reas,
                   gen_span=(g0, g1), gold=gold, stop=stop, has_gold=bool(gold.any()),
                   extra={"answer": row.get("answer"), "task": row.get("task")})


def read_rows(path: str, what: str = "examples") -> list[tuple[int, dict]]:
    from icmlkit.lib.core.io import display_name, read_jsonl

    rows = read_jsonl(path, what=f"JSON Lines of {what}")
    if not rows:
        raise InputError(f"no {what} (an empty file)", display_name(path))
    return rows


def prepare_rows(rows, tok, where: str, *, span_unit="token", chat=False, require_gold=False) -> list[Example]:
    return [prepare(r, tok, where=where, line=ln, span_unit=span_unit, chat=chat, require_gold=require_gold)
            for ln, r in rows]


def generate_target(bundle: Bundle, prompt: str, n_new: int, chat: bool = False) -> str:
    """Greedy continuation of ``prompt`` (``--generate N``) as text."""
    text = generate_replies(bundle, [prompt], n_new, chat=chat)[0]
    if not text:
        raise UsageError("--generate: the model produced no tokens (it stopped at once)")
    return text


def generate_replies(bundle: Bundle, prompts: list[str], n_new: int, *, chat: bool = False,
                     batch_size: int = 8) -> list[str]:
    """Greedy continuations (at most ``n_new`` tokens, stopped at EOS) of ``prompts``, batched; each
    prompt wrapped in the tokenizer's chat template as a user turn when ``chat``. Texts ('' when the
    model stopped at once)."""
    from icmlkit.lib.hf import apply_chat_template, greedy_generate

    ps = [apply_chat_template(bundle.tokenizer, [{"role": "user", "content": p}]) if chat else p for p in prompts]
    gens = greedy_generate(bundle.model, bundle.tokenizer, ps, max_new_tokens=n_new, batch_size=batch_size,
                           add_special_tokens=not chat)
    return [bundle.tokenizer.decode(g.token_ids) if g.token_ids else "" for g in gens]


# ------------------------------------------------------------------------------ attribution

@dataclass
class Attribution:
    """One method on one example: ``scores`` [N] (prompt positions; 0 elsewhere), the per-hop
    vectors and thinking ratios (IFR methods), and the wall time."""

    example: Example
    method: str
    scores: "object"
    hops: list
    ratios: list
    seconds: float

    def row(self, digits: int = 7) -> dict:
        r = lambda xs: [round(float(x), digits) for x in xs]  # noqa: E731
        ex = self.example
        return {"id": ex.id, "method": self.method, "hops": max(len(self.hops) - 1, 0),
                "n_prompt_tokens": ex.n_prompt, "n_target_tokens": ex.n - ex.n_prompt,
                "output_span": list(ex.output_span),
                "reasoning_span": list(ex.reasoning_span) if ex.reasoning_span else None,
                "tokens": ex.tokens, "scores": r(self.scores[:ex.n_prompt]),
                "hop_scores": [r(h) for h in self.hops], "thinking_ratios": r(self.ratios)}


def attribute(bundle: Bundle, ex: Example, cfg, *, seed: int = 0, return_cache: bool = False) -> Attribution:
    """Run ``cfg.method`` on ``ex`` (``cfg``: :class:`~icmlkit.lib.attribute_tokens.config.TraceConfig`)."""
    import torch

    from icmlkit.lib.attribute_tokens import baselines, ifr

    t0 = time.perf_counter()
    n = ex.n
    hops, ratios = [], []
    method = cfg.method
    kw = dict(chunk_tokens=cfg.chunk_tokens, sink_chunk=cfg.sink_chunk, threshold=cfg.renorm_threshold)
    if method in IFR_METHODS:
        cache = ifr.capture(bundle.model, ex.ids, cfg.attention)
        if method == "ifr-tokenwise":
            scores, hops, ratios = _tokenwise(cache, ex, kw)
        else:
            h = cfg.hops if method == "flashtrace" else 0
            res = ifr.recursive(cache, prompt_len=ex.n_prompt, gen_span=ex.gen_span, output_span=ex.output_span,
                                stop_mask=ex.stop, hops=h, **kw)
            scores, hops, ratios = res.final, res.hops, res.ratios
        scores = scores.double().numpy()
        hops = [v.double().numpy() for v in hops]
    elif method in ("gradxinput", "ig", "ablation"):
        pad = getattr(bundle.tokenizer, "pad_token_id", None) or 0
        s = baselines.captum_scores(bundle.model, ex.ids, ex.n_prompt, ex.output_span, method,
                                    ig_steps=cfg.ig_steps, pad_id=pad)
        scores = _full(s.double().numpy(), n)
    elif method == "attnlrp":
        baselines.attnlrp_scores()
    elif method == "random":
        scores = _full(baselines.random_scores(ex.n_prompt, seed, ex.id).numpy(), n)
    else:
        raise UsageError(f"unknown method {method!r}")
    import numpy as np

    scores = np.where(ex.eligible, scores, 0.0)
    return Attribution(ex, method, scores, hops, ratios, time.perf_counter() - t0)


def _tokenwise(cache, ex: Example, kw: dict):
    """Token-wise IFR on ``ex``'s output span (stop tokens dropped as sinks), rows averaged:
    (prompt scores, [the masked vector], [its thinking ratio])."""
    import torch

    from icmlkit.lib.attribute_tokens import ifr

    n = ex.n
    o0, o1 = ex.output_span
    sinks = torch.arange(o0, o1 + 1)
    keep_s = torch.as_tensor(~ex.stop[o0:o1 + 1])
    if not bool(keep_s.any()):
        keep_s = torch.ones_like(keep_s)
    t = ifr.tokenwise_rows(cache, sinks[keep_s], **kw).mean(0)
    keep = torch.as_tensor(~ex.stop) & (torch.arange(n) <= ex.gen_span[1])
    t = torch.where(keep, t, torch.zeros_like(t))
    in_g = (torch.arange(n) >= ex.gen_span[0]) & (torch.arange(n) <= ex.gen_span[1])
    ratios = [float(t[in_g].sum() / t.sum()) if float(t.sum()) > 0 else 0.0]
    return torch.where(torch.arange(n) < ex.n_prompt, t, torch.zeros_like(t)), [t], ratios


def hop_method(h: int) -> str:
    """The name a hop count is reported under: ``ifr-span`` (0), ``flashtrace`` (1), ``flashtrace-hops<h>``."""
    return "ifr-span" if h == 0 else "flashtrace" if h == 1 else f"flashtrace-hops{h}"


def attribute_ifr_family(bundle: Bundle, ex: Example, cfg, *, hops=(0, 1, 2), tokenwise: bool = True) -> dict:
    """FlashTrace at every hop count in ``hops`` (named by :func:`hop_method`) and token-wise IFR
    from ONE captured forward pass: the recursion runs once to ``max(hops)`` hops and the final
    scores at h hops are its hop-0 vector plus the first h ratio-weighted hop vectors (the same
    numbers :func:`attribute` gives per method; cheaper on a large model). Returns {method:
    Attribution}; each Attribution's ``seconds`` is the shared capture plus its own part."""
    import numpy as np
    import torch

    from icmlkit.lib.attribute_tokens import ifr

    kw = dict(chunk_tokens=cfg.chunk_tokens, sink_chunk=cfg.sink_chunk, threshold=cfg.renorm_threshold)
    t0 = time.perf_counter()
    cache = ifr.capture(bundle.model, ex.ids, cfg.attention)
    t_cap = time.perf_counter() - t0
    out = {}
    if hops:
        t1 = time.perf_counter()
        res = ifr.recursive(cache, prompt_len=ex.n_prompt, gen_span=ex.gen_span, output_span=ex.output_span,
                            stop_mask=ex.stop, hops=max(hops), **kw)
        t_rec = time.perf_counter() - t1
        in_p = torch.arange(ex.n) < ex.n_prompt
        for h in sorted(set(hops)):
            final = torch.where(in_p, res.hops[0], torch.zeros_like(res.hops[0]))
            for k in range(1, h + 1):
                final = final + res.ratios[k - 1] * torch.where(in_p, res.hops[k], torch.zeros_like(res.hops[k]))
            sc = np.where(ex.eligible, final.double().numpy(), 0.0)
            out[hop_method(h)] = Attribution(ex, hop_method(h), sc, [v.double().numpy() for v in res.hops[:h + 1]],
                                             res.ratios[:h + 1], t_cap + t_rec * (h + 1) / (max(hops) + 1))
    if tokenwise:
        t1 = time.perf_counter()
        sc, hv, ratios = _tokenwise(cache, ex, kw)
        sc = np.where(ex.eligible, sc.double().numpy(), 0.0)
        out["ifr-tokenwise"] = Attribution(ex, "ifr-tokenwise", sc, [v.double().numpy() for v in hv], ratios,
                                           t_cap + time.perf_counter() - t1)
    return out


def _full(prompt_scores, n):
    import numpy as np

    out = np.zeros(n)
    out[:len(prompt_scores)] = prompt_scores
    return out


@dataclass
class TraceResult:
    attributions: list
    summary: dict


def trace_rows(bundle: Bundle, examples: list[Example], cfg, *, seed: int = 0) -> TraceResult:
    """``trace``: one attribution per example. Summary keys :data:`TRACE_KEYS` (for several
    examples, token counts and ratios are per-example lists)."""
    from icmlkit.lib.core.console import progress

    atts = []
    for ex in progress(examples, desc="trace"):
        atts.append(attribute(bundle, ex, cfg, seed=seed))
    one = len(atts) == 1
    pick = (lambda xs: xs[0]) if one else (lambda xs: xs)  # noqa: E731
    summary = {"method": cfg.method, "hops": cfg.hops if cfg.method == "flashtrace" else 0,
               "n_examples": len(atts),
               "n_prompt_tokens": pick([a.example.n_prompt for a in atts]),
               "n_target_tokens": pick([a.example.n - a.example.n_prompt for a in atts]),
               "thinking_ratios": pick([[round(r, 6) for r in a.ratios] for a in atts]),
               "seconds": round(sum(a.seconds for a in atts), 4)}
    return TraceResult(atts, summary)


# ------------------------------------------------------------------------------ writers

def write_trace(path: str, result: TraceResult) -> None:
    """JSON Lines (one row per example) or .npz (flat scores + offsets, no pickles)."""
    import numpy as np

    from icmlkit.lib.core.io import suffix, write_npz, write_rows

    if suffix(path) == ".npz":
        atts = result.attributions
        scores = [a.scores[:a.example.n_prompt] for a in atts]
        offs = np.cumsum([0] + [len(s) for s in scores]).astype(np.int64)
        hmax = max(len(a.ratios) for a in atts)
        ratios = np.full((len(atts), hmax), np.nan)
        for i, a in enumerate(atts):
            ratios[i, :len(a.ratios)] = a.ratios
        write_npz(path, ids=np.array([a.example.id for a in atts]), scores=np.concatenate(scores),
                  offsets=offs, thinking_ratios=ratios, method=np.array(result.summary["method"]))
    else:
        write_rows(path, [a.row() for a in result.attributions], fmt=".jsonl")


def write_html(path: str, result: TraceResult) -> None:
    """A self-contained heatmap: prompt tokens shaded by score, the target underlined."""
    import html

    from icmlkit.lib.core.io import write_text

    parts = ["<!doctype html><meta charset='utf-8'><title>attribute-tokens</title>",
             "<style>body{font-family:monospace;max-width:60em}span.t{white-space:pre-wrap}"
             " span.g{text-decoration:underline;font-weight:bold}</style>"]
    for a in result.attributions:
        ex = a.example
        m = max(float(a.scores.max()), 1e-12)
        parts.append(f"<h3>{html.escape(ex.id)} ({html.escape(a.method)}; thinking ratios "
                     f"{', '.join(f'{r:.3f}' for r in a.ratios)})</h3><p>")
        for i, t in enumerate(ex.tokens):
            if i < ex.n_prompt:
                alpha = max(0.0, float(a.scores[i]) / m)
                parts.append(f"<span class='t' title='{a.scores[i]:.4g}' style='background:rgba(255,0,0,"
                             f"{alpha:.3f})'>{html.escape(t)}</span>")
            else:
                cls = "t g" if ex.output_span[0] <= i <= ex.output_span[1] else "t"
                parts.append(f"<span class='{cls}'>{html.escape(t)}</span>")
        parts.append("</p>")
    write_text(path, "\n".join(parts) + "\n")


# ------------------------------------------------------------------------------ evaluation

@dataclass
class EvalResult:
    rows: list          # one per method
    per_example: list   # one per (example, method)
    summary: dict


def pad_id(bundle: Bundle) -> int:
    """The token that guided deletion writes over deleted prompt tokens (the pad token, else 0)."""
    pad = getattr(bundle.tokenizer, "pad_token_id", None)
    return 0 if pad is None else int(pad)


def score_attribution(bundle: Bundle, att: Attribution, cfg, pad: int, *, faithfulness: bool | None = None) -> dict:
    """One per-example row of ``eval``: Recall@top_frac against the gold spans, and RISE / RISE+AP
    from the guided-deletion curve when ``faithfulness`` (default ``cfg.faithfulness``)."""
    from icmlkit.lib.attribute_tokens import metrics

    ex = att.example
    rec = metrics.topk_recall(att.scores, ex.gold, ex.eligible, cfg.top_frac) if ex.has_gold else None
    r = m = None
    if cfg.faithfulness if faithfulness is None else faithfulness:
        order = metrics.deletion_order(att.scores, ex.eligible)
        curve = metrics.deletion_curve(bundle.model, ex.ids, order, cfg.groups, pad, ex.gen_span)
        r = metrics.rise(curve)
        m = metrics.rise_ap(curve, att.scores, order, cfg.groups)
    return {"id": ex.id, "method": att.method, "recall_at_10": rec, "rise": r, "rise_ap": m,
            "thinking_ratio": att.ratios[0] if att.ratios else None}


def evaluate(bundle: Bundle, examples: list[Example], cfg, trace_cfg, *, seed: int = 0) -> EvalResult:
    """``eval``: Recall@top_frac, RISE and RISE+AP of each method over the examples (method sheet
    protocol; see :mod:`~icmlkit.lib.attribute_tokens.metrics`). ``trace_cfg`` supplies the method
    options (hops, chunks, IG steps)."""
    import dataclasses

    import numpy as np

    from icmlkit.lib.core.console import progress

    if cfg.limit:
        examples = examples[:cfg.limit]
    pad = pad_id(bundle)
    per, secs = [], {}
    for ex in progress(examples, desc="eval"):
        for method in cfg.methods:
            tc = dataclasses.replace(trace_cfg, method=method,
                                     hops=max(trace_cfg.hops, 1) if method == "flashtrace" else trace_cfg.hops)
            att = attribute(bundle, ex, tc, seed=seed)
            per.append(score_attribution(bundle, att, cfg, pad))
            secs.setdefault(method, []).append(att.seconds)
    rows = []
    for method in cfg.methods:
        mine = [p for p in per if p["method"] == method]

        def mean(key):
            vals = [p[key] for p in mine if p[key] is not None]
            return round(float(np.mean(vals)), 6) if vals else None

        rows.append({"method": method, "n": len(mine), "recall_at_10": mean("recall_at_10"), "rise": mean("rise"),
                     "rise_ap": mean("rise_ap"), "n_curves": sum(p["rise"] is not None for p in mine)})
    # wall times go to the summary only: the written tables are byte-identical across reruns
    timed = [dict(r, seconds_per_example=round(float(np.mean(secs.get(r["method"], [0.0]))), 5)) for r in rows]
    summary = {"n": len(examples), "top_frac": cfg.top_frac, "groups": cfg.groups, "methods": timed}
    return EvalResult(rows, per, summary)


# ------------------------------------------------------------------------------ timing

def timing_example(bundle: Bundle, m: int, prompt_tokens: int, *, seed: int = 0) -> Example:
    """The example ``timing`` times at target length ``m``: a VT prompt of about ``prompt_tokens``
    tokens, the chain padded with filler steps to ``m`` target tokens, the whole target as the output
    span (M sinks: what token-wise IFR pays for). ``n_prompt`` is the prompt's token count."""
    import numpy as np

    from icmlkit.lib.attribute_tokens.config import TaskConfig
    from icmlkit.lib.attribute_tokens.tasks import make_task

    tok = bundle.tokenizer
    toy = "FILL" in tok.get_vocab() and len(tok.get_vocab()) < 1000
    style = "toy" if toy else "text"
    row = make_task("vt", TaskConfig(n=1, fillers=max(0, prompt_tokens // (6 if toy else 8)), style=style),
                    seed=seed)[0]
    fill = tok(" FILL", add_special_tokens=False)["input_ids"]
    base = tok(row["prompt"])["input_ids"]
    ans = tok(" ANSWER " + row["answer"], add_special_tokens=False)["input_ids"]
    n_prompt = len(base)
    k = max(0, m - len(ans))
    reps = (k + len(fill) - 1) // len(fill) if fill else 0
    ids = base + (fill * reps)[:k] + ans
    stop, texts = _stop_mask(tok, ids)
    return Example(id=f"timing-m{m}", ids=ids, tokens=texts, n_prompt=n_prompt,
                   output_span=(n_prompt, len(ids) - 1), reasoning_span=(n_prompt, len(ids) - 1),
                   gen_span=(n_prompt, len(ids) - 1), gold=np.zeros(len(ids), dtype=bool), stop=stop)


def timing(bundle: Bundle, cfg, trace_cfg, *, seed: int = 0) -> dict:
    """``timing``: wall seconds of each method vs target length M (:func:`timing_example`; one
    untimed warm-up run per method first). Returns the summary (keys target_lengths, methods,
    seconds {method: [..]}, speedup_vs_tokenwise, speedup_vs_ig, n_prompt_tokens)."""
    import dataclasses

    secs: dict = {m: [] for m in cfg.methods}
    n_prompt = None
    for i, m in enumerate(int(m) for m in cfg.lengths):
        ex = timing_example(bundle, m, cfg.prompt_tokens, seed=seed)
        n_prompt = ex.n_prompt
        for method in cfg.methods:
            tc = dataclasses.replace(trace_cfg, method=method, hops=max(trace_cfg.hops, 1))
            if i == 0:
                attribute(bundle, ex, tc, seed=seed)  # untimed warm-up: first-call overheads are not the method's
            best = None
            for _ in range(cfg.repeats):
                t = attribute(bundle, ex, tc, seed=seed).seconds
                best = t if best is None else min(best, t)
            secs[method].append(round(best, 4))
    out = {"target_lengths": [int(m) for m in cfg.lengths], "methods": list(cfg.methods), "seconds": secs,
           "n_prompt_tokens": n_prompt}
    if "flashtrace" in secs:
        for other, key in (("ifr-tokenwise", "speedup_vs_tokenwise"), ("ig", "speedup_vs_ig")):
            if other in secs:
                out[key] = [round(b / a, 3) if a > 0 else None for a, b in zip(secs["flashtrace"], secs[other])]
        f = secs["flashtrace"]
        out["flashtrace_last_over_first"] = round(f[-1] / f[0], 3) if f[0] > 0 else None
    return out
