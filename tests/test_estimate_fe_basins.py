"""estimate-fe basins (issue 57): torsion basins of two sample sets, the flagged one-basin reference,
basin free energies, the flip, alanine dipeptide's (phi, psi) basins and the umbrella windows."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import REPO
from icmlkit.lib.core.errors import InputError
from icmlkit.lib.estimate_fe import basins as B
from icmlkit.lib.estimate_fe.mm import place_atom

FREESOLV = REPO.parent / "shared" / "data" / "freesolv" / "amber.tar.gz"
needs_freesolv = pytest.mark.skipif(not FREESOLV.exists(), reason="FreeSolv not present in ../shared/data/freesolv")

# Cl-CH=CH-Cl: atoms 0 Cl, 1 C, 2 C, 3 Cl, 4 H (on 1), 5 H (on 2); the C=C bond 1-2 is planar
DCE = SimpleNamespace(name="toy-dce", z=np.array([17, 6, 6, 17, 1, 1]), bonds=[(0, 1), (1, 2), (2, 3), (1, 4), (2, 5)])


def dce_frames(theta_deg) -> np.ndarray:
    """Frames of the toy molecule with the Cl-C=C-Cl dihedral ``theta_deg`` (one per value)."""
    out = []
    for t in np.atleast_1d(theta_deg):
        c1, c2 = np.zeros(3), np.array([1.33, 0.0, 0.0])
        cl1 = np.array([-0.9, 1.45, 0.0])
        cl2 = place_atom(cl1, c1, c2, 1.73, 122.0, t)
        h1 = c1 + (c1 - cl1) / np.linalg.norm(c1 - cl1) * 1.08
        h2 = place_atom(cl1, c1, c2, 1.08, 120.0, t + 180.0)
        out.append(np.stack([cl1, c1, c2, cl2, h1, h2]))
    return np.array(out)


def two_basin(n, p_trans, seed):
    """Dihedrals from a two-basin density: von Mises around 0 (cis) and 180 (trans), weight p_trans."""
    g = np.random.default_rng(seed)
    trans = g.random(n) < p_trans
    return np.degrees(np.where(trans, np.pi, 0.0) + g.vonmises(0.0, 30.0, n))


def test_torsions_and_the_dihedral_convention():
    ts = B.torsions(DCE)
    assert len(ts) == 1 and ts[0]["atoms"] == (0, 1, 2, 3) and ts[0]["kind"] == "planar"
    th = np.array([0.0, 45.0, -60.0, 120.0, 179.0])
    assert np.allclose(B.dihedrals(dce_frames(th), (0, 1, 2, 3)), th, atol=1e-6)
    # a chain of four heavy atoms is a rotor with six sectors; hydrogens never make a torsion
    butane = SimpleNamespace(z=np.array([6, 6, 6, 6, 1]), bonds=[(0, 1), (1, 2), (2, 3), (3, 4)])
    assert [(t["atoms"], t["kind"]) for t in B.torsions(butane)] == [((0, 1, 2, 3), "rotor")]
    ring = SimpleNamespace(z=np.array([6, 6, 6, 6]), bonds=[(0, 1), (1, 2), (2, 3), (3, 0)])
    assert B.torsions(ring) == []


def test_basin_index_sectors_and_planar():
    assert B.basin_index(np.array([0.0, 89.9, 90.0, -179.0]), "planar").tolist() == [0, 0, 1, 1]
    got = B.basin_index(np.array([0.0, 29.0, 60.0, 120.0, 179.0, -179.0, -120.0, -60.0, -31.0]), "rotor")
    assert [B.SECTORS[k] for k in got] == ["0", "0", "60", "120", "180", "180", "-120", "-60", "-60"]


def test_basin_check_flags_a_one_basin_sample_set():
    """A two-basin target (30 % trans) against a set that never leaves cis (the (Z)-dichloroethylene case):
    flagged, trans missing; two independent two-basin sets agree."""
    ref_one = dce_frames(two_basin(400, 0.0, 1))
    model = dce_frames(two_basin(400, 0.3, 2))
    other = dce_frames(two_basin(400, 0.3, 3))
    c = B.basin_check(DCE, ref_one, model)
    row = c["torsions"][0]
    assert c["mismatch"] and row["flag"] and row["missing"] == ["trans"]
    assert row["occupancy_reference"] == [1.0, 0.0] and abs(row["occupancy_model"][1] - 0.3) < 0.06
    assert not B.basin_check(DCE, other, model)["mismatch"]


def test_basin_check_uses_the_importance_weights():
    """Model samples 50/50 over the basins, reweighted to a 90/10 target: unweighted they are flagged
    against target samples, weighted they agree."""
    target = dce_frames(two_basin(600, 0.1, 4))
    th = two_basin(600, 0.5, 5)
    model = dce_frames(th)
    lab = B.basin_index(th, "planar")
    log_w = np.where(lab == 1, np.log(0.1 / 0.5), np.log(0.9 / 0.5))
    assert B.basin_check(DCE, target, model)["mismatch"]
    weighted = B.basin_check(DCE, target, model, log_w_b=log_w)
    assert not weighted["mismatch"] and abs(weighted["torsions"][0]["occupancy_model"][1] - 0.1) < 0.03


def test_basin_free_energies_are_minus_log_population_ratios():
    lab = np.array([0] * 30 + [1] * 10 + [2] * 0 + [-1] * 5)
    log_w = np.zeros(len(lab))
    log_w[:30] = np.log(2.0)  # basin 0 carries 60 of the 70 units of weight in basins 0 and 1
    fe = B.basin_free_energies(lab, log_w, ["a", "b", "c"], "a")
    assert fe["delta_f_kT"]["a"] == 0.0 and fe["delta_f_kT"]["b"] == pytest.approx(math.log(60 / 10))
    assert fe["delta_f_kT"]["c"] is None and fe["ess"]["a"] == pytest.approx(30.0)
    assert fe["population"]["b"] == pytest.approx(10 / 75)


def test_flip_turns_the_torsion_by_half_a_turn_and_keeps_the_bonds():
    x = dce_frames([10.0])[0]
    y = B.flip(DCE, x, (1, 2))
    assert B.dihedrals(y[None], (0, 1, 2, 3))[0] == pytest.approx(-170.0, abs=1e-6)
    for i, j in DCE.bonds:
        assert np.linalg.norm(y[i] - y[j]) == pytest.approx(np.linalg.norm(x[i] - x[j]))
    ring = SimpleNamespace(name="ring", z=np.array([6, 6, 6, 6]), bonds=[(0, 1), (1, 2), (2, 3), (3, 0)])
    with pytest.raises(InputError, match="ring"):
        B.flip(ring, np.zeros((4, 3)), (1, 2))


def test_alanine_basin_assignment():
    phi = np.array([-83.0, -155.0, 170.0, -70.0, 73.0, 60.0, -80.0])
    psi = np.array([73.0, 165.0, 170.0, -40.0, -60.0, 40.0, 35.0])
    names = [B.ALANINE_BASINS[k] for k in B.assign_alanine(phi, psi)]
    assert names == ["C7eq", "C7eq", "C7eq", "alphaR", "C7ax", "alphaL", "C7eq"]


def test_umbrella_bias_is_periodic_and_folds():
    b = B.umbrella_bias(np.array([170.0, -170.0]), np.array([180.0]), 2.0, fold=False)[0]
    assert np.allclose(b, 0.5 * 2.0 * np.radians(10.0) ** 2)
    f = B.umbrella_bias(np.array([30.0, -30.0]), np.array([20.0]), 2.0, fold=True)[0]
    assert f[0] == f[1] == pytest.approx(0.5 * 2.0 * np.radians(10.0) ** 2)


@needs_freesolv
def test_umbrella_windows_hold_the_torsion_and_mbar_weights_are_normalised():
    from icmlkit.lib.estimate_fe.api import open_system

    s = open_system("freesolv:mobley_4465023", env="vacuum")  # (Z)-1,2-dichloroethylene
    (t,) = B.torsions(s)
    assert t["kind"] == "planar"
    x0 = s.minimised()
    assert abs(B.dihedrals(x0[None], t["atoms"])[0]) < 5  # Z: cis
    flipped = B.flip(s, x0, t["bond"])
    assert abs(B.dihedrals(flipped[None], t["atoms"])[0]) > 175
    tw = B.twist(s, t["bond"])
    assert tw[0] == t["atoms"] and abs(B.dihedrals(x0[None], tw[1])[0]) < 5  # H-C=C-H: cis as well
    u = B.umbrella(s, tw, [0.0, 90.0, 180.0], k=3000.0, frames_per_window=20, interval=10, equil=200, x_start=x0)
    for j, c in enumerate((0.0, 90.0, 180.0)):
        assert abs(np.abs(u["theta"][u["window"] == j]).mean() - c) < 8.0
    assert np.exp(u["log_w"]).sum() == pytest.approx(1.0)
    assert u["energy_evals"] == 3 * (200 + 20 * 10) + 60


def test_alanine_backbone_atoms_of_the_built_in_dipeptide():
    pytest.importorskip("openmm")
    from icmlkit.lib.estimate_fe.api import open_system

    s = open_system("alanine-dipeptide", env="vacuum")
    phi, psi = B.alanine_phi_psi(s)
    assert B.dihedrals(s.x0[None], phi)[0] == pytest.approx(-150.0, abs=1.0)  # built in the extended basin
    assert B.dihedrals(s.x0[None], psi)[0] == pytest.approx(150.0, abs=1.0)
    # a restraint at phi = +60 (OpenMM's torsion convention) lands at +60 by ours: the signs agree
    fr = s.sample(10, interval=20, equil=300, restraint=(phi, 60.0, 1000.0, False))
    assert abs(B.dihedrals(fr["x"], phi).mean() - 60.0) < 10.0


def test_model_log_weights_match_the_forward_exp_estimate():
    from icmlkit.lib.estimate_fe import card
    from icmlkit.lib.estimate_fe.systems import builtin

    s = builtin("trap4")
    fr = s.sample(400, seed=0)
    bundle, _ = card.train(s, fr["x"][:200], fr["u"][:200], steps=30, stage2_steps=5, batch=64, d=16, heads=2,
                           enc_layers=1, dec_layers=1, K=4)
    res = card.estimate(bundle, s, fr["x"][200:], fr["u"][200:], n_samples=200, seed=3)
    m = B.model_log_weights(bundle, s, 200, seed=3)
    lw = m["log_w"]
    f_fwd = -(np.log(np.exp(lw - lw.max()).sum()) + lw.max() - np.log(len(lw)))
    assert f_fwd == pytest.approx(res["f_exp_forward_kT"], abs=1e-6) and m["energy_evals"] == 200
    assert m["ess"] == pytest.approx(res["ess_forward"], rel=1e-6)
