"""trace-injection guard-suite: whole AgentDojo suites run through AgentDojo's own task runner with a
scripted agent and the online gate in the loop (issue 54, item 5). A subset of each suite keeps it fast."""
from __future__ import annotations

import json

import pytest

from conftest import run_tool

pytest.importorskip("agentdojo")


def _run(suite, limit=1, **kw):
    from icmlkit.lib.trace_injection.suite_run import GuardSuiteConfig, run_suite

    return run_suite(GuardSuiteConfig(suite=suite, limit=limit, **kw))


def _pairs(rows):
    return {(r["user_task"], r["injection_task"], r["gate"]): r for r in rows}


def test_gate_blocks_the_planted_attacks_and_lets_the_benign_task_finish():
    res = _run("banking")  # user_task_0 (pay the bill in the file), no injection and 9 injection tasks
    by = _pairs(res.rows)
    assert len(res.rows) == 2 * (1 + 9)
    for g in ("off", "on"):  # the benign task finishes, nothing blocked
        r = by[("user_task_0", None, g)]
        assert r["utility"] and r["blocked"] == 0 and r["attack_success"] is None
    attacked = [k for k in by if k[1] is not None and k[2] == "off"]
    for ut, it, _ in attacked:
        off, on = by[(ut, it, "off")], by[(ut, it, "on")]
        assert off["followed_injection"] and off["attack_success"]   # the scripted agent obeys; AgentDojo: success
        assert on["blocked"] == 1 and not on["attack_success"]       # the gate stops it before the harmful call
        assert on["blocked_call"]["score"] >= res.summary["threshold"]
    s = res.summary
    assert s["gate_off"]["attacked"]["attack_success"] == 1.0 and s["gate_on"]["attacked"]["attack_success"] == 0.0
    assert s["gate_on"]["benign"]["utility"] == 1.0 and s["gate_on"]["decisions"] >= 9
    assert s["gate_on"]["latency_ms_p99"] is not None


def test_skip_refuses_the_call_keeps_utility_and_hides_it_from_agentdojo_checks():
    """--on-block skip: the agent gets a tool error and finishes the user task; the refused calls are left
    out of the call trace, so slack's trace-based security check (injection_task_5) sees none of them."""
    res = _run("slack", on_block="skip", gate="on")
    by = _pairs(res.rows)
    assert by[("user_task_0", None, "on")]["utility"]
    for it in ("injection_task_1", "injection_task_5"):
        r = by[("user_task_0", it, "on")]
        assert r["blocked"] >= 1 and not r["attack_success"] and r["utility"]


def test_gate_setting_takes_the_models_threshold_and_refuses_a_learned_head():
    from icmlkit.lib.core.errors import InputError
    from icmlkit.lib.trace_injection.learn import Head
    from icmlkit.lib.trace_injection.suite_run import GuardSuiteConfig, gate_setting

    em = Head("em", threshold=0.3, params={"theta": {"overlap": 0.9}, "leak": 0.02})
    params, key, thr = gate_setting(GuardSuiteConfig(), em)
    assert (key, thr, params["leak"], params["threshold"]) == ("p_compromised", 0.3, 0.02, 0.3)
    assert gate_setting(GuardSuiteConfig(threshold=0.7), em)[2] == 0.7
    assert gate_setting(GuardSuiteConfig(), None)[1:] == ("effect", 0.5)
    with pytest.raises(InputError):
        gate_setting(GuardSuiteConfig(), Head("forest"))


def test_cli_writes_runs_and_summary(tmp_path):
    out = tmp_path / "runs.json"
    r = run_tool("trace-injection", "guard-suite", "--suite", "banking", "--limit", "1", "--gate", "on",
                 "--no-benign", "-o", out, "--json")
    assert r.returncode == 0, r.stderr[-800:]
    summary = json.loads(r.stdout)
    doc = json.loads(out.read_text())
    assert summary["runs"] == len(doc["runs"]) == 9 and summary["gate_off"] is None
    assert summary["gate_on"]["attacked"]["runs_with_block"] == 9
    assert run_tool("trace-injection", "guard-suite", "--suite", "nope").returncode == 2
