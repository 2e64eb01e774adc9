"""Which parameters each server-based algorithm shares, and its local schedule."""

import numpy as np
import pytest

from fedsheaf.algorithms.federated import FEDERATED, FedAvg, FedPer, FedRep, Phase
from fedsheaf.algorithms.federated.summary import result_table, round_record, summarize
from fedsheaf.config.sections import SERVER_BASED, FederatedConfig

FC = FederatedConfig(local_epochs=3, head_epochs=10, body_epochs=5, finetune_epochs=7)

EXPECTED = {
    # name: (shared part, local schedule, final schedule)
    "fedavg": ("all", [Phase("all", 3)], []),
    "fedavg_ft": ("all", [Phase("all", 3)], [Phase("head", 7)]),
    "fedrep": ("body", [Phase("head", 10), Phase("body", 5)], [Phase("head", 7)]),
    "fedper": ("body", [Phase("all", 3)], [Phase("head", 7)]),
    "lg_fedavg": ("head", [Phase("all", 3)], [Phase("body", 7)]),
    "local": ("none", [Phase("all", 3)], []),
}


def test_registry_matches_the_config_choices():
    assert set(FEDERATED) == set(SERVER_BASED)
    assert all(FEDERATED[name].name == name for name in FEDERATED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shared_part_and_schedules(name):
    algo = FEDERATED[name](FC)
    shared, local, final = EXPECTED[name]
    assert algo.shared == shared
    assert algo.local_schedule() == local
    assert algo.final_schedule() == final
    assert algo.has_final_round == bool(final)
    assert algo.score_after_final == (name == "fedavg_ft")


def test_each_algorithm_overrides_only_what_it_must():
    """Flower-style: every algorithm is FedAvg plus one or two overrides, no copied loop."""
    own = {
        name: {k for k in vars(cls) if not k.startswith("__")} - {"name"}
        for name, cls in FEDERATED.items()
    }
    assert own["fedavg_ft"] == {"final_schedule", "score_after_final"}
    assert own["fedper"] == {"shared", "final_schedule"}
    assert own["fedrep"] == {"local_schedule"} and issubclass(FedRep, FedPer)
    assert own["lg_fedavg"] == {"shared", "final_schedule"}
    assert own["local"] == {"shared", "participation"}
    assert all(issubclass(cls, FedAvg) for cls in FEDERATED.values())


def test_local_trains_every_client_every_round():
    """Nothing to average, so no sampling: the FedRep authors' Local trains every client
    for all the epochs; the others sample federated.fraction of the clients."""
    fc = FederatedConfig(fraction=0.1)
    assert FEDERATED["local"](fc).participation() == 1.0
    assert {FEDERATED[n](fc).participation() for n in set(FEDERATED) - {"local"}} == {0.1}


def test_zero_epoch_phases_and_description():
    algo = FedRep(FederatedConfig(head_epochs=0, body_epochs=2, finetune_epochs=0))
    assert not algo.has_final_round
    assert algo.describe() == "shares body; local: body x2; final round: -"
    with pytest.raises(ValueError):
        Phase("none", 1)
    with pytest.raises(ValueError):
        Phase("head", -1)


def test_round_record_means_over_clients():
    # (client, correct, total, loss_sum), out of order as gathered from ranks
    rows = np.array([[1, 9, 10, 2.0], [0, 10, 20, 4.0], [2, 0, 10, 6.0]], dtype=float)
    rec = round_record(rows, 3)
    assert rec["acc"] == pytest.approx((0.5 + 0.9 + 0.0) / 3)
    assert rec["acc_pooled"] == pytest.approx(19 / 40)
    assert rec["acc_min"] == 0.0 and rec["test_loss"] == pytest.approx(12 / 40)
    assert rec["client_acc"] == [0.5, 0.9, 0.0]
    with pytest.raises(RuntimeError):
        round_record(rows[:2], 3)


def _history(accs, final=None):
    hist = [{"round": t + 1, "final": False} for t in range(len(accs))]
    for r, a in zip(hist, accs, strict=True):
        if a is not None:
            r.update(acc=a, client_acc=[a])
    if final is not None:
        hist.append({"round": len(accs) + 1, "final": True, "acc": final, "client_acc": [final]})
    return hist


def test_score_is_the_mean_of_the_last_rounds_or_the_final_accuracy():
    hist = _history([0.1, None, 0.3, 0.5, 0.7], final=0.9)
    s = summarize(hist, FedRep(FC), eval_last=3)
    assert s["score"] == pytest.approx(0.5) and s["score_rounds"] == [3, 5]
    assert s["final_acc"] == 0.9 and s["client_acc"] == [0.9] and s["rounds"] == 5
    ft = summarize(hist, FEDERATED["fedavg_ft"](FC), eval_last=3)
    assert ft["score"] == 0.9 and ft["acc_last"] == pytest.approx(0.5)
    # the closing table gives each number once, the score's meaning beside it
    base = {"algorithm": "x", "n_clients": 1}
    table = result_table({**base, **s}).splitlines()
    assert [ln.split()[0] for ln in table] == ["algorithm", "final", "score", "clients"]
    assert table[2] == "score       0.5000  (mean local test accuracy, rounds 3-5)"
    table = result_table({**base, **ft}).splitlines()
    assert table[1:4] == [
        "acc         0.5000  (mean local test accuracy, rounds 3-5)",
        "final acc   0.9000  (after the final round)",
        "score       0.9000  (final acc)",
    ]
    short = summarize(_history([0.2, 0.4]), FedAvg(FC), eval_last=10)  # clamps the window
    assert short["score"] == pytest.approx(0.3) and short["score_rounds"] == [1, 2]
    assert short["final_acc"] is None and short["client_acc"] == [0.4]
