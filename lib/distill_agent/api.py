"""One library call per ``distill-agent`` subcommand (config + loaded inputs -> result with ``.summary``).
The CLI, the demo and the benchmark call these."""
from __future__ import annotations

from dataclasses import dataclass, field

from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.distill_agent.backends import Counter, check_model_spec, make_judge, make_student, make_teacher
from icmlkit.lib.distill_agent.model import check_vocabulary


@dataclass
class Result:
    items: list = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    model: object = None
    tokenizer: object = None
    curve: list = field(default_factory=list)


def make_env(cfg, *, seed: int) -> Result:
    """Synthetic lookup + arithmetic tasks with a private-recall teacher [reconstructed toy]."""
    from icmlkit.lib.distill_agent.env import make_tasks

    rows = make_tasks(cfg, seed)
    n_priv = sum(len(r["env"]["private"]) for r in rows)
    n_keys = sum(len(r["env"]["keys"]) for r in rows)
    return Result(rows, {"n_tasks": len(rows), "min_keys": cfg.min_keys, "max_keys": cfg.max_keys,
                         "private_key_share": round(n_priv / max(n_keys, 1), 4),
                         "mean_steps": round(sum(2 * len(r["env"]["keys"]) + 1 for r in rows) / len(rows), 3)})


def bc_init(tasks: list[dict], teacher: str, agent_cfg, mps_cfg, *, seed: int, search=None) -> Result:
    """Phase 1 data: teacher trajectories on the seed tasks (correct ones kept)."""
    from icmlkit.lib.distill_agent import loop

    check_model_spec(teacher, "--teacher")
    counter = Counter()
    t = make_teacher(teacher, counter, mps_cfg, agent_cfg, seed)
    policy = None
    if teacher != "oracle" and hasattr(t, "client"):
        from icmlkit.lib.distill_agent.backends import EndpointPolicy

        policy = EndpointPolicy(t.client, counter, mps_cfg.teacher_temperature, True)
    res = loop.bc_init(tasks, teacher, t, agent_cfg, seed=seed, counter=counter, policy=policy, search=search)
    return Result(res.records, res.summary)


def mps(tasks: list[dict], student: str, teacher: str, judge: str, cfg, agent_cfg, *, seed: int, device=None,
        search=None) -> Result:
    """Mentored Problem Solving (see :func:`icmlkit.lib.distill_agent.loop.mps`)."""
    from icmlkit.lib.distill_agent import loop

    for spec, opt in ((student, "--student"), (teacher, "--teacher"), (judge, "--judge")):
        check_model_spec(spec, opt)
    counter = Counter()
    tj = make_judge(judge, counter, cfg, agent_cfg, seed)
    tt = make_teacher(teacher, counter, cfg, agent_cfg, seed, device=device)
    st = make_student(student, counter, agent_cfg, seed, temperature=cfg.temperature, top_p=cfg.top_p,
                      top_k=cfg.top_k, device=device)
    check_vocabulary(st, tasks, student)
    res = loop.mps(tasks, st, tt, tj, cfg, agent_cfg, seed=seed, counter=counter, search=search)
    return Result(res.records, res.summary)


def to_sft(rows, cfg, *, seed: int) -> Result:
    from icmlkit.lib.distill_agent.convert import to_sft as conv

    r = conv(rows, cfg, seed)
    return Result(r.items, r.summary)


def to_rl(rows, cfg, *, seed: int) -> Result:
    from icmlkit.lib.distill_agent.convert import to_rl as conv

    r = conv(rows, cfg, seed)
    return Result(r.items, r.summary)


def sft(convs, cfg, *, seed: int, device, dist=None, checkpointer=None) -> Result:
    from icmlkit.lib.distill_agent import train

    r = train.sft(cfg, convs, seed=seed, device=device, dist=dist, checkpointer=checkpointer)
    return Result([], r.summary, r.model, r.tokenizer, r.curve)


def rl(items, init: str, cfg, agent_cfg, *, seed: int, device, dist=None, checkpointer=None, search=None) -> Result:
    from icmlkit.lib.distill_agent import train
    from icmlkit.lib.distill_agent.model import load_student

    model, tok = load_student(init, device=device)
    r = train.rl(cfg, items, model, tok, agent_cfg, seed=seed, device=device, dist=dist, checkpointer=checkpointer,
                 search=search)
    return Result([], r.summary, r.model, r.tokenizer, r.curve)


def evaluate(model: str, tasks: list[dict], cfg, agent_cfg, *, seed: int, device=None, search=None) -> Result:
    from icmlkit.lib.distill_agent import loop

    check_model_spec(model, "MODEL")
    if not tasks:  # an accuracy over no task is not 0: refuse
        raise UsageError("no tasks to evaluate (the benchmark or shard is empty)")
    counter = Counter()
    policy = make_student(model, counter, agent_cfg, seed, temperature=cfg.temperature, device=device)
    check_vocabulary(policy, tasks, model)
    res = loop.evaluate(tasks, policy, agent_cfg, seed=seed, search=search)
    res.summary["llm_calls"] = counter.llm_calls
    return Result(res.records, res.summary)


def load_search(path) -> dict | None:
    """A web_search table: JSON object {query: result text}."""
    if path is None:
        return None
    from icmlkit.lib.core.io import display_name, load_json

    d = load_json(path, expect=dict, what="search table JSON")
    if not all(isinstance(v, str) for v in d.values()):
        raise InputError("every value must be a string (the search result text)", display_name(path))
    return d


__all__ = ["UsageError"]
