"""distill-agent: agent format, judge schema, replay oracle, sandbox limits, MPS against a stub
OpenAI-compatible server, converters against the upstream example files, reward and GRPO masking,
SFT / RL resume, bad inputs and the fuzz check."""
from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import BIN, exe, run_tool
from fuzzing import FuzzCase, MismatchCase, check_malformed, run_inprocess

TOOL = "distill-agent"
SHARED = Path(__file__).resolve().parents[1] / "data" / "score"


def _shared_score():
    from icmlkit.lib.core.io import shared_data_dir

    d = shared_data_dir("score")
    return d


def _upstream(name):
    for base in (SHARED, _shared_score()):
        if base is not None:
            p = Path(base) / "MPS" / "output" / "example" / name
            if p.is_file():
                return p
    pytest.skip(f"{name} not present (data/score or ../shared/data/score)")


def js(code_out):
    code, out, err = code_out
    assert code == 0, err
    return json.loads(out)


def cli(argv, capsys):
    return run_inprocess(TOOL, [str(a) for a in argv], capsys)


# --------------------------------------------------------------------------- format and judge


def test_parse_keeps_only_the_first_step_and_plans():
    from icmlkit.lib.distill_agent.agent import parse_step, step_text

    s = parse_step("<thought>a</thought><code>x=1</code><thought>b</thought><code>final_answer_print(x)</code>")
    assert s == {"kind": "step", "thought": "a", "code": "x=1"}
    assert parse_step("<first_thought>plan it</first_thought>", first=True)["kind"] == "plan"
    assert parse_step("just words", first=True)["kind"] == "plan"
    assert parse_step("just words")["kind"] == "invalid"
    assert parse_step("<thought> t </thought> <code> LOOKUP k1 </code>")["code"] == "LOOKUP k1"
    assert step_text({"thought": "p", "code": ""}, 0) == "<first_thought>p</first_thought>"
    assert step_text({"thought": "t", "code": "c"}, 3) == "<thought>t</thought><code>c</code>"


def test_judge_schema_is_one_indexed_with_minus_one():
    from icmlkit.lib.distill_agent.agent import JudgeFormatError, extract_json_object, validate_judgement

    ok = validate_judgement({"is_correct": False, "error_analysis": "x", "correction_start_step": 1,
                             "correction_suggestion": "y"}, 3)
    assert ok["correction_start_step"] == 1
    assert validate_judgement({"is_correct": False, "correction_start_step": -1}, 3)["correction_start_step"] == -1
    for bad in (0, 4, "two", None, True):
        with pytest.raises(JudgeFormatError):
            validate_judgement({"is_correct": False, "correction_start_step": bad}, 3)
    with pytest.raises(JudgeFormatError):
        validate_judgement({"is_correct": "maybe"}, 3)
    assert validate_judgement({"is_correct": True}, 3)["correction_start_step"] is None
    assert extract_json_object('blah ```json\n{"is_correct": true}\n``` tail') == {"is_correct": True}
    assert extract_json_object('x {"a": "}{", "b": 1} y') == {"a": "}{", "b": 1}
    with pytest.raises(JudgeFormatError):
        extract_json_object("{not json")


def _env():
    return {"keys": ["k1", "k2", "k3"], "ops": ["+", "-"], "table": {"k1": 4, "k2": 5, "k3": 2}, "private": ["k1"]}


def _st(code, obs="", thought="t"):
    return {"thought": thought, "code": code, "observation": obs}


def test_earliest_error_oracle_step1_is_the_plan():
    from icmlkit.lib.distill_agent.env import hallucinated, oracle_judgement, teacher_step, teacher_trajectory

    env = _env()
    plan = {"thought": "PLAN k1 k2 k3", "code": "", "observation": "None"}
    good = [plan, _st("LOOKUP k1", "4"), _st("LOOKUP k2", "5"), _st("CALC 4 + 5", "9"), _st("LOOKUP k3", "2"),
            _st("CALC 9 - 2", "7"), _st("ANSWER 7", "7")]
    assert oracle_judgement(env, good, "7")["is_correct"]
    j = oracle_judgement(env, [{"thought": "PLAN k2 k1", "code": "", "observation": "None"}] + good[1:], "7")
    assert j["correction_start_step"] == 1 and not j["is_correct"]
    assert teacher_step(env, [])["thought"] == "PLAN k1 k2 k3"
    # hallucinated value at step 3 (no LOOKUP k2, wrong value): earliest error is step 3 (1-indexed)
    bad = [plan, _st("LOOKUP k1", "4"), _st("CALC 4 + 8", "12"), _st("ANSWER 12", "12")]
    j = oracle_judgement(env, bad, "12")
    assert j["correction_start_step"] == 3 and j["correction_suggestion"] == "LOOKUP k2"
    assert hallucinated(env, bad) == 1
    # the teacher's own trajectory recalls k1 (no LOOKUP) and is correct: judged correct, hallucinated > 0
    tt = teacher_trajectory(env)
    assert [s["code"] for s in tt][:2] == ["", "LOOKUP k2"]
    assert oracle_judgement(env, tt, tt[-1]["observation"])["is_correct"] and hallucinated(env, tt) == 1
    # a premature answer
    j = oracle_judgement(env, [plan, _st("ANSWER 7", "7")], "7")
    assert j["correction_start_step"] == 2


def test_step_equivalence_is_functional():
    from icmlkit.lib.distill_agent.env import equivalent

    env = _env()
    pre = [{"thought": "PLAN k1 k2 k3", "code": "", "observation": "None"}, _st("LOOKUP k1", "4")]
    assert equivalent(env, pre, _st("LOOKUP k2"), {"thought": "other words", "code": "LOOKUP   k2"})
    assert not equivalent(env, pre, _st("LOOKUP k2"), _st("LOOKUP k3"))
    assert equivalent(env, pre, _st("CALC 4 + 5"), _st("CALC 4 + 5"))


# --------------------------------------------------------------------------- sandbox


def test_sandbox_timeout_kills_the_step_not_the_run():
    from icmlkit.lib.distill_agent.sandbox import PythonSandbox

    with PythonSandbox(timeout=0.5, memory_mb=512) as sb:
        assert sb.run("x = 21\nprint(x * 2)") == ("42", None)
        obs, fin = sb.run("while True:\n    pass")
        assert obs.startswith("Error:") and "timed out" in obs and fin is None
        assert sb.run("print(x + 1)") == ("22", None)  # state survives (earlier cells replayed)
        assert sb.run("1/0")[0].startswith("Error: ZeroDivisionError")
        assert sb.run("final_answer_print(x)") == ("21", "21")
        assert sb.timeouts == 1


# --------------------------------------------------------------------------- upstream files


def test_to_rl_reproduces_the_13_upstream_repair_items(tmp_path, capsys):
    traj, gold = _upstream("math_mps_trajectories.jsonl"), _upstream("math_mps_rl.json")
    out = tmp_path / "rl.json"
    s = js(cli(["to-rl", traj, "-o", out, "--json"], capsys))
    assert s["n_repair_items"] == 13
    mine = {x["prompt"][0]["content"]: x for x in json.loads(out.read_text()) if x["chosen"]}
    ref = [x for x in json.loads(gold.read_text()) if x["chosen"]]
    assert len(ref) == 13
    for g in ref:
        assert mine[g["prompt"][0]["content"]] == g


def test_upstream_example_counts():
    from icmlkit.lib.distill_agent.agent import read_trajectories
    from icmlkit.lib.distill_agent.convert import mps_counts

    rows = read_trajectories(_upstream("math_mps_trajectories.jsonl"))
    assert mps_counts(rows) == {"n_tasks": 64, "n_repaired": 21, "n_correct": 49, "n_hard": 8}


def test_to_sft_sharegpt_and_bc(tmp_path, capsys):
    traj = _upstream("math_mps_trajectories.jsonl")
    out = tmp_path / "sft.json"
    s = js(cli(["to-sft", traj, "-o", out, "--json"], capsys))
    data = json.loads(out.read_text())
    assert len(data) == s["n_items"] and s["n_repaired"] == 8  # 8 repaired+correct tasks in the first half
    assert all(c["conversations"][0]["from"] == "human" and c["conversations"][1]["from"] == "gpt" for c in data)
    bc = _upstream("math_bc_init_trajectories.jsonl")
    s2 = js(cli(["to-sft", bc, "--split", "all", "-o", tmp_path / "bc.jsonl", "--json"], capsys))
    assert s2["n_bc"] == s2["n_items"] > 0


# --------------------------------------------------------------------------- reward and GRPO


def test_reward_shaping_only_on_failure_first_step():
    from icmlkit.lib.distill_agent.train import reward

    env = _env()
    pre = [{"thought": "PLAN k1 k2 k3", "code": "", "observation": "None"}, _st("LOOKUP k1", "4")]
    item = {"gt_answer": "7", "env": env, "chosen": "<thought>n</thought><code>LOOKUP k2</code>",
            "rejected": "<thought>c</thought><code>CALC 4 + 8</code>"}
    win = pre + [_st("CALC 4 + 8", "12"), _st("ANSWER 7", "7")]  # correct final, mistake-like first step
    assert reward(item, pre, win, "7", "score") == 1.0
    assert reward(item, pre, pre + [_st("LOOKUP k2", "5"), _st("ANSWER 3", "3")], "3", "score") == 0.5
    assert reward(item, pre, pre + [_st("CALC 4 + 8", "12"), _st("ANSWER 12", "12")], "12", "score") == 0.0
    assert reward(item, pre, pre + [_st("LOOKUP k3", "2"), _st("ANSWER 1", "1")], "1", "score") == pytest.approx(0.1)
    assert reward(item, pre, pre + [_st("LOOKUP k2", "5")], None, "score") == 0.0  # no final answer
    assert reward(item, pre, pre + [_st("LOOKUP k2", "5"), _st("ANSWER 3", "3")], "3", "outcome") == 0.0


def test_group_advantages_and_masked_tokens_get_zero_gradient():
    import torch

    from icmlkit.lib.distill_agent.train import group_advantages, grpo_loss
    from icmlkit.lib.hf.tiny import masked_ce

    a, keep = group_advantages([1.0, 1.0, 1.0, 1.0])
    assert not keep and torch.all(a == 0)
    a, keep = group_advantages([1.0, 0.0, 0.5, 0.0])
    assert keep and abs(float(a.mean())) < 1e-9
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 6, 11, generator=g, requires_grad=True)
    ids = torch.randint(0, 11, (2, 6), generator=g)
    mask = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 1, 0, 0, 1, 1]])
    loss = grpo_loss(logits, ids, mask, torch.tensor([1.0, -0.5]), denom=5.0)
    loss.backward()
    # the logits at position t predict token t+1: masked targets -> zero gradient there
    pred_mask = mask[:, 1:]
    gnorm = logits.grad[:, :-1].abs().sum(-1)
    assert torch.all(gnorm[pred_mask == 0] == 0) and torch.all(gnorm[pred_mask == 1] > 0)
    assert torch.all(logits.grad[:, -1] == 0)
    logits.grad = None
    masked_ce(logits, ids, mask, 5.0).backward()
    gnorm = logits.grad[:, :-1].abs().sum(-1)
    assert torch.all(gnorm[pred_mask == 0] == 0) and torch.all(gnorm[pred_mask == 1] > 0)
    logits.grad = None
    grpo_loss(logits, ids, mask, torch.zeros(2), denom=5.0).backward()  # an all-equal group's zero advantage
    assert torch.all(logits.grad == 0)


def test_reference_grpo_form_unbiased_std_and_clipped_ppo_loss():
    """The reference trainer's (verl's) form: Bessel's std in the advantages, and the clipped PPO loss whose
    gradient at ratio 1 is the plain loss's; clipped tokens (and, for A < 0, the dual clip) carry none."""
    import torch

    from icmlkit.lib.distill_agent.train import group_advantages, grpo_loss, ppo_clip_loss, token_logprobs

    r = [1.0, 0.0, 0.5, 0.0]
    pop, _ = group_advantages(r)
    unb, _ = group_advantages(r, "unbiased")
    t = torch.tensor(r, dtype=torch.float64)
    assert torch.allclose(unb, (t - t.mean()) / (t.std() + 1e-6))
    assert torch.allclose(unb / pop, ((t.std(unbiased=False) + 1e-6) / (t.std() + 1e-6)).expand(4))
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 6, 11, generator=g, requires_grad=True)
    ids = torch.randint(0, 11, (2, 6), generator=g)
    mask = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 1, 0, 0, 1, 1]])
    adv = torch.tensor([1.0, -0.5])
    old = token_logprobs(logits, ids).detach()
    ppo_clip_loss(logits, ids, mask, adv, old, denom=5.0).backward()
    g_ppo, logits.grad = logits.grad.clone(), None
    grpo_loss(logits, ids, mask, adv, denom=5.0).backward()
    assert torch.allclose(g_ppo, logits.grad, atol=1e-6)
    # ratio far above 1 + eps with A > 0, and far above the dual-clip bound 3 with A < 0: no gradient
    logits.grad = None
    ppo_clip_loss(logits, ids, mask, adv, old - 2.0, denom=5.0).backward()
    assert torch.all(logits.grad == 0)
    loss = ppo_clip_loss(logits, ids, mask, adv, old - 2.0, denom=5.0)
    m = mask[:, 1:].float()
    assert float(loss) == pytest.approx(float(((-1.0 * 1.2 * m[0]).sum() + (0.5 * 3.0 * m[1]).sum()) / 5.0))


def test_mini_batch_update_equals_ours_with_one_mini_batch_and_differs_with_two():
    """One RL step's update on fixed rollouts: a mini-batch of every prompt is our on-policy update; two
    mini-batches take two optimiser steps (the second off-policy) and end elsewhere."""
    from types import SimpleNamespace

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from icmlkit.lib.core.runtime import Dist
    from icmlkit.lib.distill_agent import train
    from icmlkit.lib.distill_agent.config import RLConfig

    g = torch.Generator().manual_seed(0)
    runs = []
    for i in range(4):                      # 2 prompts x group 2; generated tokens after a 3-token prefix
        n = 7 + i
        ids = torch.randint(1, 50, (n,), generator=g).tolist()
        runs.append(SimpleNamespace(ep=SimpleNamespace(ids=ids, gen=[0, 0, 0] + [1] * (n - 3))))
    adv = torch.tensor([1.0, -1.0, 0.7, -0.7], dtype=torch.float64)

    def step(mini):
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64,
                                             num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
        cfg = RLConfig(prompts=2, group=2, lr=1e-2, ppo_mini_batch=mini)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
        model.train()
        if mini:
            train._ppo_update(cfg, model, model, opt, None, runs, [0, 1, 2, 3], adv, 0, 0, "cpu", Dist())
        else:
            train._one_update(cfg, model, model, opt, None, runs, [0, 1, 2, 3], adv, 0, "cpu", Dist())
        return [p.detach().clone() for p in model.parameters()]

    ours, whole, two = step(0), step(2), step(1)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(ours, whole))
    assert max(float((a - b).abs().max()) for a, b in zip(ours, two)) > 1e-3


# --------------------------------------------------------------------------- the stub endpoint


class _Stub(http.server.BaseHTTPRequestHandler):
    """model=student: plan, print(2+2), final_answer_print(4) (wrong) -- but after an observation 5
    it answers 5; model=teacher: a whole solution (only its first step may be used); model=judge:
    JSON (malformed the first time for a question containing 'flaky', always for 'broken')."""

    protocol_version = "HTTP/1.1"
    lock = threading.Lock()
    hits: dict = {}

    def log_message(self, *a):
        pass

    def _answer(self, text):
        body = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        msgs, model = body["messages"], body["model"]
        if model == "down":
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if model == "student":
            n_assist = sum(m["role"] == "assistant" for m in msgs)
            last = msgs[-1]["content"]
            if n_assist == 0:
                return self._answer("<first_thought>add the numbers</first_thought>")
            if last.strip() == "Observation: 5":
                return self._answer("<thought>done</thought><code>final_answer_print(5)</code>")
            if n_assist == 1:
                return self._answer("<thought>add</thought><code>print(2 + 2)</code>")
            return self._answer("<thought>answer</thought><code>final_answer_print(4)</code>")
        text = msgs[-1]["content"]
        if model == "teacher":
            return self._answer("<thought>fix it</thought><code>x = 2 + 3\nprint(x)</code>\n"
                                "<thought>and finish</thought><code>final_answer_print(x)</code>")
        # judge
        q = text.split("Question:\n", 1)[1].split("\n", 1)[0]
        with self.lock:
            n = self.hits[q] = self.hits.get(q, 0) + 1
        if "broken" in q or ("flaky" in q and n == 1):
            return self._answer("I think it is wrong {is_correct: nope")
        if "Agent's final answer: 5" in text:
            return self._answer('{"is_correct": true, "error_analysis": null, "correction_start_step": null, '
                                '"correction_suggestion": null}')
        return self._answer('Here: {"is_correct": false, "error_analysis": "step 2 adds 2 and 2", '
                            '"correction_start_step": 2, "correction_suggestion": "add 2 and 3"}')


@pytest.fixture
def stub():
    _Stub.hits = {}
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    srv.daemon_threads = True
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def _math_tasks(path):
    rows = [{"id": "a", "question": "What is 2 + 3? (flaky)", "answer": "5"},
            {"id": "b", "question": "What is 2 + 3?", "answer": "\\boxed{5}"},
            {"id": "c", "question": "What is 2 + 3? (broken)", "answer": "5"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_mps_with_stub_endpoint_teacher_gets_one_step_and_student_resumes(stub, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-xyz")
    tasks = _math_tasks(tmp_path / "t.jsonl")
    outs = []
    for k in range(2):
        out = tmp_path / f"mps{k}.jsonl"
        s = js(cli(["mps", tasks, "--student", f"openai://{stub}?model=student", "--teacher",
                    f"openai://{stub}?model=teacher", "--judge", f"openai://{stub}?model=judge", "-o", out,
                    "--step-timeout", "5", "--json"], capsys))
        outs.append(out.read_bytes())
        _Stub.hits = {}
    assert outs[0] == outs[1]  # deterministic
    assert s["n_tasks"] == 3 and s["n_repaired"] == 2 and s["n_correct"] == 2 and s["judge_failures"] == 1
    assert s["n_hard"] == 1 and s["llm_calls"] > 0 and s["teacher_tokens"] > 0
    rows = [json.loads(x) for x in outs[0].decode().splitlines()]
    a = rows[0]
    assert a["evaluation_result"]["is_correct"]
    rep = a["repair_steps"][0]
    assert rep["mistake_step_index"] == 1  # correction_start_step 2 -> 0-based 1 (step 1 is the plan)
    assert rep["teacher_guided_step"]["code"] == "x = 2 + 3\nprint(x)"  # only the FIRST teacher step
    assert [s["code"] for s in a["steps"]] == ["", "x = 2 + 3\nprint(x)", "final_answer_print(5)"]
    assert a["steps"][2]["thought"] == "done"  # the student wrote the final step (it resumed)
    assert rows[2].get("is_hard_sample") and "judge answer invalid" in rows[2]["evaluation_result"]["error_analysis"]
    # the RL converter finds the repair
    rl = tmp_path / "rl.json"
    s2 = js(cli(["to-rl", outs and tmp_path / "mps0.jsonl", "--split", "all", "-o", rl, "--json"], capsys))
    assert s2["n_repair_items"] == 2
    item = json.loads(rl.read_text())[0]
    assert item["chosen"] == "<thought>fix it</thought><code>x = 2 + 3\nprint(x)</code>"
    assert item["rejected"] == "<thought>add</thought><code>print(2 + 2)</code>"
    assert len(item["prompt"]) == 3  # question + plan + its observation


def test_endpoint_failure_exits_1_naming_the_url_not_the_key(stub, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-xyz")
    tasks = _math_tasks(tmp_path / "t.jsonl")
    out = tmp_path / "m.jsonl"
    code, stdout, err = cli(["mps", tasks, "--student", f"openai://{stub}?model=down", "--teacher", "oracle",
                             "--judge", "oracle", "-o", out], capsys)
    assert code == 1 and err.startswith("Error:") and "127.0.0.1" in err and "sk-secret" not in err
    assert not out.exists()


# --------------------------------------------------------------------------- the tiny student end to end


@pytest.fixture(scope="module")
def tiny_student(tmp_path_factory):
    """A tiny student trained briefly on teacher trajectories (through the CLI's library calls)."""
    import torch

    from icmlkit.lib.distill_agent import api
    from icmlkit.lib.distill_agent.config import AgentConfig, EnvConfig, MPSConfig, SFTConfig, ToSFTConfig
    from icmlkit.lib.distill_agent.model import save_student

    d = tmp_path_factory.mktemp("student")
    tasks = api.make_env(EnvConfig(n_tasks=40, min_keys=2, max_keys=2), seed=0).items
    (d / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    bc = api.bc_init(tasks, "oracle", AgentConfig(), MPSConfig(), seed=0)
    data = api.to_sft(bc.items, ToSFTConfig(split="all"), seed=0)
    (d / "sft.jsonl").write_text("".join(json.dumps(t) + "\n" for t in data.items))
    res = api.sft([x["messages"] for x in data.items], SFTConfig(epochs=3, batch=8), seed=0,
                  device=torch.device("cpu"))
    save_student(d / "model", res.model, res.tokenizer)
    return d


def test_make_env_is_deterministic_and_bad_step_exits_1(tmp_path, capsys):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    js(cli(["generate", "--n-tasks", 20, "--seed", 3, "-o", a, "--json"], capsys))
    js(cli(["generate", "--n-tasks", 20, "--seed", 3, "-o", b, "--json"], capsys))
    assert a.read_bytes() == b.read_bytes()
    assert cli(["generate", "--min-keys", 4, "--max-keys", 2, "-o", tmp_path / "c.jsonl"], capsys)[0] == 2


def test_bad_trajectories_exit_1_naming_file_line_field(tmp_path, capsys):
    good = {"steps": [{"thought": "p", "code": "", "observation": "None"}],
            "original_task_info": {"question": "q", "true_answer": "1"},
            "evaluation_result": {"is_correct": True}, "repair_steps": []}
    cases = {"nosteps": {**good, "steps": []},
             "range": {**good, "evaluation_result": {"is_correct": False, "correction_start_step": 5}},
             "zero": {**good, "evaluation_result": {"is_correct": False, "correction_start_step": 0}},
             "mistake": {**good, "repair_steps": [{"mistake_step_index": 3, "teacher_guided_step": {"thought": "t"}}]}}
    for name, row in cases.items():
        p = tmp_path / f"{name}.jsonl"
        p.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
        out = tmp_path / f"{name}.out.jsonl"
        code, _, err = cli(["to-sft", p, "-o", out], capsys)
        assert code == 1 and err.startswith("Error:") and str(p) in err and "line 2" in err, (name, err)
        assert ("steps" in err) or ("correction_start_step" in err) or ("mistake_step_index" in err)
        assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_sft_resume_gives_the_same_bytes(tiny_student, tmp_path, interrupting_checkpointer):
    import torch

    from icmlkit.lib.core.checkpoint import Checkpointer
    from icmlkit.lib.distill_agent import train
    from icmlkit.lib.distill_agent.config import SFTConfig
    from icmlkit.lib.distill_agent.convert import read_sft

    convs = read_sft(tiny_student / "sft.jsonl")[:12]
    cfg = SFTConfig(epochs=2, batch=4)
    ref = train.sft(cfg, convs, seed=1, device=torch.device("cpu"))
    ck = tmp_path / "m.ckpt.pt"
    with pytest.raises(Exception) as ei:
        train.sft(cfg, convs, seed=1, device=torch.device("cpu"), checkpointer=interrupting_checkpointer(ck, every=2))
    assert type(ei.value).__name__ == "Interrupted"
    res = train.sft(cfg, convs, seed=1, device=torch.device("cpu"), checkpointer=Checkpointer(ck, every=2, resume=True))
    for (k, v), (k2, v2) in zip(ref.model.state_dict().items(), res.model.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)


def test_sft_under_torchrun_matches_one_process(tiny_student, tmp_path):
    """Two gloo ranks, each with half of every batch (DDP averaging, the loss normalised by the
    global batch's tokens), train the same student as one process does."""
    import torch

    from icmlkit.lib.distill_agent.model import load_student

    torchrun = BIN / "torchrun"
    if not torchrun.exists():
        pytest.skip("torchrun not installed")
    data = tmp_path / "sft.jsonl"
    data.write_text("".join((tiny_student / "sft.jsonl").read_text().splitlines(keepends=True)[:8]))
    opts = ["sft", str(data), "--epochs", "1", "--batch", "4", "--layers", "1", "--d-model", "32", "--heads", "2",
            "--device", "cpu", "--checkpoint-every", "0", "--json", "--no-progress"]
    one = run_tool("distill-agent", *opts, "-o", tmp_path / "one")
    assert one.returncode == 0, one.stderr
    env = {**os.environ, "ICMLKIT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}
    two = subprocess.run([str(torchrun), "--nproc_per_node", "2", "--standalone", exe("distill-agent"), *opts,
                          "-o", str(tmp_path / "two")], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert two.returncode == 0, two.stderr[-3000:]
    assert json.loads(two.stdout)["world_size"] == 2
    a, b = load_student(tmp_path / "one")[0], load_student(tmp_path / "two")[0]
    for (k, v), (k2, v2) in zip(a.state_dict().items(), b.state_dict().items()):
        assert k == k2 and torch.allclose(v, v2, atol=1e-5), k


def test_lora_sft_trains_only_low_rank_updates_and_writes_a_plain_folder(tiny_student, tmp_path, capsys):
    """--lora R (peft): the base weights stay frozen, each adapted projection moves by a matrix of
    rank <= R, untouched modules are bit-identical, and the merged output loads as a plain model."""
    pytest.importorskip("peft")
    import torch

    from icmlkit.lib.distill_agent.model import load_student

    base, _ = load_student(tiny_student / "model")
    out = tmp_path / "lora"
    r = js(cli(["sft", tiny_student / "sft.jsonl", "--init", tiny_student / "model", "--lora", 2,
                "--lora-targets", "q_proj,v_proj", "--epochs", 1, "--batch", 8, "--lr", "1e-2", "-o", out, "--json"],
               capsys))
    assert r["lora_rank"] == 2 and 0 < r["trainable_parameters"] < r["parameters"] // 4
    new, _ = load_student(out)
    a, b = base.state_dict(), new.state_dict()
    assert set(a) == set(b)  # merged: no lora_A / lora_B keys left
    moved = 0
    for k in a:
        d = (b[k].double() - a[k].double())
        if k.endswith(("q_proj.weight", "v_proj.weight")):
            assert torch.linalg.matrix_rank(d, atol=1e-6) <= 2, k
            moved += int(d.abs().max() > 0)
        else:
            assert torch.equal(a[k], b[k]), k
    assert moved > 0
    assert cli(["sft", tiny_student / "sft.jsonl", "--init", "tiny", "--lora", 2, "-o", tmp_path / "x"], capsys)[0] == 2
    code, _, err = cli(["sft", tiny_student / "sft.jsonl", "--init", tiny_student / "model", "--lora", 2,
                        "--lora-targets", "no_such_proj", "-o", tmp_path / "y"], capsys)
    assert code == 2 and "no_such_proj" in err and not (tmp_path / "y").exists()


def test_lora_rl_moves_only_the_adapted_projections(tiny_student, tmp_path, capsys):
    pytest.importorskip("peft")
    import torch

    from icmlkit.lib.distill_agent.model import load_student

    tasks = [json.loads(x) for x in (tiny_student / "tasks.jsonl").read_text().splitlines()[:4]]
    items = tmp_path / "rl.jsonl"
    items.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": t["question"]}], "chosen": "",
                                         "rejected": "", "gt_answer": t["answer"], "env": t["env"]}) + "\n"
                             for t in tasks))
    out = tmp_path / "rl_lora"
    r = js(cli(["rl", items, "--init", tiny_student / "model", "--lora", 2, "--lora-targets", "v_proj", "--steps", 2,
                "--prompts", 2, "--group", 4, "--max-steps", 8, "--temperature", 1.5, "--lr", "5e-2", "-o", out,
                "--json"], capsys))
    assert r["lora_rank"] == 2 and r["steps"] == 2
    a, b = load_student(tiny_student / "model")[0].state_dict(), load_student(out)[0].state_dict()
    assert set(a) == set(b)
    for k in a:
        if not k.endswith("v_proj.weight"):
            assert torch.equal(a[k], b[k]), k


def test_lora_without_peft_exits_4(tiny_student, tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "peft", None)
    code, _, err = cli(["sft", tiny_student / "sft.jsonl", "--init", tiny_student / "model", "--lora", 2,
                        "-o", tmp_path / "z"], capsys)
    assert code == 4 and "pip install" in err and not (tmp_path / "z").exists()


def test_tiny_pipeline_mps_rl_eval_cli(tiny_student, tmp_path, capsys):
    d = tiny_student
    model, tasks = d / "model", d / "tasks.jsonl"
    m1, m2 = tmp_path / "m1.jsonl", tmp_path / "m2.jsonl"
    args = ["mps", tasks, "--student", model, "--teacher", "oracle", "--judge", "oracle", "--max-steps", 8,
            "--json"]
    s = js(cli(args + ["-o", m1], capsys))
    js(cli(args + ["-o", m2], capsys))
    assert m1.read_bytes() == m2.read_bytes()
    assert s["n_tasks"] == 40 and s["n_correct"] + s["n_hard"] <= 40 and s["teacher_tokens"] > 0
    rows = [json.loads(x) for x in m1.read_text().splitlines()]
    for r in rows:  # every repair kept the steps before e and then the teacher's executable step
        for rep in r["repair_steps"]:
            assert rep["teacher_guided_step"]["code"] or rep["mistake_step_index"] == 0
    rl_items = tmp_path / "rl.jsonl"
    conv = js(cli(["to-rl", m1, "--split", "all", "--p-hard", 1, "--p-easy", 1, "-o", rl_items, "--json"], capsys))
    assert conv["n_items"] == conv["n_repair_items"] + conv["n_plain_items"]
    extra = [{"prompt": [{"role": "user", "content": t["question"]}], "gt_answer": t["answer"], "env": t["env"],
              "chosen": "", "rejected": ""} for t in map(json.loads, tasks.read_text().splitlines()[:4])]
    with open(rl_items, "a") as fh:  # plain items so that the run has prefixes even if no repair succeeded
        fh.write("".join(json.dumps(x) + "\n" for x in extra))
    out = tmp_path / "rl_model"
    r = js(cli(["rl", rl_items, "--init", model, "-o", out, "--steps", 2, "--prompts", 2, "--group", 4,
                "--max-steps", 8, "--json"], capsys))
    assert r["steps"] == 2 and 0 <= r["mean_reward"] <= 1 and (out / "model.safetensors").is_file()
    ev = js(cli(["eval", out, tasks, "--shard", "2/4", "-o", tmp_path / "ev.jsonl", "--max-steps", 8, "--json"],
                capsys))
    assert ev["n"] == 10 and 0 <= ev["accuracy"] <= 1 and ev["hallucination_rate"] is not None
    lo, hi = ev["accuracy_ci"]
    assert lo <= ev["accuracy"] <= hi
    # a shard with no task gets a refusal, never an accuracy of 0 over nothing
    code, _, err = cli(["eval", out, tasks, "--shard", "1/50", "-o", tmp_path / "ev0.jsonl", "--max-steps", 8], capsys)
    assert code == 2 and "no tasks to evaluate" in err and not (tmp_path / "ev0.jsonl").exists()


def test_rl_resume_gives_the_same_bytes(tiny_student, tmp_path, interrupting_checkpointer):
    import torch

    from icmlkit.lib.core.checkpoint import Checkpointer
    from icmlkit.lib.distill_agent import train
    from icmlkit.lib.distill_agent.config import AgentConfig, RLConfig
    from icmlkit.lib.distill_agent.agent import read_tasks
    from icmlkit.lib.distill_agent.model import load_student

    tasks = read_tasks(tiny_student / "tasks.jsonl")[:4]
    items = [{"prompt": [{"role": "user", "content": t["question"]}], "gt_answer": t["answer"], "env": t["env"],
              "chosen": "", "rejected": ""} for t in tasks]
    cfg, agent = RLConfig(steps=3, prompts=2, group=4, reward="outcome", temperature=1.5), AgentConfig(max_steps=8)
    dev = torch.device("cpu")

    def fresh():
        return load_student(str(tiny_student / "model"))

    m, t = fresh()
    ref = train.rl(cfg, items, m, t, agent, seed=2, device=dev)
    ck = tmp_path / "r.ckpt.pt"
    m, t = fresh()
    with pytest.raises(Exception) as ei:
        train.rl(cfg, items, m, t, agent, seed=2, device=dev, checkpointer=interrupting_checkpointer(ck, every=1))
    assert type(ei.value).__name__ == "Interrupted"
    m, t = fresh()
    res = train.rl(cfg, items, m, t, agent, seed=2, device=dev, checkpointer=Checkpointer(ck, every=1, resume=True))
    assert res.curve == ref.curve
    for v, v2 in zip(ref.model.state_dict().values(), res.model.state_dict().values()):
        assert torch.equal(v, v2)


def test_help_bad_flag_and_cuda(tmp_path):
    r = run_tool(TOOL, "--help")
    assert r.returncode == 0 and "Example" in r.stdout and "[reconstructed]" in r.stdout
    assert run_tool(TOOL, "mps", "--bogus").returncode == 2
    r = run_tool(TOOL, "generate", "--n-tasks", 3, "-o", tmp_path / "t.jsonl", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["n_tasks"] == 3


# --------------------------------------------------------------------------- fuzz


def _valid_traj(base: Path) -> dict:
    row = {"steps": [{"thought": "p", "code": "", "observation": "None"}],
           "original_task_info": {"question": "q", "true_answer": "1"}, "evaluation_result": {"is_correct": True},
           "repair_steps": []}
    p = base / "traj.jsonl"
    p.write_text(json.dumps(row) + "\n")
    return {"traj": p}


def _valid_model(base: Path) -> dict:
    m = base / "model"
    m.mkdir()
    (m / "distill_student.json").write_text("{}")
    (m / "config.json").write_text("{not json")
    tasks = base / "tasks.jsonl"
    tasks.write_text(json.dumps({"question": "compute k1 + k2", "answer": "3",
                                 "env": {"keys": ["k1", "k2"], "ops": ["+"], "table": {"k1": 1, "k2": 2}}}) + "\n")
    return {"model": m, "tasks": tasks}


def _tasks_beyond_the_vocabulary(base: Path) -> dict:
    """Tasks of `generate --key-pool 200` (keys k64.. are outside the tiny student's vocabulary) and the
    shipped tiny student (data/distill_agent/demo_bc_init, read in place)."""
    from icmlkit.cli._common import run_cli
    from icmlkit.cli.distill_agent import cli

    tasks = base / "wide.jsonl"
    assert run_cli(cli, "distill-agent", ["generate", "--n-tasks", "30", "--key-pool", "200", "--max-keys", "3",
                                          "-o", str(tasks), "-q", "--no-manifest"]) == 0
    return {"tasks": tasks, "model": Path(__file__).resolve().parents[1] / "data" / "distill_agent" / "demo_bc_init"}


# issue 59 (tests/test_mismatch_sweep.py): a tiny student is refused tasks in words outside its vocabulary
MISMATCH = [
    MismatchCase("eval", ["eval", "{model}", "{tasks}", "-o", "{out}/e.jsonl"], _tasks_beyond_the_vocabulary,
                 ("demo_bc_init", "vocabulary has no 'k", "k0..k63"), "vocabulary"),
    MismatchCase("mps", ["mps", "{tasks}", "--student", "{model}", "--teacher", "oracle", "--judge", "oracle", "-o",
                         "{out}/m.jsonl"], _tasks_beyond_the_vocabulary,
                 ("demo_bc_init", "vocabulary has no 'k", "k0..k63"), "vocabulary"),
]

JSONL_KINDS = ("missing", "empty", "binary", "folder", "truncated_jsonl", "truncated_json")
CASES = [
    FuzzCase("bc-init", ["bc-init", "{bad}", "--teacher", "oracle", "-o", "{out}/bc.jsonl"], suffix=".jsonl",
             kinds=JSONL_KINDS),
    FuzzCase("mps", ["mps", "{bad}", "--student", "{model}", "--teacher", "oracle", "--judge", "oracle", "-o",
                     "{out}/m.jsonl"], suffix=".jsonl", kinds=JSONL_KINDS, setup=_valid_model),
    FuzzCase("mps", ["mps", "{tasks}", "--student", "{bad}", "--teacher", "oracle", "--judge", "oracle", "-o",
                     "{out}/m.jsonl"], suffix="", kinds=("missing", "empty", "binary"), setup=_valid_model,
             label="student"),
    FuzzCase("to-sft", ["to-sft", "{bad}", "-o", "{out}/s.jsonl"], suffix=".jsonl", kinds=JSONL_KINDS),
    FuzzCase("to-rl", ["to-rl", "{bad}", "-o", "{out}/r.json"], suffix=".jsonl", kinds=JSONL_KINDS),
    FuzzCase("sft", ["sft", "{bad}", "-o", "{out}/m"], suffix=".jsonl", kinds=JSONL_KINDS),
    FuzzCase("sft", ["sft", "{bad}", "-o", "{out}/m"], suffix=".json", kinds=JSONL_KINDS, label="sharegpt"),
    FuzzCase("rl", ["rl", "{bad}", "--init", "{model}", "-o", "{out}/m"], suffix=".json", kinds=JSONL_KINDS,
             setup=_valid_model),
    FuzzCase("rl", ["rl", "{bad}", "--init", "{model}", "-o", "{out}/m"], suffix=".jsonl", kinds=JSONL_KINDS,
             setup=_valid_model, label="jsonl"),
    FuzzCase("eval", ["eval", "{model}", "{bad}", "-o", "{out}/e.jsonl"], suffix=".jsonl", kinds=JSONL_KINDS,
             setup=_valid_model),
    FuzzCase("eval", ["eval", "{bad}", "{tasks}", "-o", "{out}/e.jsonl"], suffix="", kinds=("missing", "empty",
             "binary", "folder"), setup=_valid_model, label="model"),
    FuzzCase("to-sft", ["to-sft", "{traj}", "-o", "{out}/s.jsonl"], suffix=".jsonl", kinds=("missing",),
             setup=_valid_traj, label="control"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    if case.label == "control":  # the valid file passes (the fuzz cases are not vacuous)
        base = tmp_path / "ok"
        base.mkdir()
        files = _valid_traj(base)
        out = base / "s.jsonl"
        code, _, err = cli(["to-sft", files["traj"], "--split", "all", "-o", out], capsys)
        assert code == 0, err
        return
    check_malformed(TOOL, case, tmp_path, capsys)



def _bpe_student():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from icmlkit.lib.hf.tiny import bpe_tokenizer

    tok = bpe_tokenizer(["<first_thought>PLAN k1 k2</first_thought><thought>LOOKUP k3</thought>"
                         "<code>CALC 3 + 4</code> Observation: 7"] * 50)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)).eval()
    return model, tok


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_cached_decoding_of_a_hf_student_equals_full_recomputation(temperature):
    """A BPE (Hugging Face) student decodes with a key-value cache over a left-padded batch; its
    turns (greedy and sampled, two turns with an observation between) equal the uncached loop's."""
    import torch

    from icmlkit.lib.distill_agent.agent import conversation
    from icmlkit.lib.distill_agent.model import LocalPolicy

    model, tok = _bpe_student()

    def run(cached):
        pol = LocalPolicy(model, tok, step_tokens=20, temperature=temperature)
        assert pol.cached
        pol.cached = cached
        qs = ["compute k1 + k2", "what is k3 minus k4 plus k5 please", "k1"]
        eps = [pol.begin(conversation(q, []), rng=torch.Generator().manual_seed(i)) for i, q in enumerate(qs)]
        a = pol.generate(eps)
        for e in eps:
            pol.observe(e, "Observation: 7")
        return a, pol.generate(eps), [e.ids for e in eps], [e.gen for e in eps]

    assert run(True) == run(False)


def test_make_env_natural_questions_name_the_same_task(tmp_path, capsys):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    js(cli(["generate", "--n-tasks", 5, "--seed", 2, "-o", a, "--json"], capsys))
    js(cli(["generate", "--n-tasks", 5, "--seed", 2, "--question", "natural", "-o", b, "--json"], capsys))
    for x, y in zip(map(json.loads, a.read_text().splitlines()), map(json.loads, b.read_text().splitlines())):
        assert x["env"] == y["env"] and x["answer"] == y["answer"]
        env = y["env"]
        words = {"+": "plus", "-": "minus"}
        want = "What is the value of " + env["keys"][0] + "".join(
            f", {words[o]} the value of {k}" for o, k in zip(env["ops"], env["keys"][1:])) + "?"
        assert y["question"] == want and x["question"].startswith("compute ")
    assert cli(["generate", "--question", "prose", "-o", tmp_path / "c.jsonl"], capsys)[0] == 2


def test_make_env_pipeline_runs_a_to_e_with_equal_teacher_tokens(tmp_path):
    """The demo / benchmark experiment end to end at a tiny size (a refactor once left it raising
    NameError): A's imitation data never exceeds C's MPS teacher tokens by more than one trajectory."""
    from icmlkit.lib.distill_agent.demo import DEMO_SIZES, pipeline

    sizes = {**DEMO_SIZES, "n_seed": 12, "n_mps": 6, "n_eval": 4, "bc_epochs": 1, "sft_epochs": 1, "rl_steps": 1,
             "rl_prompts": 2, "group": 2, "max_steps": 4, "imitation_pool": 12}
    res = pipeline(tmp_path / "runs", 0, sizes)
    assert set(res["eval"]) == {"A", "B", "C", "D", "E"} and res["n_eval"] == 4
    tok = res["teacher_tokens"]
    assert 0 < tok["A_imitation"] and res["imitation_items_A"] >= 1
    assert tok["A_imitation"] >= tok["C_mps"] or res["imitation_items_A"] == sizes["imitation_pool"]
