"""Head-only FedAvg's task, runner and data on one process: the protocol without MPI."""

import numpy as np
import pytest
import torch

from fedsheaf.algorithms.federated import FEDERATED, HeadFedAvg
from fedsheaf.algorithms.federated.head.data import load_regression_clients
from fedsheaf.algorithms.federated.head.objective import target_moments
from fedsheaf.algorithms.federated.protocol import average
from fedsheaf.algorithms.federated.schedule import Phase
from fedsheaf.config.schema import build
from fedsheaf.config.sections import SERVER_BASED, ExperimentConfig
from fedsheaf.theory.bures import barycenter, selected_head
from fedsheaf.theory.psd import rel_err
from fedsheaf.theory.ufm import UFMInstance, client_grams, g_cen
from fedsheaf.util.errors import ConfigError

torch.set_num_threads(1)
CPU = torch.device("cpu")
M = 3


def _cfg(**head) -> ExperimentConfig:
    raw = {
        "name": "t",
        "algorithm": "head_fedavg",
        "seed": 2,
        "federated": {"clients": M, "rounds": 2, "fraction": 1.0, "local_epochs": 15},
        "train": {"optimizer": "adam", "lr": 0.01, "weight_decay": 0.0, "batch_size": 64},
        "head": {"backbone": [16], "features": 4, "lr_min": 1e-4, **head},
    }
    return build(ExperimentConfig, raw)


def _setup(**head):
    cfg = _cfg(**head)
    task = FEDERATED["head_fedavg"](cfg.federated).make_task(cfg)
    task.check(M + 1)
    data = task.load_clients(range(M), CPU)
    runner = task.make_runner(task.build_model(), data, CPU)
    w0 = runner.shared.flatten(runner.model)
    reply = task.server_setup(task.setup_rows(runner), w0)
    task.receive_setup(runner, reply)
    return cfg, task, runner, w0


def _round(task, runner, w):
    ups = [runner.local_update(c, w, 0) for c in range(M)]
    info = np.array([[c, runner.clients[c].n_train, loss] for c, (_, loss) in enumerate(ups)])
    vecs = np.stack([v for v, _ in ups])
    w_new = average(vecs, info[:, 1])
    return vecs, info, w_new


def test_registered_as_a_server_based_algorithm_sharing_the_head():
    assert "head_fedavg" in SERVER_BASED and FEDERATED["head_fedavg"] is HeadFedAvg
    cfg = _cfg()
    algo = HeadFedAvg(cfg.federated)
    assert algo.shared == "head" and not algo.has_final_round
    with pytest.raises(ConfigError, match="head.features"):
        _cfg(features=2)
    # the optimizer's default weight decay would change the objective the theory is for
    decayed = build(ExperimentConfig, {**cfg.to_dict(), "train": {"optimizer": "adam"}})
    assert decayed.train.weight_decay > 0
    with pytest.raises(ConfigError, match=r"^train.weight_decay=0.0005 would add an L2 term"):
        FEDERATED["head_fedavg"](decayed.federated).make_task(decayed).check(M + 1)


def test_partition_is_equal_sized_and_the_regime_is_checked():
    cfg = _cfg()
    data = load_regression_clients(cfg, range(M), CPU)
    sizes = [d.n_train for d in data.values()]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 442 - round(0.2 * 442)
    assert all(d.y_train.shape[1] == 3 for d in data.values())
    again = load_regression_clients(cfg, [1], CPU)
    assert torch.equal(again[1].y_train, data[1].y_train)  # every rank derives the same
    with pytest.raises(ConfigError, match="head.lam_H"):
        load_regression_clients(_cfg(lam_H=2.0, lam_W=2.0), [0], CPU)


def test_moment_exchange_and_round_metrics_match_the_theory():
    cfg, task, runner, w0 = _setup(rho=1e-3)
    ys = [runner.clients[c].y_train for c in range(M)]
    moments = [target_moments(y) for y in ys]
    n = np.array([len(y) for y in ys], dtype=float)
    inst = UFMInstance(
        np.stack([m for m, _ in moments]),
        np.stack([s for _, s in moments]),
        n / n.sum(),
        0.01,
        0.01,
    )
    for c in range(M):  # Σ_cen came back through the reply
        expect = inst.Sigma_cen - inst.Sigmas[c]
        np.testing.assert_allclose(runner.delta_sigma[c].numpy(), expect, atol=1e-6)
    G_star = barycenter(client_grams(inst), inst.p).G
    vecs, info, w1 = _round(task, runner, w0)
    rec = task.server_round(0, w0, vecs, info, w1)
    W0, W1 = task.split(w0)[0], task.split(w1)[0]
    assert rec["gram_err_star"] == pytest.approx(rel_err(W1 @ W1.T, G_star), rel=1e-6)
    assert rec["gram_err_cen"] == pytest.approx(rel_err(W1 @ W1.T, g_cen(inst)), rel=1e-6)
    Gs = client_grams(inst)
    delta = sum(
        pm * np.linalg.norm(task.split(v)[0] - selected_head(W0, G))
        for pm, v, G in zip(inst.p, vecs, Gs, strict=True)
    ) / np.linalg.norm(W0)
    assert rec["delta"] == pytest.approx(delta, rel=1e-6)
    assert task.initial["gram_err_star"] == pytest.approx(rel_err(W0 @ W0.T, G_star), rel=1e-9)


def test_aligned_upload_predicts_like_the_trained_model():
    """Same training twice; one client aligns: its stored backbone + uploaded head give
    the predictions of the unaligned model, and its head moved towards the broadcast."""
    _, task_a, plain, w0 = _setup()
    _, task_b, aligned, w0b = _setup(align=True)
    assert np.array_equal(w0, w0b)
    W_t = task_a.split(w0)[0]
    for c in range(M):
        up_plain, _ = plain.local_update(c, w0, 0)
        up_aligned, _ = aligned.local_update(c, w0, 0)
        x = plain.clients[c].x_test
        plain.install(c, up_plain)
        aligned.install(c, up_aligned)
        with torch.no_grad():
            torch.testing.assert_close(aligned.model(x), plain.model(x), atol=2e-5, rtol=1e-5)
        Wp, Wa = task_a.split(up_plain)[0], task_b.split(up_aligned)[0]
        np.testing.assert_allclose(Wa @ Wa.T, Wp @ Wp.T, atol=1e-5)
        assert np.linalg.norm(Wa - W_t) <= np.linalg.norm(Wp - W_t) + 1e-6
        np.testing.assert_allclose(Wa, selected_head(W_t, Wp @ Wp.T), atol=1e-4)


def test_moment_correction_changes_the_local_solution_and_evaluation_rows_add_up():
    _, task, runner, w0 = _setup()
    _, task_c, corrected, _ = _setup(moment_gamma=1.0)
    v_plain, _ = runner.local_update(0, w0, 0)
    v_corr, _ = corrected.local_update(0, w0, 0)
    assert not np.allclose(v_plain, v_corr)
    rows = np.array([[c, *task.evaluate(runner, c, w0)] for c in range(M)])
    rec = task.round_record(rows)
    n_vals = sum(runner.clients[c].y_test.numel() for c in range(M))
    assert rec["test_mse"] == pytest.approx(rows[:, 1].sum() / n_vals)
    assert len(rec["client_mse"]) == M and rec["objective"] > 0
    assert "mse" in task.progress(rec)


def test_geo_view_clients_train_a_cnn_backbone():
    raw = {
        "name": "g",
        "algorithm": "head_fedavg",
        "seed": 0,
        "data": {"dataset": "digits", "limit": 300},
        "federated": {"clients": 2, "local_epochs": 2},
        "train": {"optimizer": "adam", "lr": 0.01, "weight_decay": 0.0, "batch_size": 64},
        "head": {"data": "geo", "backbone": [4, 6], "test_fraction": 0.25},
    }
    cfg = build(ExperimentConfig, raw)
    task = FEDERATED["head_fedavg"](cfg.federated).make_task(cfg)
    task.check(2)
    data = task.load_clients([0, 1], CPU)
    assert data[0].x_train.shape[1:] == (1, 8, 8) and data[0].y_train.shape[1] == 3
    assert sum(d.n_train for d in data.values()) == 225
    y = torch.cat([d.y_train for d in data.values()])
    torch.testing.assert_close(y.mean(0), torch.zeros(3), atol=1e-5, rtol=0)  # standardised
    runner = task.make_runner(task.build_model(), data, CPU)
    assert task.P == 6 and isinstance(runner.model.body[0], torch.nn.Conv2d)
    w0 = runner.shared.flatten(runner.model)
    task.receive_setup(runner, task.server_setup(task.setup_rows(runner), w0))
    up, loss = runner.local_update(1, w0, 0)
    assert up.shape == (3 * 6 + 3,) and np.isfinite(loss) and not np.array_equal(up, w0)
    assert np.isfinite(task.evaluate(runner, 1, up)).all()


def test_a_head_only_phase_trains_on_inputs_not_cached_features():
    """The UFM objective applies the backbone itself, so a head phase must not be fed
    the pre-computed features other runners use (only the head's weights change)."""
    _, _, runner, w0 = _setup()
    runner.install(0, w0)
    body = {n: p.detach().clone() for n, p in runner.model.named_parameters()}
    loss = runner.run_schedule(0, [Phase("head", 1)], 0)
    assert np.isfinite(loss)
    changed = {n for n, p in runner.model.named_parameters() if not torch.equal(p, body[n])}
    assert changed == set(runner.parts["head"])
