"""UFM federation simulator and the `fedsheaf ufm` command."""

import argparse
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsheaf.cli.ufm import configure, run
from fedsheaf.theory._threads import single_blas_thread
from fedsheaf.theory.bures import gram_step, selected_head
from fedsheaf.theory.exceptions import ConvergenceError
from fedsheaf.theory.instances import load_ufm_config, random_instance
from fedsheaf.theory.local import proximal_solve
from fedsheaf.theory.psd import rel_err
from fedsheaf.theory.simulate import SimSettings, simulate
from fedsheaf.theory.ufm import client_grams
from fedsheaf.util.errors import ConfigError

FIXED = Path(__file__).resolve().parents[2] / "configs" / "ufm_fixed.yaml"


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with single_blas_thread():
        yield


@pytest.fixture(scope="module")
def fixed():
    return load_ufm_config(FIXED)


def test_exact_selection_converges_to_barycenter(fixed) -> None:
    res = simulate(fixed.instance, fixed.W0, SimSettings(mode="exact", rounds=18))
    assert res.rel_err_star[-1] < 1e-12
    assert np.all(np.diff(res.rel_err_star[:10]) < 0)
    # The limit keeps the predicted relative gap to G_cen (seed 002: 5.78e-1).
    assert res.rel_err_cen[-1] == pytest.approx(res.gap.relative_gap, abs=1e-10)
    assert res.bw_objective[-1] == pytest.approx(res.gap.traces["M_A"], rel=1e-10)


def test_exact_rounds_follow_the_gram_recursion(fixed) -> None:
    res = simulate(fixed.instance, fixed.W0, SimSettings(mode="exact", rounds=5))
    Gs = client_grams(fixed.instance)
    for t in range(5):
        assert rel_err(res.grams[t + 1], gram_step(res.grams[t], Gs, fixed.instance.p)) < 1e-12


@pytest.mark.parametrize(("rho", "expected"), [(1e-1, 3.49e-2), (1e-3, 2.55e-4)])
def test_proximal_rounds_match_paper(fixed, rho: float, expected: float) -> None:
    # Seed 002, App. D.1: relative error to G_star after 18 rounds.
    res = simulate(fixed.instance, fixed.W0, SimSettings(mode="proximal", rounds=18, rho=rho))
    assert res.rel_err_star[-1] == pytest.approx(expected, rel=5e-3)
    assert res.local_grad_norm.max() < 1e-7


@pytest.mark.parametrize("start", [None, "selected"])
def test_proximal_solve_tends_to_exact_selection(fixed, start) -> None:
    inst, W = fixed.instance, fixed.W0
    errs = []
    for rho in (1e-2, 1e-3, 1e-4, 1e-5):
        worst = 0.0
        for T, Gm in zip(inst.Sigmas, client_grams(inst), strict=True):
            Pi = selected_head(W, Gm)
            sol = proximal_solve(
                W, T, inst.lam_H, inst.lam_W, rho, W_start=None if start is None else Pi
            )
            worst = max(worst, rel_err(sol.W, Pi))
        errs.append(worst)
    assert errs[-1] < 1e-4
    # Lemma 1(ii): the selection error shrinks in proportion to rho.
    for a, b in itertools.pairwise(errs):
        assert b < 0.2 * a


def test_full_correction_recovers_g_cen_in_one_round(fixed) -> None:
    res = simulate(fixed.instance, fixed.W0, SimSettings(mode="exact", rounds=3, gamma=1.0))
    assert np.all(res.rel_err_cen[1:] < 1e-13)


@pytest.mark.parametrize(("gamma", "expected"), [(0.9, 3.53e-2), (0.99, 3.46e-3)])
def test_partial_correction_matches_paper(fixed, gamma: float, expected: float) -> None:
    res = simulate(fixed.instance, fixed.W0, SimSettings(mode="exact", rounds=1, gamma=gamma))
    assert res.rel_err_cen[1] == pytest.approx(expected, rel=5e-3)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 4), st.integers(1, 5))
def test_full_correction_random_instances(seed: int, C: int, M: int) -> None:
    inst = random_instance(seed, C, M, mean_scale=1.5)
    W0 = np.random.default_rng(seed).standard_normal((C, C + 1)) + np.eye(C, C + 1)
    res = simulate(inst, W0, SimSettings(mode="exact", rounds=1, gamma=1.0))
    assert res.rel_err_cen[1] < 1e-10
    assert np.allclose(res.G_pred, res.gap.G_cen, atol=1e-10)


def test_joint_mode_is_centralized(fixed) -> None:
    res = simulate(fixed.instance, fixed.W0, SimSettings(mode="joint", rounds=2))
    assert np.all(res.rel_err_cen[1:] < 1e-13)


def test_one_local_gd_step_converges_to_g_within(fixed) -> None:
    # App. G: with E = 1 the server runs GD on F(W; Σ_within), whose optimal Gram is G_within.
    res = simulate(
        fixed.instance, fixed.W0, SimSettings(mode="gd", rounds=60, local_steps=1, lr=1.0)
    )
    assert res.rel_err_within[-1] < 1e-10


def test_many_local_gd_steps_approach_barycenter(fixed) -> None:
    few = simulate(fixed.instance, fixed.W0, SimSettings(mode="gd", rounds=30, local_steps=2))
    many = simulate(fixed.instance, fixed.W0, SimSettings(mode="gd", rounds=30, local_steps=100))
    assert many.rel_err_star[-1] < few.rel_err_star[-1]


def test_diverging_gradient_descent_is_reported(fixed) -> None:
    with pytest.raises(ConvergenceError, match="lr=1000"):
        simulate(fixed.instance, fixed.W0, SimSettings(mode="gd", rounds=5, lr=1000.0))


def test_simulation_is_deterministic(fixed) -> None:
    s = SimSettings(mode="proximal", rounds=3, rho=1e-2, prox_start="broadcast")
    a, b = simulate(fixed.instance, fixed.W0, s), simulate(fixed.instance, fixed.W0, s)
    assert np.array_equal(a.grams, b.grams)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"mode": "nope"}, "simulation.mode"),
        ({"rounds": -1}, "simulation.rounds"),
        ({"rho": -0.1}, "simulation.rho"),
        ({"gamma": 2.0}, "simulation.gamma"),
        ({"local_steps": 0}, "simulation.local_steps"),
        ({"lr": 0.0}, "simulation.lr"),
        ({"prox_start": "x"}, "simulation.prox_start"),
    ],
)
def test_settings_validation(kwargs: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        SimSettings(**kwargs)


def _finite_numbers(obj) -> bool:
    if isinstance(obj, dict):
        return all(_finite_numbers(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_finite_numbers(v) for v in obj)
    if isinstance(obj, float):
        return math.isfinite(obj)
    return True


@pytest.mark.parametrize("mode", ["exact", "proximal"])
def test_ufm_command_end_to_end(tmp_path: Path, capsys, mode: str) -> None:
    parser = argparse.ArgumentParser()
    configure(parser)
    out = tmp_path / "ufm_out"
    args = parser.parse_args([str(FIXED), "--mode", mode, "--rounds", "6", "--out", str(out)])
    assert run(args) == 0
    text = capsys.readouterr().out
    assert "Tr M_mu" in text and "Tr M_A" in text and "relative gap" in text
    data = json.loads((out / "ufm.json").read_text())
    assert _finite_numbers(data)
    assert data["settings"]["mode"] == mode and data["settings"]["rounds"] == 6
    assert len(data["rounds"]) == 7
    assert data["gap"]["trace"]["M_A"] == pytest.approx(0.193, abs=5e-4)
    png = (out / "ufm_ellipses.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 1000
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_ufm_command_rejects_bad_override(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args([str(FIXED), "--gamma", "3", "--out", str(tmp_path)])
    with pytest.raises(ConfigError, match="gamma"):
        run(args)
