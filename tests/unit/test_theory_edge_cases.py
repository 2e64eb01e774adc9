"""Theory toolkit edge cases: C = 1, client Grams sharing a near-null direction, overflowing
means, and the barycenter tolerance for ill-conditioned Grams (issue "Hardening", 5).

Every input gives a result or one line naming the real culprit.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedsheaf.cli import main as cli
from fedsheaf.theory import psd
from fedsheaf.theory._threads import single_blas_thread
from fedsheaf.theory.bures import barycenter, selected_head
from fedsheaf.theory.psd import rotated_diag
from fedsheaf.theory.ufm import UFMInstance
from fedsheaf.util.errors import ConfigError


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with single_blas_thread():
        yield


def _write(path: Path, clients: list[tuple[list[float], object]], extra: str = "") -> Path:
    lines = ["lam_H: 0.1", "lam_W: 0.1", "clients:"]
    for mean, cov in clients:
        lines += [f"  - mean: {json.dumps(mean)}", f"    cov: {json.dumps(cov)}"]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def _ufm(tmp_path: Path, config: Path, *options: str) -> int:
    return cli.main(["ufm", str(config), "--rounds", "6", "--out", str(tmp_path / "out"), *options])


def test_one_dimensional_classes_run_and_draw_intervals(tmp_path, capsys) -> None:
    config = _write(tmp_path / "c1.yaml", [([0.0], [[2.0]]), ([1.0], [[0.5]])])
    assert _ufm(tmp_path, config) == 0
    assert "Traceback" not in capsys.readouterr().err
    data = json.loads((tmp_path / "out" / "ufm.json").read_text())
    # 1×1 Grams commute: the barycenter is (Σ p_m √g_m)², g_m = √(λ_H/λ_W) √σ_m − λ_H.
    g = np.sqrt([2.0, 0.5]) - 0.1
    star = data["references"]["G_star"]
    assert star == [[pytest.approx(float(np.mean(np.sqrt(g))) ** 2, rel=1e-12)]]
    png = (tmp_path / "out" / "ufm_ellipses.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 1000


def test_a_barycenter_of_grams_sharing_a_near_null_direction_is_computed() -> None:
    # Commuting Grams R diag(a_m, e_m) Rᵀ: the barycenter is R diag((Σp√a)², (Σp√e)²) Rᵀ.
    a, e = np.array([1.3, 0.9, 2.1]), np.array([5e-16, 3e-16, 7e-16])
    Gs = np.stack([rotated_diag(35.0, [am, em]) for am, em in zip(a, e, strict=True)])
    p = np.array([0.2, 0.3, 0.5])
    G = barycenter(Gs, p).G
    expected = rotated_diag(35.0, [(p @ np.sqrt(a)) ** 2, (p @ np.sqrt(e)) ** 2])
    assert np.linalg.norm(G - expected) < 1e-13 * np.linalg.norm(expected)


def test_the_pseudo_inverse_root_drops_only_null_directions() -> None:
    A = rotated_diag(20.0, [2.0, 1e-17])
    r, ri = psd.sqrt_and_pinv_sqrt(A)
    np.testing.assert_allclose(r @ r, rotated_diag(20.0, [2.0, 0.0]), atol=1e-15)
    np.testing.assert_allclose(ri @ A @ ri, rotated_diag(20.0, [1.0, 0.0]), atol=1e-15)
    B = rotated_diag(20.0, [2.0, 0.5])  # well conditioned: the ordinary roots
    r, ri = psd.sqrt_and_pinv_sqrt(B)
    np.testing.assert_allclose(r @ ri, np.eye(2), atol=1e-14)
    # A head whose Gram is singular maps onto the target on its range.
    W = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    U = selected_head(W, np.diag([4.0, 3.0]))
    np.testing.assert_allclose(U @ U.T, np.diag([4.0, 0.0]), atol=1e-14)


def test_a_valid_instance_whose_grams_share_a_near_null_direction_runs(tmp_path, capsys) -> None:
    # Variances 1e-16 above lam_H*lam_W along the second axis (fully active, barely):
    # both client Grams are 5e-16 there, and the barycenter iteration used to divide by it.
    near = 0.0100000000000001
    config = _write(
        tmp_path / "near.yaml",
        [([0.0, 0.0], [[2.0, 0.0], [0.0, near]]), ([0.0, 0.0], [[1.0, 0.0], [0.0, near]])],
    )
    for mode in ("exact", "proximal", "joint"):
        assert _ufm(tmp_path, config, "--mode", mode) == 0, mode
        assert "Traceback" not in capsys.readouterr().err
        data = json.loads((tmp_path / "out" / "ufm.json").read_text())
        star = np.array(data["references"]["G_star"])
        expected = np.diag([(np.mean(np.sqrt([np.sqrt(2.0) - 0.1, 0.9]))) ** 2, 0.0])
        np.testing.assert_allclose(star, expected, atol=1e-13)
        assert all(np.isfinite(r["rel_err_star"]) for r in data["rounds"])


def test_an_overflowing_mean_is_named_not_a_covariance(tmp_path, capsys) -> None:
    config = _write(
        tmp_path / "big.yaml",
        [([1e200, 0.0], [[2.0, 0.0], [0.0, 1.0]]), ([0.0, 0.0], [[1.0, 0.0], [0.0, 1.0]])],
    )
    assert _ufm(tmp_path, config) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "clients[0].mean (entries up to 1e+200)" in err and "Sigma_mu" in err, err
    assert "fully active" not in err and "cov " not in err
    with pytest.raises(ConfigError, match=r"clients\[1\].mean .* Sigma_mu"):
        UFMInstance(
            mus=np.array([[1.0, 0.0], [0.0, -3e160]]),
            Sigmas=np.stack([np.eye(2), np.eye(2)]),
            p=np.array([0.5, 0.5]),
            lam_H=0.1,
            lam_W=0.1,
        )


def test_a_covariance_too_large_for_the_grams_is_named(tmp_path, capsys) -> None:
    # Finite (1e308), but its Gram's products overflow; the symmetrisation used to overflow
    # first and blame "means and covariances must be finite".
    config = _write(
        tmp_path / "huge.yaml",
        [([0.0, 0.0], [[1e308, 0.0], [0.0, 1.0]]), ([0.0, 0.0], [[1.0, 0.0], [0.0, 1.0]])],
    )
    config.write_text(config.read_text().replace("lam_W: 0.1", "lam_W: 1.0e-4"))
    assert _ufm(tmp_path, config) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "clients[0] covariance is too large: its optimal head Gram has entries up to" in err


def test_the_barycenter_tolerance_can_be_set(tmp_path, capsys) -> None:
    # Condition numbers ~3e7 with nearly (not exactly) shared eigenbases: rounding stalls
    # the barycenter step near 4e-10, far above the default tolerance 1e-13.
    clients = [
        ([0.0, 0.0], {"rotation_deg": theta, "eigenvalues": [a, 0.01000001]})
        for theta, a in ((30.0, 2.0), (31.0, 1.0), (29.0, 3.0))
    ]
    config = _write(tmp_path / "ill.yaml", clients)
    assert _ufm(tmp_path, config) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "BW barycenter did not converge" in err and "condition number" in err
    assert "--barycenter-tol" in err and "simulation.barycenter_tol" in err
    assert _ufm(tmp_path, config, "--barycenter-tol", "1e-9") == 0
    data = json.loads((tmp_path / "out" / "ufm.json").read_text())
    assert data["settings"]["barycenter_tol"] == 1e-9
    # the same in the instance file, with the iteration cap
    extra = "simulation: {barycenter_tol: 1e-9, barycenter_max_iter: 500}\n"
    assert _ufm(tmp_path, _write(tmp_path / "ill2.yaml", clients, extra)) == 0
    data = json.loads((tmp_path / "out" / "ufm.json").read_text())
    assert data["settings"]["barycenter_max_iter"] == 500
    capsys.readouterr()
    assert _ufm(tmp_path, config, "--barycenter-tol", "0") == 2
    assert "ufm: --barycenter-tol must be a finite number in (0, 1]" in capsys.readouterr().err
