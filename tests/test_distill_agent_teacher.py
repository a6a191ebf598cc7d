"""distill-agent's local teacher model (lib/distill_agent/teacher.py) on tiny randomly initialised
models only (never the 1.1 GB Qwen): the header's key-value cache changes no token, the correction
is ONE step written from the prefix cut at the earliest error, the teacher's generated tokens are
counted on both sides, generations are cached per (question, prefix), and the real-teacher pipeline
runs end to end at a tiny size."""
from __future__ import annotations

import json

import pytest


def _bpe_lm(seed: int = 0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from icmlkit.lib.hf.tiny import bpe_tokenizer

    tok = bpe_tokenizer(["<first_thought>PLAN k1 k2</first_thought><thought>need k3</thought>"
                         "<code>LOOKUP k3</code><code>CALC 3 + 4</code> [O] 7 [A] What is the value of"] * 50)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=4096)).eval()
    return model, tok


@pytest.fixture(scope="module")
def bpe_folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe") / "lm"
    model, tok = _bpe_lm()
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_header_cache_and_multi_turn_cache_change_no_token():
    """Greedy turns after the cached header equal those of the full sequence recomputed without a
    cache; a second turn fed through ``episodes`` equals a fresh ``turns`` call on the whole text."""
    from icmlkit.lib.distill_agent.teacher import HEADER, HeaderLM

    model, tok = _bpe_lm()
    cached = HeaderLM(model, tok, HEADER, max_new=12, batch=2)
    plain = HeaderLM(model, tok, "", max_new=12, batch=8)
    c = cached.codec
    rows = [c.enc("[Q] What is the value of k1?") + c.mark["assistant"],
            c.enc("[Q] What is the value of k3, plus the value of k12?") + c.mark["assistant"],
            c.enc("[Q] k") + c.mark["assistant"]]
    first = cached.turns(rows)
    assert first == plain.turns([cached.header + r for r in rows])
    assert all(0 < len(t) <= 12 for t in first)
    obs = c.mark["observation"] + c.enc("7") + c.mark["assistant"]
    seconds: dict = {}

    def on_turn(i, ids):
        if i in seconds:
            seconds[i] = list(ids)
            return None
        seconds[i] = None
        return obs

    cached.episodes(rows, on_turn)
    again = plain.turns([cached.header + r + f + obs for r, f in zip(rows, first)])
    assert [seconds[i] for i in range(3)] == again


def _task(keys=("k1", "k2"), table=None):
    from icmlkit.lib.distill_agent.env import fold, question_of

    env = {"keys": list(keys), "ops": ["+"] * (len(keys) - 1), "table": table or {k: i + 3 for i, k in enumerate(keys)},
           "private": []}
    return {"id": "t0", "question": question_of(env, "natural"), "answer": str(fold(env)[-1]), "env": env}


def test_correction_is_one_step_from_the_prefix_cut_at_the_earliest_error(tmp_path):
    """The judge's earliest wrong step e cuts the trajectory; the teacher sees the question and steps
    < e only, writes ONE step (tokens counted in its tokenizer), and a second request for the same
    prefix is served from the cache file (same tokens counted again, no new generation)."""
    from icmlkit.lib.distill_agent.backends import Counter
    from icmlkit.lib.distill_agent.env import oracle_judgement
    from icmlkit.lib.distill_agent.teacher import HEADER, HeaderLM, LocalTeacher

    task = _task()
    steps = [{"thought": "PLAN k1 k2", "code": "", "observation": "None"},
             {"thought": "need k1", "code": "LOOKUP k1", "observation": "3"},
             {"thought": "need k9", "code": "LOOKUP k9", "observation": "Error: unknown key k9"},
             {"thought": "finish", "code": "ANSWER 3", "observation": "3"}]
    j = oracle_judgement(task["env"], steps, "3")
    assert j["correction_start_step"] == 3
    prefix = steps[:j["correction_start_step"] - 1]
    model, tok = _bpe_lm()
    seen = []
    lm = HeaderLM(model, tok, HEADER, max_new=10)
    turns = lm.turns
    lm.turns = lambda rows: (seen.extend(rows), turns(rows))[1]
    counter = Counter()
    cache = tmp_path / "teacher.jsonl"
    t = LocalTeacher(lm, counter, cache_path=cache)
    (step,) = t.steps_many([(task, prefix, j)])
    assert set(step) == {"thought", "code", "tokens"} and 0 < step["tokens"] <= 10
    assert counter.model_tokens == step["tokens"]
    # the teacher's request is the question and the verified prefix, nothing of the wrong steps
    text = lm.codec.decode(seen[0])
    assert task["question"] in text and "LOOKUP k1" in text and "k9" not in text and "ANSWER" not in text
    assert text.endswith("\n[A]")  # no trailing space: a BPE teacher writes it with its first word
    # served from the cache file by a fresh teacher: no generation, the same tokens counted
    c2 = Counter()
    t2 = LocalTeacher(HeaderLM(model, tok, HEADER, max_new=10), c2, cache_path=cache)
    t2.lm.turns = lambda rows: pytest.fail("generated again")
    assert t2.steps_many([(task, prefix, j)]) == [step] and c2.model_tokens == step["tokens"] and t2.hits == 1
    rows = [json.loads(x) for x in cache.read_text().splitlines()]
    assert len(rows) == 1 and json.loads(rows[0]["key"])[2] == [[s["thought"], s["code"], s["observation"]]
                                                                 for s in prefix]
    # an empty prefix (the plan is wrong): the answer is a plan, never code
    (plan,) = t.steps_many([(task, [], j)])
    assert plan["code"] == ""


def test_mps_with_a_local_teacher_keeps_the_prefix_and_counts_its_tokens(tmp_path):
    """loop.mps with a tiny local teacher: every repair's context is the student's steps before the
    earliest error, and the summary counts the teacher's generated tokens (equal to the sum over the
    cached generations used)."""
    from icmlkit.lib.distill_agent import loop
    from icmlkit.lib.distill_agent.backends import Counter, OracleJudge
    from icmlkit.lib.distill_agent.config import AgentConfig, MPSConfig
    from icmlkit.lib.distill_agent.model import LocalPolicy
    from icmlkit.lib.distill_agent.teacher import HEADER, HeaderLM, LocalTeacher, _step_key

    tasks = [_task(), {**_task(("k4", "k5", "k6")), "id": "t1"}]
    counter = Counter()
    model, tok = _bpe_lm(1)
    student = LocalPolicy(model, tok, step_tokens=8, temperature=1.0)
    teacher = LocalTeacher(HeaderLM(*_bpe_lm(2), HEADER, max_new=10), counter)
    asked = []
    orig = teacher.steps_many
    teacher.steps_many = lambda items: (asked.extend(items), orig(items))[1]
    m = loop.mps(tasks, student, teacher, OracleJudge(counter), MPSConfig(max_repairs=2), AgentConfig(max_steps=4),
                 seed=0, counter=counter)
    assert asked and m.summary["teacher_model_tokens"] == counter.model_tokens > 0
    keys = [json.dumps(["turn/2", t["question"], _step_key(p)]) for t, p, _j in asked]
    assert counter.model_tokens == sum(teacher.cache[k]["tokens"] for k in keys)
    for rec in m.records:
        for rep in rec["repair_steps"]:
            assert rep["mistake_step_index"] >= 0
    for task, prefix, j in asked:  # the prefix is exactly the steps before the earliest wrong step
        assert len(prefix) == j["correction_start_step"] - 1


def test_bc_init_with_a_local_teacher_counts_generated_tokens(bpe_folder):
    """bc-init through a local teacher folder: whole trajectories, generated tokens counted (a random
    tiny model solves nothing, so nothing is kept)."""
    from icmlkit.lib.distill_agent import api
    from icmlkit.lib.distill_agent.config import AgentConfig, MPSConfig

    res = api.bc_init([_task()], str(bpe_folder), AgentConfig(max_steps=3, step_tokens=6), MPSConfig(), seed=0)
    assert res.summary["n_tasks"] == 1 and res.summary["n_kept"] == 0
    assert 0 < res.summary["teacher_model_tokens"] <= 3 * 6


def test_teacher_pipeline_runs_at_a_tiny_size(bpe_folder, tmp_path):
    """The benchmark's real-teacher pipeline end to end with tiny models (student and teacher a tiny
    BPE Llama folder): stages resume from their cached results, both sides' teacher tokens are the
    teacher's generated tokens, and A, D are evaluated held out and in distribution."""
    from icmlkit.lib.distill_agent.demo import QWEN_SIZES, teacher_pipeline

    sizes = {**QWEN_SIZES, "n_bc": 4, "n_mps": 4, "n_eval": 2, "n_indist": 2, "bc_epochs": 1, "imitation_pool": 4,
             "rl_steps": 1, "rl_prompts": 1, "group": 2, "max_steps": 3, "step_tokens": 6, "teacher_tokens": 6,
             "batch": 2}
    store: dict = {}

    def stage(name, fn):
        if name not in store:
            store[name] = json.loads(json.dumps(fn()))
        return store[name]

    res = teacher_pipeline(tmp_path / "w", [0], sizes, teacher=str(bpe_folder), student=str(bpe_folder),
                           stage=stage)
    (per,) = res["per_seed"]
    assert set(per["eval"]) == {"A", "D"} and per["eval"]["D"]["held_out"]["n"] == 2
    assert per["eval"]["A"]["in_dist"]["n"] == 2 and len(per["eval"]["A"]["held_out"]["correct"]) == 2
    assert per["teacher_model_tokens"]["C_mps"] == per["mps"]["teacher_model_tokens"]
    assert res["teacher_solve"]["n"] == 4 and (tmp_path / "w" / "teacher_cache.jsonl").is_file()
    n = len(store)
    again = teacher_pipeline(tmp_path / "w", [0], sizes, teacher=str(bpe_folder), student=str(bpe_folder),
                             stage=stage)
    assert len(store) == n and again["per_seed"][0]["eval"] == per["eval"]


def test_cli_mps_with_a_local_teacher_folder(bpe_folder, tmp_path, capsys):
    """`distill-agent mps --teacher FOLDER`: the local teacher through the CLI; its generated tokens
    are in the JSON summary."""
    from fuzzing import run_inprocess

    tasks = tmp_path / "t.jsonl"
    code, out, err = run_inprocess("distill-agent", ["generate", "--n-tasks", "2", "--min-keys", "2", "--max-keys", "2",
                                                     "--question", "natural", "-o", str(tasks)], capsys)
    assert code == 0, err
    code, out, err = run_inprocess("distill-agent", ["mps", str(tasks), "--student", str(bpe_folder), "--teacher",
                                                     str(bpe_folder), "--judge", "oracle", "--max-steps", "3",
                                                     "--step-tokens", "6", "-o", str(tmp_path / "m.jsonl"), "--json"],
                                   capsys)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["n_tasks"] == 2 and summary["n_repairs"] >= 1 and summary["teacher_model_tokens"] > 0
