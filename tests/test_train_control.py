"""train-control: the AMS sampler and target identities, the diagnostics against closed forms,
simulator state round trips, the command line (smoke runs, resume, bad inputs, malformed files)."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import BIN, exe, run_tool
from fuzzing import FuzzCase, MismatchCase, check_malformed, run_inprocess
from icmlkit.lib.train_control.agent import Agent
from icmlkit.lib.train_control.ams import neighbourhood_mean, neighbours, orthonormal_directions
from icmlkit.lib.train_control.config import AgentConfig, TrainConfig
from icmlkit.lib.train_control.diagnostics import actor_jacobian_norm, hessian_spectral_norm, hessian_trace
from icmlkit.lib.train_control.envs import make_env
from icmlkit.lib.core.checkpoint import Checkpointer
from icmlkit.lib.core.errors import EnvironmentProblem, UsageError

TOOL = "train-control"
D = torch.float64
SMALL = ["--hidden", "16", "--batch", "16", "--eval-episodes", "1", "--diag-batch", "16", "--diag-iters", "3",
         "--diag-probes", "2", "--l2-states", "1"]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- the sampler


@pytest.mark.parametrize("d,k,per", [(5, 3, "element"), (5, 5, "element"), (17, 8, "batch"), (3, 7, "element"),
                                     (1, 4, "element")])
def test_directions_are_orthonormal_within_each_block(d, k, per):
    u = orthonormal_directions(64, d, k, gen(), per=per, dtype=D)
    assert u.shape == (64, d, k)
    for start in range(0, k, d):
        blk = u[:, :, start:start + d]
        gram = blk.transpose(1, 2) @ blk
        np.testing.assert_allclose(gram.numpy(), np.broadcast_to(np.eye(blk.shape[2]), gram.shape), atol=1e-6)
    if per == "batch":
        assert torch.equal(u[0], u[-1])
    else:
        assert not torch.equal(u[0], u[1])


def test_qr_sign_fix_makes_the_frame_unique():
    """With the sign fix, U is the Q of the QR with a positive diagonal R: U^T G is upper triangular
    with positive diagonal (for K <= d), which an unfixed QR does not guarantee."""
    g = gen(3)
    u = orthonormal_directions(32, 6, 4, g, dtype=D)
    G = torch.randn(32, 6, 4, generator=gen(3), dtype=D)
    r = u.transpose(1, 2) @ G
    assert torch.all(torch.diagonal(r, dim1=1, dim2=2) > 0)
    np.testing.assert_allclose(torch.tril(r, -1).numpy(), 0, atol=1e-10)


def test_iid_directions_are_unit_but_not_orthogonal():
    u = orthonormal_directions(200, 6, 4, gen(), kind="iid", dtype=D)
    np.testing.assert_allclose(u.norm(dim=1).numpy(), 1, atol=1e-12)
    gram = u.transpose(1, 2) @ u
    assert gram[:, 0, 1].abs().max() > 0.1


# --------------------------------------------------------------------------- the AMS identities


def quadratic(d, seed=0):
    g = gen(seed)
    m = torch.randn(d, d, generator=g, dtype=D)
    h = m + m.T
    b = torch.randn(d, generator=g, dtype=D)
    w = torch.randn(3, generator=g, dtype=D)

    def q(s, a):
        return 0.5 * ((a @ h) * a).sum(-1) + a @ b + s @ w

    return q, h


@pytest.mark.parametrize("d,k", [(6, 3), (6, 6), (4, 1)])
def test_antithetic_average_of_a_quadratic_is_exact(d, k):
    q, h = quadratic(d)
    s = torch.randn(20, 3, generator=gen(1), dtype=D)
    a = 0.3 * (torch.rand(20, d, generator=gen(2), dtype=D) * 2 - 1)
    rho = 0.2  # |a| + rho < 1: no clipping
    u = orthonormal_directions(20, d, k, gen(4), dtype=D)
    got = neighbourhood_mean(q, s, a, u, rho)
    quad = torch.einsum("bdk,de,bek->b", u, h, u)
    want = q(s, a) + rho ** 2 / (2 * k) * quad
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=1e-12)
    if k == d:  # the Laplacian term
        np.testing.assert_allclose(quad.numpy(), np.full(20, torch.trace(h).item()), atol=1e-10)


def test_centre_weight_mixes_the_point_value():
    q, _ = quadratic(3)
    s, a = torch.zeros(5, 3, dtype=D), torch.zeros(5, 3, dtype=D)
    u = orthonormal_directions(5, 3, 2, gen(), dtype=D)
    full = neighbourhood_mean(q, s, a, u, 0.3)
    mixed = neighbourhood_mean(q, s, a, u, 0.3, center_weight=0.25)
    np.testing.assert_allclose(mixed.numpy(), (0.25 * q(s, a) + 0.75 * full).numpy(), atol=1e-12)


def test_neighbours_are_clipped_after_the_shift():
    a = torch.tensor([[0.95, -0.99, 0.0]], dtype=D)
    u = orthonormal_directions(1, 3, 3, gen(), dtype=D)
    nb = neighbours(a, u, 0.5)
    assert nb.shape == (1, 6, 3)
    assert nb.min() >= -1 and nb.max() <= 1
    raw = torch.cat([a + 0.5 * u[0].T, a - 0.5 * u[0].T])
    np.testing.assert_allclose(nb[0].numpy(), raw.clamp(-1, 1).numpy())


def _batch(obs_dim=3, act_dim=2, n=32):
    g = gen(7)
    return {"obs": torch.randn(n, obs_dim, generator=g), "act": torch.rand(n, act_dim, generator=g) * 2 - 1,
            "rew": torch.randn(n, generator=g), "next_obs": torch.randn(n, obs_dim, generator=g),
            "done": (torch.rand(n, generator=g) < 0.2).float()}


@pytest.mark.parametrize("base", ["td3", "sac"])
def test_k1_rho0_is_the_plain_target(base):
    b = _batch()
    plain = Agent(3, 2, AgentConfig(hidden=16), base, seed=1)
    cfg = AgentConfig(hidden=16, ams_k=1, ams_rho=0.0, ams_td3_noise=True)
    ams = Agent(3, 2, cfg, f"ams-{base}", seed=1)
    y0 = plain.td_target(b, {"target": gen(5), "ams": gen(6)})
    y1 = ams.td_target(b, {"target": gen(5), "ams": gen(9)})
    assert torch.equal(y0, y1)
    if base == "td3":  # pure AMS (noise off) with K = 1, rho = 0: the noiseless point target
        ams.cfg = AgentConfig(hidden=16, ams_k=1, ams_rho=0.0)
        y2 = ams.td_target(b, {"target": gen(5), "ams": gen(6)})
        with torch.no_grad():
            v = plain.critic_targ.q_min(b["next_obs"], plain.actor_targ(b["next_obs"]))
        torch.testing.assert_close(y2, b["rew"] + 0.99 * (1 - b["done"]) * v, rtol=0, atol=0)


def _count_target_rows(agent, monkeypatch) -> list:
    """The batch sizes the target critic is called on, appended as it is called."""
    calls = []
    orig = agent.critic_targ.q_min

    def spy(s, a):
        calls.append(s.shape[0])
        return orig(s, a)

    monkeypatch.setattr(agent.critic_targ, "q_min", spy)
    return calls


def test_ams_target_differs_and_is_one_batched_forward(monkeypatch):
    b = _batch(n=8)
    agent = Agent(3, 2, AgentConfig(hidden=16, ams_k=4, ams_rho=0.15), "ams-td3", seed=0)
    calls = _count_target_rows(agent, monkeypatch)
    agent.td_target(b, {"target": gen(), "ams": gen()})
    assert calls == [8 * 2 * 4]


def test_k_above_d_is_capped_in_one_dimension_with_a_warning(monkeypatch, caplog):
    """In 1-D every orthogonal direction is +-1, so K > 1 only repeats the pair a' +- rho: K is capped at 1 (the
    same target from 2 neighbours instead of 2K) with one warning line; K > d >= 2 is kept (independent
    orthonormal blocks give distinct neighbours), and so is the iid kind."""
    import logging

    from icmlkit.lib.train_control.ams import directions_used

    assert directions_used(8, 1) == 1 and directions_used(8, 2) == 8 and directions_used(8, 1, "iid") == 8
    u = orthonormal_directions(5, 1, 8, gen(3), dtype=D)
    assert torch.equal(u.abs(), torch.ones(5, 1, 8, dtype=D))  # the waste: every antithetic pair is a' +- rho
    b = _batch(act_dim=1, n=8)
    agent = Agent(3, 1, AgentConfig(hidden=16, ams_k=8, ams_rho=0.15), "ams-td3", seed=0)
    assert agent.ams_k == 1 and len(agent.k_notes()) == 1 and "--ams-k 8" in agent.k_notes()[0]
    orig = agent.critic_targ.q_min
    calls = _count_target_rows(agent, monkeypatch)
    y = agent.td_target(b, {"target": gen(), "ams": gen()})
    assert calls == [8 * 2]
    with torch.no_grad():  # the uncapped 2K = 16 neighbours give the same value
        a2 = agent.actor_targ(b["next_obs"])
        full = neighbourhood_mean(orig, b["next_obs"], a2, torch.ones(8, 1, 8), 0.15)
    torch.testing.assert_close(y, b["rew"] + 0.99 * (1 - b["done"]) * full, rtol=0, atol=1e-6)
    assert Agent(3, 2, AgentConfig(hidden=16, ams_k=8), "ams-td3", seed=0).k_notes() == []
    assert Agent(3, 1, AgentConfig(hidden=16, ams_k=8), "td3", seed=0).k_notes() == []  # no AMS, no note
    nb = Agent(3, 1, AgentConfig(hidden=16, lambda_nb=0.5, nb_k=4), "td3", seed=0)
    assert nb.nb_k == 1 and len(nb.k_notes()) == 1 and "--nb-k 4" in nb.k_notes()[0]


# --------------------------------------------------------------------------- diagnostics


@pytest.mark.parametrize("h", [0.0, 0.05])
def test_hvp_power_iteration_matches_the_exact_spectral_norm(h):
    d = 5
    qm, _ = torch.linalg.qr(torch.randn(d, d, generator=gen(2), dtype=D))
    eig = torch.tensor([3.0, -2.0, 1.0, 0.5, -0.1], dtype=D)
    hm = qm @ torch.diag(eig) @ qm.T

    def q(s, a):
        return 0.5 * ((a @ hm) * a).sum(-1) + s.sum(-1)

    s, a = torch.randn(4, 2, dtype=D), torch.randn(4, d, dtype=D)
    lam = hessian_spectral_norm(q, s, a, iters=200, gen=gen(), h=h)
    np.testing.assert_allclose(lam.numpy(), 3.0, rtol=1e-6)
    tr = hessian_trace(q, s, a, probes=400, gen=gen(), h=h)
    assert abs(float(tr.mean()) - float(eig.sum())) < 0.5  # Hutchinson: unbiased, variance 2 sum_{i!=j} H_ij^2


def test_hutchinson_is_exact_for_a_diagonal_hessian():
    hm = torch.diag(torch.tensor([1.0, -3.0, 2.5], dtype=D))

    def q(s, a):
        return 0.5 * ((a @ hm) * a).sum(-1)

    tr = hessian_trace(q, torch.zeros(3, 1, dtype=D), torch.randn(3, 3, dtype=D), probes=3, gen=gen())
    np.testing.assert_allclose(tr.numpy(), 0.5, atol=1e-12)


def test_actor_jacobian_power_iteration_is_the_top_singular_value():
    w = torch.randn(4, 7, generator=gen(1), dtype=D)
    s = torch.randn(6, 7, dtype=D)
    sig = actor_jacobian_norm(lambda x: x @ w.T, s, iters=100, gen=gen())
    np.testing.assert_allclose(sig.numpy(), torch.linalg.matrix_norm(w, 2).item(), rtol=1e-8)


def _cubic_critic(hd, c):
    """Q(s, a) = w(s) [a^T diag(hd) a / 2 + sum_i c_i a_i^3 / 6], w(s) = 1 + s_0^2: the action Hessian at
    (s, a) is w(s) diag(hd + c a), which a central-difference HVP reproduces exactly (a cubic)."""
    def q(s, a):
        return (1 + s[:, 0] ** 2) * (0.5 * (hd * a * a).sum(-1) + (c * a ** 3).sum(-1) / 6)

    def hess_diag(s, a):
        return (1 + s[:, 0:1] ** 2) * (hd + c * a)

    return q, hess_diag


@pytest.mark.parametrize("h", [0.0, 0.05])
def test_critic_diagnostics_measure_l3_at_the_dataset_action_at_pi_s_and_at_a_prime(h):
    from icmlkit.lib.train_control.diagnostics import critic_diagnostics

    obs_dim, act_dim = 3, 4
    b = {k: v.double() for k, v in _batch(obs_dim, act_dim, n=24).items()}
    agent = Agent(obs_dim, act_dim, AgentConfig(hidden=16), "td3", seed=0)
    for m in (agent.actor, agent.actor_targ, agent.critic, agent.critic_targ):
        m.double()
    hd, c = torch.tensor([3.0, 1.0, 0.5, -0.2], dtype=D), torch.tensor([0.5, 0.2, 0.0, 0.3], dtype=D)
    q, hess_diag = _cubic_critic(hd, c)
    w1, w2 = torch.randn(obs_dim, act_dim, generator=gen(3), dtype=D), torch.randn(obs_dim, act_dim, generator=gen(4), dtype=D)
    agent.critic.q_first = q
    agent.actor.mean_action = lambda s: torch.tanh(s @ w1)  # pi(s)
    agent.actor_targ.mean_action = lambda s: torch.tanh(s @ w2)  # pi_targ(s'): a'
    d = critic_diagnostics(agent, b, {"diag": gen()}, iters=200, probes=3, h=h)
    at = {"": (b["obs"], b["act"]), "_pi": (b["obs"], torch.tanh(b["obs"] @ w1)),
          "_aprime": (b["next_obs"], torch.tanh(b["next_obs"] @ w2))}
    for tag, (s, a) in at.items():
        hdiag = hess_diag(s, a)
        assert d[f"l3{tag}_spectral"] == pytest.approx(float(hdiag.abs().max(-1).values.mean()), rel=1e-6), tag
        assert d[f"l3{tag}_trace"] == pytest.approx(float(hdiag.sum(-1).mean()), rel=1e-6, abs=1e-9), tag
        assert d[f"l3{tag}_trace_abs"] == pytest.approx(float(hdiag.sum(-1).abs().mean()), rel=1e-6), tag
    assert len({round(d[f"l3{t}_spectral"], 6) for t in at}) == 3  # three different places
    assert d["l4_pi"] >= 0 and math.isfinite(d["l4_pi"])


def test_td3_noise_norm_matches_closed_forms():
    from icmlkit.lib.train_control.ams import td3_noise_norm

    def pdf(x):
        return math.exp(-x * x / 2) / math.sqrt(2 * math.pi)

    # d = 1: E|clip(sigma z, -c, c)| = 2 sigma (phi(0) - phi(c / sigma)) + 2 c (1 - Phi(c / sigma))
    exact1 = 2 * 0.2 * (pdf(0) - pdf(2.5)) + 2 * 0.5 * 0.5 * math.erfc(2.5 / math.sqrt(2))
    assert td3_noise_norm(1, 0.2, 0.5) == pytest.approx(exact1, abs=1e-3)
    # no clipping: sigma * chi_d mean = sigma sqrt(2) Gamma((d + 1) / 2) / Gamma(d / 2)
    chi = 0.2 * math.sqrt(2) * math.exp(math.lgamma(9) - math.lgamma(8.5))
    assert td3_noise_norm(17, 0.2, 100.0) == pytest.approx(chi, abs=1e-3)
    m = td3_noise_norm(17)  # Humanoid's d: the clip makes it a little below sigma sqrt(d) = 0.82
    assert 0.79 < m < chi and td3_noise_norm(17) == m  # a fixed generator: the same value every call


# --------------------------------------------------------------------------- environments


@pytest.mark.parametrize("spec", ["Pendulum-v1", "Hopper-v5", "dmc:lqr-6"])
def test_set_state_round_trip(spec):
    env = make_env(spec)
    env.reset(11)
    for _ in range(3):
        env.step(np.full(env.act_dim, 0.3))
    st = env.get_sim_state()
    a = np.linspace(-0.9, 0.9, env.act_dim)
    o1 = env.step(a)[0]
    for _ in range(5):  # move far away, then restore
        env.step(-a)
    env.set_sim_state(st)
    o2 = env.step(a)[0]
    np.testing.assert_array_equal(o1, o2)


def test_actions_are_rescaled_to_the_bounds():
    env = make_env("Pendulum-v1")
    np.testing.assert_allclose(env.scale([-1.0]), [-2.0])
    np.testing.assert_allclose(env.scale([1.0]), [2.0])
    np.testing.assert_allclose(env.scale([5.0]), [2.0])


def test_lqr_optimum_beats_zero_control():
    from icmlkit.lib.train_control.train import evaluate_policy

    env = make_env("dmc:lqr-6")  # 300 steps: shorter horizons favour zero control (the optimum is infinite-horizon)
    ev = evaluate_policy(env, lambda o: np.zeros(env.act_dim), 2, seed=0, optimal=True)
    assert ev["lqr_optimal_fraction"] < 1.0 and ev["lqr_normalised"] == pytest.approx(0.0, abs=1e-12)
    ev = evaluate_policy(env, env.optimal_action, 2, seed=0, optimal=True)
    assert ev["lqr_optimal_fraction"] == pytest.approx(1.0) and ev["lqr_normalised"] == pytest.approx(1.0)


def test_bad_env_ids():
    with pytest.raises(UsageError, match="Pendulum-v1"):
        make_env("Pendulm-v1")
    with pytest.raises(UsageError, match="Discrete"):
        make_env("CartPole-v1")
    with pytest.raises(UsageError, match="dmc:dog-run"):
        make_env("dmc:dog-rn")


def test_missing_dm_control_is_an_environment_problem(monkeypatch):
    monkeypatch.setitem(sys.modules, "dm_control", None)
    with pytest.raises(EnvironmentProblem, match=r"icmlkit\[train-control\]"):
        make_env("dmc:lqr-6")


# --------------------------------------------------------------------------- command line


def _train(tmp_path, capsys, algo, steps=300, name="run", extra=()):
    out = tmp_path / name
    code, stdout, err = run_inprocess(TOOL, ["train", "Pendulum-v1", "--algo", algo, "--total-steps", str(steps),
                                             "--learning-starts", "150", "--eval-every", str(steps),
                                             "--diag-every", "100", *SMALL, *extra, "-o", str(out), "--json"],
                                      capsys)
    assert code == 0, err
    return out, json.loads(stdout)


@pytest.mark.parametrize("algo", ["td3", "ams-td3", "sac", "ams-sac"])
def test_tiny_training_run_writes_a_run_directory(algo, tmp_path, capsys):
    out, s = _train(tmp_path, capsys, algo, steps=250)
    for k in ("env", "algo", "seed", "steps", "return_mean", "return_std", "l1", "l2", "l3_spectral", "l3_trace",
              "l4", "pathway_gain", "steps_per_s", "diverged"):
        assert k in s
    assert s["algo"] == algo and s["steps"] == 250 and s["diverged"] is False
    assert all(math.isfinite(s[k]) for k in ("l1", "l2", "l3_spectral", "l4", "pathway_gain"))
    assert s["l2"] == pytest.approx(0.3, rel=1e-2)  # Pendulum: d thdot / d a = 3 / (m l^2) * 2 * dt
    names = {p.name for p in out.iterdir()}
    assert {"actor.safetensors", "critic.safetensors", "config.json", "eval.csv", "diagnostics.csv",
            "episodes.csv", "summary.json", "manifest.json"} <= names
    assert not (tmp_path / f"{out.name}.ckpt.pt").exists()
    code, stdout, err = run_inprocess(TOOL, ["eval", str(out), "Pendulum-v1", "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    assert json.loads(stdout)["episodes"] == 1


def test_resume_gives_the_same_bytes(tmp_path, interrupting_checkpointer):
    from icmlkit.lib.train_control.train import train, write_run
    from conftest import Interrupted

    cfg = TrainConfig(algo="ams-td3", total_steps=260, learning_starts=100, hidden=16, batch=16, eval_every=130,
                      eval_episodes=1, diag_every=50, diag_batch=16, diag_iters=3, diag_probes=2, l2_states=1)
    ref = tmp_path / "ref"
    ref.mkdir()
    write_run(ref, train("Pendulum-v1", cfg, seed=3))
    ck = tmp_path / "ck.pt"
    with pytest.raises(Interrupted):  # stops after step 170: mid-episode (episodes last 200 steps)
        train("Pendulum-v1", cfg, seed=3, checkpointer=interrupting_checkpointer(ck, every=170))
    res = train("Pendulum-v1", cfg, seed=3, checkpointer=Checkpointer(ck, every=170, resume=True))
    assert res.summary["resumed_from"] == 170
    got = tmp_path / "got"
    got.mkdir()
    write_run(got, res)
    for name in ("actor.safetensors", "critic.safetensors", "eval.csv", "diagnostics.csv", "episodes.csv"):
        assert (ref / name).read_bytes() == (got / name).read_bytes(), name
    with pytest.raises(UsageError, match="other settings"):
        train("Pendulum-v1", cfg, seed=4, checkpointer=Checkpointer(ck, every=170, resume=True))


# --------------------------------------------------------------------------- geometric action priors


def test_symmetric_prior_shares_and_mirrors_actuators():
    from icmlkit.lib.train_control.priors import parse_pairs, symmetric_map

    m = symmetric_map(5, parse_pairs("0:2,1:-3", 5))
    assert m.shape == (5, 3)  # latent: actuators 0, 1, 4
    a = m @ np.array([0.3, -0.5, 0.9])
    assert np.allclose(a, [0.3, -0.5, 0.3, 0.5, 0.9])
    for bad, text in (("0:0", "two different"), ("0:2,2:3", "two pairs"), ("0-2", "i:j"), ("0:7", "[0, 5)"),
                      ("", "needs --prior-pairs")):
        with pytest.raises(UsageError, match=re.escape(text)):
            parse_pairs(bad, 5)


def test_lowrank_prior_is_orthonormal_and_pca_recovers_the_action_subspace():
    from icmlkit.lib.train_control.priors import lowrank_map

    m, c = lowrank_map(7, 3, seed=0)
    assert np.allclose(m.T @ m, np.eye(3), atol=1e-12) and not c.any()
    rng = np.random.default_rng(0)
    basis, _ = np.linalg.qr(rng.standard_normal((7, 2)))
    acts = 0.1 + 0.5 * rng.uniform(-1, 1, (300, 2)) @ basis.T
    m2, c2 = lowrank_map(7, 2, seed=0, actions=acts)
    assert np.abs(m2 @ m2.T @ basis - basis).max() < 1e-10  # the same plane
    assert np.allclose(c2, acts.mean(axis=0))


@pytest.mark.parametrize("prior", [["--action-prior", "symmetric", "--prior-pairs", "0:1,2:-3"],
                                   ["--action-prior", "lowrank", "--prior-rank", "2"]])
def test_training_with_an_action_prior_acts_in_the_latent_space(prior, tmp_path, capsys):
    pytest.importorskip("dm_control")
    out = tmp_path / "run"
    code, stdout, err = run_inprocess(TOOL, ["train", "dmc:lqr-6", "--algo", "ams-td3", "--total-steps", "120",
                                             "--learning-starts", "60", "--eval-every", "120", "--diag-every", "30",
                                             "--max-episode-steps", "40", *SMALL, *prior, "-o", str(out), "--json"],
                                      capsys)
    assert code == 0, err
    info = json.loads((out / "config.json").read_text())["env_info"]
    assert info["env_act_dim"] == 6 and info["act_dim"] == (4 if "symmetric" in prior else 2)
    m = np.asarray(info["action_prior"]["matrix"])
    assert m.shape == (6, info["act_dim"])
    code, stdout, err = run_inprocess(TOOL, ["eval", str(out), "dmc:lqr-6", "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    assert json.loads(stdout)["lqr_optimal_fraction"] is not None
    code, stdout, err = run_inprocess(TOOL, ["collect", "dmc:lqr-6", "--actor", str(out), "--steps", "20",
                                             "-o", str(tmp_path / "b.npz"), "--json"], capsys)
    assert code == 0, err
    assert json.loads(stdout)["act_dim"] == info["act_dim"]


def test_bad_action_prior_options(tmp_path, capsys):
    pytest.importorskip("dm_control")
    for argv, text in ((["--action-prior", "symmetric"], "--prior-pairs"),
                       (["--action-prior", "lowrank", "--prior-rank", "9"], "--prior-rank"),
                       (["--action-prior", "lowrank", "--prior-basis", str(tmp_path / "none.npz")], "none.npz")):
        code, _, err = run_inprocess(TOOL, ["train", "dmc:lqr-6", "--total-steps", "10", *argv,
                                            "-o", str(tmp_path / "r")], capsys)
        assert code in (1, 2) and text in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "r").exists() and not (tmp_path / "r.partial").exists()


# --------------------------------------------------------------------------- torchrun (2 processes, gloo)

TORCHRUN_OPTS = ["train", "Pendulum-v1", "--total-steps", "300", "--learning-starts", "100", "--hidden", "16",
                 "--batch", "16", "--eval-every", "150", "--eval-episodes", "1", "--diag-every", "100",
                 "--diag-batch", "16", "--diag-iters", "3", "--diag-probes", "2", "--l2-states", "1",
                 "--device", "cpu", "--checkpoint-every", "0", "--json", "--no-progress"]


def _weights(run_dir: Path) -> dict:
    from safetensors.numpy import load_file

    return {f"{n}.{k}": v for n in ("actor", "critic") for k, v in load_file(run_dir / f"{n}.safetensors").items()}


@pytest.mark.parametrize("algo,extra", [("ams-td3", []), ("ams-sac", ["--lambda-nb", "0.5"])])
def test_torchrun_two_processes_match_one(algo, extra, tmp_path):
    """`train` under torchrun, 2 processes, gloo: with --rank-envs replicated both ranks hold one process's
    buffer and take half of each global batch of 16 with the gradients averaged, so the job ends with the
    weights of one process up to the float-sum order (200 updates: <= 1e-5; distinct data moves them by
    ~1e-2, so the check can fail). With distinct environments the ranks stay in sync (spread 0)."""
    opts = [*TORCHRUN_OPTS, "--algo", algo, *extra]
    one = run_tool(TOOL, *opts, "-o", tmp_path / "one")
    assert one.returncode == 0, one.stderr
    env = {**os.environ, "ICMLKIT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}

    def torchrun(name, *more):
        r = subprocess.run([str(BIN / "torchrun"), "--nproc_per_node", "2", "--standalone", exe(TOOL), *opts, *more,
                            "-o", str(tmp_path / name)], capture_output=True, text=True, timeout=300, env=env,
                           cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout)

    two = torchrun("two", "--rank-envs", "replicated")
    assert two["world_size"] == 2 and two["env_steps"] == 600 and two["rank_param_spread"] == 0.0
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    assert a.keys() == b.keys()
    diff = max(float(np.abs(a[k] - b[k]).max()) for k in a)
    assert diff <= 1e-5, diff
    assert two["return_mean"] == pytest.approx(json.loads(one.stdout)["return_mean"], abs=1e-2)
    man = json.loads((tmp_path / "two" / "manifest.json").read_text())
    assert man["distributed"] == {"world_size": 2, "backend": "gloo"}
    eps = (tmp_path / "two" / "episodes.csv").read_text().splitlines()
    assert eps[0] == "step,rank,episode,return,length" and len(eps) == 3  # one 200-step episode per rank
    if algo == "ams-td3":
        dis = torchrun("dis")
        assert dis["rank_param_spread"] == 0.0
        c = _weights(tmp_path / "dis")
        assert max(float(np.abs(a[k] - c[k]).max()) for k in a) > 1e-4  # rank 1's own data changed the updates
        rows = [line.split(",") for line in (tmp_path / "dis" / "episodes.csv").read_text().splitlines()[1:]]
        assert [r[1] for r in rows] == ["0", "1"] and rows[0][3] != rows[1][3]
        assert not list(tmp_path.glob("*.partial")) and not list(tmp_path.glob("*.ckpt.pt"))


def _two_rank_worker(rank: int, world: int, init: str, out: str) -> None:
    """One of two gloo processes: an uninterrupted run, an interrupted one, its --resume, an uneven batch."""
    import torch.distributed as td

    from conftest import Interrupted, _interrupting_checkpointer
    from icmlkit.lib.train_control.train import train, write_run
    from icmlkit.lib.core.runtime import Dist

    torch.set_num_threads(1)
    td.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    try:
        dist = Dist(rank, world, "gloo")
        cfg = TrainConfig(algo="ams-sac", total_steps=260, learning_starts=100, hidden=16, batch=16,
                          eval_every=130, eval_episodes=1, diag_every=50, diag_batch=16, diag_iters=3,
                          diag_probes=2, l2_states=1)
        out = Path(out)
        ref = train("Pendulum-v1", cfg, seed=3, dist=dist)
        ck = out / "ck.pt"
        try:  # stops after step 170 on both ranks (mid-episode)
            train("Pendulum-v1", cfg, seed=3, dist=dist,
                  checkpointer=_interrupting_checkpointer()(ck, every=170, is_main=rank == 0))
            raise AssertionError("not interrupted")
        except Interrupted:
            td.barrier()  # rank 0 has written the checkpoint (rank 1's save returns at once)
        res = train("Pendulum-v1", cfg, seed=3, dist=dist, checkpointer=Checkpointer(ck, every=170, resume=True))
        if rank == 0:
            assert ref.summary["rank_param_spread"] == 0.0 and res.summary["resumed_from"] == 170
            for name, r in (("ref", ref), ("got", res)):
                (out / name).mkdir()
                write_run(out / name, r)
        try:
            train("Pendulum-v1", TrainConfig(total_steps=10, batch=15, buffer_size=100), dist=dist)
            raise AssertionError("an uneven batch was accepted")
        except UsageError as exc:
            assert "split evenly" in str(exc)
        td.barrier()  # neither rank tears its gloo pairs down while the other still uses them (a SIGABRT in CI)
    finally:
        td.destroy_process_group()


def test_torchrun_resume_gives_the_same_bytes(tmp_path):
    """Two gloo processes (torch.multiprocessing): a run interrupted after a checkpoint and resumed writes
    the actor, critic and CSV bytes of the uninterrupted 2-process run (every rank's buffer, episode and
    exploration stream come back from rank 0's checkpoint)."""
    import torch.multiprocessing as mp

    mp.spawn(_two_rank_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    for name in ("actor.safetensors", "critic.safetensors", "eval.csv", "diagnostics.csv", "episodes.csv"):
        assert (tmp_path / "ref" / name).read_bytes() == (tmp_path / "got" / name).read_bytes(), name
    rows = (tmp_path / "ref" / "episodes.csv").read_text().splitlines()[1:]
    assert [r.split(",")[1] for r in rows] == ["0", "1"]


@pytest.mark.parametrize("algo", ["td3", "ams-td3"])
def test_2k_step_pendulum_smoke_run(algo, tmp_path):
    r = run_tool(TOOL, "train", "Pendulum-v1", "--algo", algo, "--total-steps", "2000", "--learning-starts", "1000",
                 "--hidden", "64", "--batch", "64", "--eval-every", "1000", "--diag-every", "500",
                 "-o", tmp_path / "r", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["steps"] == 2000 and not s["diverged"] and math.isfinite(s["return_mean"])


def test_subprocess_help_bad_flag_and_bad_env(tmp_path):
    assert run_tool(TOOL, "train", "--help").returncode == 0
    assert run_tool(TOOL, "train", "--no-such").returncode == 2
    r = run_tool(TOOL, "train", "Pendulm-v1", "-o", tmp_path / "r")
    assert r.returncode == 2 and "Pendulum-v1" in r.stderr and r.stderr.startswith("Error:")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv,code,text", [
    (["train", "CartPole-v1"], 2, "Discrete"),
    (["train", "Pendulum-v1", "--ams-k", "0"], 2, "--ams-k"),
    (["train", "Pendulum-v1", "--algo", "ppo"], 2, "--algo"),
    (["train", "dmc:dog-rn"], 2, "dmc:dog-run"),
    (["train", "Pendulum-v1", "--batch", "64", "--buffer-size", "10"], 2, "--buffer-size"),
])
def test_bad_inputs_leave_no_run_directory(argv, code, text, tmp_path, capsys):
    got, _, err = run_inprocess(TOOL, [*argv, "-o", str(tmp_path / "r")], capsys)
    assert got == code and text in err, err
    assert list(tmp_path.iterdir()) == []


def test_collect_and_critic_study(tmp_path, capsys):
    buf = tmp_path / "b.npz"
    code, out, err = run_inprocess(TOOL, ["collect", "dmc:lqr-6", "--steps", "300", "-o", str(buf), "--json"], capsys)
    assert code == 0, err
    z = np.load(buf)
    assert z["obs"].shape == (300, 12) and z["act"].shape == (300, 6) and np.abs(z["act"]).max() <= 1
    code, out, err = run_inprocess(TOOL, ["critic-study", str(buf), "--updates", "20", "--hidden", "16", "--batch",
                                          "16", "--diag-iters", "3", "--diag-probes", "2", "-o",
                                          str(tmp_path / "s.csv"), "--json"], capsys)
    assert code == 0, err
    s = json.loads(out)
    for k in ("point_l3_spectral", "ams_l3_spectral", "reduction_l4", "td_loss_not_worse", "update_time_ratio"):
        assert k in s
    assert s["transitions"] == 300 and s["validation"] == 30


# --------------------------------------------------------------------------- malformed inputs


def _valid_run(base: Path, spec: str = "Pendulum-v1") -> dict:
    """A run directory of an untrained agent on ``spec`` (written by the library, no training)."""
    from icmlkit.lib.train_control.train import TrainResult, write_run

    cfg = TrainConfig(hidden=8)
    env = make_env(spec)
    agent = Agent(env.obs_dim, env.act_dim, cfg, "td3", 0)
    rc = {"format": "icmlkit.control.run/1", "env": spec, "algo": "td3", "seed": 0,
          "config": __import__("dataclasses").asdict(cfg), "env_info": env.info()}
    run = base / "goodrun"
    run.mkdir()
    write_run(run, TrainResult(agent, rc, [], [], [], {}))
    return {"run": run}


def _buffer(base: Path) -> dict:
    p = base / "good.npz"
    n = 20
    np.savez(p, obs=np.zeros((n, 3)), act=np.zeros((n, 1)), rew=np.zeros(n), next_obs=np.zeros((n, 3)),
             done=np.zeros(n))
    return {"buf": p}


CASES = [
    FuzzCase("eval", ["eval", "{bad}", "Pendulum-v1", "-o", "{out}/r.csv"], label="run"),
    FuzzCase("diagnose", ["diagnose", "{bad}", "-o", "{out}/d.json"], label="run"),
    FuzzCase("collect", ["collect", "Pendulum-v1", "--steps", "5", "--actor", "{bad}", "-o", "{out}/b.npz"],
             label="actor"),
    FuzzCase("critic-study", ["critic-study", "{bad}", "--updates", "2", "-o", "{out}/s.csv"], suffix=".npz",
             kinds=("missing", "empty", "binary", "folder", "garbage_npz")),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_malformed_inputs(case, tmp_path, capsys):
    check_malformed(TOOL, case, tmp_path, capsys)


# issue 59 (tests/test_mismatch_sweep.py): a run acts only in the environment it was trained on; a run on
# dmc:lqr-1 (obs 2, action 1) given MountainCarContinuous-v0 (the same dims) is refused, not evaluated
_LQR1 = lambda base: _valid_run(base, "dmc:lqr-1")  # noqa: E731
_ENV_NAMES = ("goodrun", "trained on dmc:lqr-1", "not MountainCarContinuous-v0")
MISMATCH = [
    MismatchCase("eval", ["eval", "{run}", "MountainCarContinuous-v0", "--episodes", "1", "-o", "{out}/r.csv"],
                 _LQR1, _ENV_NAMES, "env"),
    MismatchCase("diagnose", ["diagnose", "{run}", "--env", "MountainCarContinuous-v0", "-o", "{out}/d.json"],
                 _LQR1, _ENV_NAMES, "env"),
    MismatchCase("collect", ["collect", "MountainCarContinuous-v0", "--actor", "{run}", "--steps", "5", "-o",
                             "{out}/b.npz"], _LQR1, _ENV_NAMES, "actor-env"),
    MismatchCase("eval", ["eval", "{run}", "MountainCarContinuous-v0", "--episodes", "1"], _valid_run,
                 ("goodrun", "trained on Pendulum-v1", "not MountainCarContinuous-v0"), "env-dims"),
]


@pytest.mark.parametrize("target,content", [
    ("config.json", b'{"format": "icmlkit.control.run/1", "env": '),
    ("config.json", b'{"format": "other"}'),
    ("config.json", b'{"format": "icmlkit.control.run/1", "env": "Pendulum-v1", "algo": "td3", "config": 3}'),
    ("actor.safetensors", b"\x00\x01garbage"),
    ("critic.safetensors", b""),
])
def test_corrupt_run_directory(target, content, tmp_path, capsys):
    run = _valid_run(tmp_path)["run"]
    (run / target).write_bytes(content)
    out = tmp_path / "r.csv"
    code, _, err = run_inprocess(TOOL, ["eval", str(run), "Pendulum-v1", "-o", str(out)], capsys)
    assert code == 1 and err.startswith("Error:") and target in err and "rerun with --debug" not in err, err
    assert not out.exists()


def test_wrong_shaped_actor_and_mismatched_env(tmp_path, capsys):
    from icmlkit.lib.core.io import write_safetensors

    run = _valid_run(tmp_path)["run"]
    code, _, err = run_inprocess(TOOL, ["eval", str(run), "dmc:lqr-6"], capsys)
    assert code == 2 and "trained on Pendulum-v1, not dmc:lqr-6" in err
    write_safetensors(run / "actor.safetensors", {"net.0.weight": np.zeros((2, 2), np.float32)},
                      {"format": "icmlkit.control.actor/1"})
    code, _, err = run_inprocess(TOOL, ["eval", str(run), "Pendulum-v1"], capsys)
    assert code == 1 and "actor.safetensors" in err


@pytest.mark.parametrize("arrays,text", [
    ({"obs": np.zeros((5, 3)), "act": np.zeros((5, 1)), "rew": np.zeros(4), "next_obs": np.zeros((5, 3)),
      "done": np.zeros(5)}, "'rew'"),
    ({"obs": np.zeros((5, 3)), "act": np.full((5, 1), 3.0), "rew": np.zeros(5), "next_obs": np.zeros((5, 3)),
      "done": np.zeros(5)}, "[-1, 1]"),
    ({"obs": np.full((5, 3), np.nan), "act": np.zeros((5, 1)), "rew": np.zeros(5), "next_obs": np.zeros((5, 3)),
      "done": np.zeros(5)}, "NaN"),
    ({"obs": np.zeros((5, 3))}, "missing arrays"),
])
def test_wrong_shaped_replay_npz(arrays, text, tmp_path, capsys):
    p = tmp_path / "b.npz"
    np.savez(p, **arrays)
    code, _, err = run_inprocess(TOOL, ["critic-study", str(p), "--updates", "2"], capsys)
    assert code == 1 and text in err and str(p) in err, err


@pytest.mark.parametrize("kw", [dict(critic_constraint="spectral"), dict(critic_constraint="gp"),
                                dict(lambda_nb=0.5, nb_k=2), dict(ams_center_weight=0.5, ams_resample="batch"),
                                dict(ams_directions="iid", ams_k=20)])
@pytest.mark.parametrize("algo", ["ams-td3", "ams-sac"])
def test_reconstructed_options_update_finitely(kw, algo):
    agent = Agent(3, 2, AgentConfig(hidden=16, **kw), algo, seed=0)
    gens = {k: gen(i) for i, k in enumerate(("target", "ams", "actor"))}
    for _ in range(3):
        info = agent.update(_batch(), gens)
    assert math.isfinite(info["critic_loss"]) and agent.updates == 3
    state = agent.state_dict()
    clone = Agent(3, 2, AgentConfig(hidden=16, **kw), algo, seed=5)
    clone.load_state_dict(state)
    b = _batch()
    torch.testing.assert_close(clone.critic(b["obs"], b["act"])[0], agent.critic(b["obs"], b["act"])[0])
