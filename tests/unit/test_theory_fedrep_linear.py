"""FedRep vs FedAvg on the linear shared-representation model (seed 003)."""

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pytest

from fedsheaf.cli.fedrep_linear import configure as configure_linear
from fedsheaf.cli.fedrep_linear import run as run_linear_cli
from fedsheaf.theory._threads import single_blas_thread
from fedsheaf.theory.fedrep_linear import (
    LinearSettings,
    fedrep_round,
    make_data,
    moments_init,
    principal_angle_distance,
    run_linear,
)
from fedsheaf.util.errors import ConfigError


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with single_blas_thread():
        yield


@pytest.fixture(scope="module")
def small_noise() -> dict:
    with single_blas_thread():
        return run_linear(noise=1e-4, rounds=50, seed=1)


def test_principal_angle_distance_basics() -> None:
    rng = np.random.default_rng(0)
    B, _ = np.linalg.qr(rng.standard_normal((6, 2)))
    Q, _ = np.linalg.qr(rng.standard_normal((2, 2)))
    assert principal_angle_distance(B @ Q * 3.0, B) < 1e-12  # same column space
    P = np.eye(6)[:, :2]
    assert principal_angle_distance(np.eye(6)[:, 2:4], P) == pytest.approx(1.0)
    for deg in (5.0, 30.0, 80.0):
        t = np.deg2rad(deg)
        tilted = np.zeros((6, 2))
        tilted[0, 0], tilted[1, 1], tilted[2, 1] = 1.0, np.cos(t), np.sin(t)
        assert principal_angle_distance(tilted, P) == pytest.approx(np.sin(t), abs=1e-12)


def test_method_of_moments_finds_the_subspace_with_many_samples() -> None:
    s = LinearSettings(n=50, m=400, m_test=1, noise=0.0)
    data = make_data(s, np.random.default_rng(3))
    assert principal_angle_distance(moments_init(data.X, data.y, s.k), data.B_star) < 0.2


def test_truth_is_a_fixed_point_of_fedrep_without_noise() -> None:
    s = LinearSettings(n=20, m=8, m_test=1, noise=0.0)
    data = make_data(s, np.random.default_rng(4))
    B = fedrep_round(data.B_star, data.X, data.y, lr=0.5, local_steps=3)
    assert principal_angle_distance(B, data.B_star) < 1e-10
    assert np.allclose(B.T @ B, np.eye(s.k))


def test_fedrep_distance_falls_geometrically(small_noise: dict) -> None:
    rep = np.array(small_noise["dist_fedrep"])
    assert len(rep) == 51
    assert rep[50] < 1e-3
    assert np.argmax(rep < 1e-3) <= 30
    # Linear rate: each block of 5 rounds before the noise floor shrinks the distance by
    # a roughly constant factor well below one.
    ratios = rep[5:26:5] / rep[0:21:5]
    assert np.all(ratios < 0.5)


def test_fedavg_does_not_recover_the_subspace(small_noise: dict) -> None:
    rep, avg = small_noise["dist_fedrep"], small_noise["dist_fedavg"]
    assert avg[0] == rep[0]  # same method-of-moments start
    assert min(avg) > 1e-2
    assert avg[-1] > 30 * rep[-1]
    assert small_noise["test_mse_fedavg"] > 100 * small_noise["test_mse_fedrep"]


def test_noiseless_fedrep_converges_to_machine_precision() -> None:
    rep = run_linear(noise=0.0, rounds=60, seed=2)["dist_fedrep"]
    assert rep[-1] < 1e-7


def test_run_linear_is_deterministic() -> None:
    a = run_linear(rounds=3, n=20, seed=5)
    b = run_linear(rounds=3, n=20, seed=5)
    c = run_linear(rounds=3, n=20, seed=6)
    assert a == b
    assert a["dist_fedrep"] != c["dist_fedrep"]


def test_partial_participation_runs() -> None:
    res = run_linear(rounds=40, participation=0.1, noise=0.0, seed=0)
    assert res["dist_fedrep"][-1] < 1e-2


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"m": 1}, "m=1"),
        ({"k": 30}, "k=30"),
        ({"participation": 0.0}, "participation"),
        ({"lr": -1.0}, "lr"),
        ({"rounds": -2}, "rounds"),
    ],
)
def test_settings_validation(kwargs: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        LinearSettings(**kwargs)


def test_fedrep_linear_command(tmp_path: Path, capsys) -> None:
    parser = argparse.ArgumentParser()
    configure_linear(parser)
    out = tmp_path / "lin"
    args = parser.parse_args(["--rounds", "12", "--n", "30", "--out", str(out)])
    assert run_linear_cli(args) == 0
    assert "FedRep" in capsys.readouterr().out
    data = json.loads((out / "fedrep_linear.json").read_text())
    assert len(data["dist_fedrep"]) == 13 and data["settings"]["n"] == 30
    assert all(math.isfinite(x) for x in data["dist_fedrep"] + data["dist_fedavg"])
    png = (out / "fedrep_linear.png").read_bytes()
    assert png.startswith(b"\x89PNG")


def test_clients_per_round_is_the_server_runs_rule() -> None:
    from fedsheaf.algorithms.federated.protocol import n_selected
    from fedsheaf.theory.fedrep_linear import clients_per_round

    for n in (1, 7, 10, 100, 1000):
        for r in (0.001, 0.1, 0.15, 0.25, 0.35, 0.5, 0.999, 1.0):
            assert clients_per_round(r, n) == n_selected(n, r), (r, n)
    assert clients_per_round(0.35, 10) == 3  # floor, not round (3.5 -> 4)
