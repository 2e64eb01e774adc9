"""Local schedules on one rank: what each phase trains, client state, evaluation."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedsheaf.algorithms.base import build_optimizer
from fedsheaf.algorithms.federated import FEDERATED
from fedsheaf.algorithms.federated.schedule import Phase
from fedsheaf.algorithms.federated.setup import ClientData
from fedsheaf.algorithms.federated.trainer import ClientRunner
from fedsheaf.config.sections import FederatedConfig, TrainConfig
from fedsheaf.data.loaders import batches
from fedsheaf.models.fedrep_cnn import build_fedrep_cnn
from fedsheaf.util.errors import CheckpointError
from fedsheaf.util.seeding import derive_seed

torch.set_num_threads(1)
CPU = torch.device("cpu")
# Large weight decay and momentum: any update of a frozen parameter would show.
TRAIN = TrainConfig(batch_size=8, lr=0.05, momentum=0.9, weight_decay=0.1, clip=None)


def _client(seed: int, classes=(0, 1), n=24) -> ClientData:
    g = torch.Generator().manual_seed(seed)
    y = torch.tensor(classes)[torch.randint(len(classes), (n,), generator=g)]
    x = torch.randn(n, 1, 16, 16, generator=g) + y.view(-1, 1, 1, 1).float()
    yt = torch.tensor(classes)[torch.randint(len(classes), (10,), generator=g)]
    xt = torch.randn(10, 1, 16, 16, generator=g) + yt.view(-1, 1, 1, 1).float()
    return ClientData(x, y, xt, yt, tuple(classes))


def _runner(algorithm: str, augment: bool = False, **fc) -> ClientRunner:
    algo = FEDERATED[algorithm](FederatedConfig(**fc))
    clients = {0: _client(0), 3: _client(3, (2, 5))}
    model = build_fedrep_cnn(1, 16, 10, seed=11)
    return ClientRunner(algo, model, clients, TRAIN, augment, seed=5, device=CPU)


def _values(r: ClientRunner, part: str) -> dict[str, torch.Tensor]:
    params = dict(r.model.named_parameters())
    return {n: params[n].detach().clone() for n in r.parts[part]}


def _same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[n], b[n]) for n in a)


def _changed(a: dict, b: dict) -> bool:
    return all(not torch.equal(a[n], b[n]) for n in a)


@pytest.mark.parametrize("augment", [False, True])
def test_fedrep_phases_freeze_the_other_part(augment):
    r = _runner("fedrep", augment=augment, head_epochs=2, body_epochs=2)
    r.install(0, r.shared.flatten(r.model))
    head0, body0 = _values(r, "head"), _values(r, "body")
    r.run_schedule(0, [Phase("head", 2)], round_=0)
    head1, body1 = _values(r, "head"), _values(r, "body")
    assert _changed(head0, head1) and _same(body0, body1)
    r.run_schedule(0, [Phase("body", 2)], round_=0)
    head2, body2 = _values(r, "head"), _values(r, "body")
    assert _same(head1, head2) and _changed(body1, body2)
    assert all(p.requires_grad for p in r.model.parameters())  # restored afterwards


def test_cached_head_phase_equals_full_forward():
    """Head training on precomputed features is the same computation as the plain loop."""
    r = _runner("fedrep", head_epochs=3, body_epochs=0)
    r.install(0, r.shared.flatten(r.model))
    ref = build_fedrep_cnn(1, 16, 10, seed=11)
    ref.load_state_dict(r.model.state_dict())
    r.run_schedule(0, [Phase("head", 3)], round_=4)
    for p in ref.parameters():
        p.requires_grad_(False)
    head = [ref.fc3.weight, ref.fc3.bias]
    for p in head:
        p.requires_grad_(True)
    opt = build_optimizer(TRAIN, head)
    data = r.clients[0]
    seed = derive_seed(5, "batches", 0, 4, 0)
    for epoch in range(3):
        for xb, yb in batches(data.x_train, data.y_train, np.arange(24), 8, seed, epoch):
            loss = F.cross_entropy(ref(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    torch.testing.assert_close(r.model.fc3.weight, ref.fc3.weight, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(r.model.fc3.bias, ref.fc3.bias, rtol=1e-5, atol=1e-6)


def test_fedrep_keeps_heads_private_and_uploads_the_body():
    r = _runner("fedrep", head_epochs=1, body_epochs=1)
    w0 = r.shared.flatten(r.model)
    assert r.shared.names == r.model.body_names() and r.private == r.model.head_names()
    v0, loss0 = r.local_update(0, w0, 0)
    v3, _ = r.local_update(3, w0, 0)
    assert v0.shape == w0.shape and np.isfinite(loss0)
    assert not np.array_equal(v0, w0) and not np.array_equal(v0, v3)
    # heads differ per client and survive a reload of another body
    assert not torch.equal(r.state[0]["fc3.weight"], r.state[3]["fc3.weight"])
    r.install(0, v3)
    torch.testing.assert_close(r.model.fc3.weight, r.state[0]["fc3.weight"])
    np.testing.assert_array_equal(r.shared.flatten(r.model), v3)


def test_fedavg_has_no_private_state_and_is_deterministic():
    a, b = _runner("fedavg", local_epochs=1), _runner("fedavg", local_epochs=1)
    w0 = a.shared.flatten(a.model)
    assert a.private == [] and a.shared.size == sum(p.numel() for p in a.model.parameters())
    va, la = a.local_update(3, w0, 2)
    vb, lb = b.local_update(3, w0, 2)
    np.testing.assert_array_equal(va, vb)
    assert la == lb and a.state[3] == {}
    vc, _ = b.local_update(3, w0, 3)  # another round shuffles differently
    assert not np.array_equal(va, vc)


def test_fedavg_ft_final_round_personalises_the_head_only():
    r = _runner("fedavg_ft", local_epochs=1, finetune_epochs=2)
    w = r.shared.flatten(r.model)
    r.install(3, w)  # client 3 holds nothing of its own: the model is the broadcast one
    broadcast = {n: p.detach().clone() for n, p in r.model.named_parameters()}
    r.final_update(0, w, 7)
    assert sorted(r.state[0]) == sorted(r.model.head_names())
    assert r.state[3] == {}
    tuned = dict(r.model.named_parameters())  # what client 0 was fine-tuned to
    for name in r.model.body_names():  # frozen during fine-tuning
        assert torch.equal(tuned[name], broadcast[name]), name
    for name in r.model.head_names():  # trained, and kept as client 0's own
        assert not torch.equal(tuned[name], broadcast[name]), name
        assert torch.equal(r.state[0][name], tuned[name]), name


def test_lg_fedavg_and_local_split():
    lg = _runner("lg_fedavg", local_epochs=1, finetune_epochs=1)
    assert lg.shared.names == lg.model.head_names() and lg.private == lg.model.body_names()
    w = lg.shared.flatten(lg.model)
    v, _ = lg.local_update(0, w, 0)
    assert v.shape == (650,)
    lg.final_update(3, w, 1)
    assert sorted(lg.state[3]) == sorted(lg.model.body_names())
    loc = _runner("local", local_epochs=1)
    assert loc.shared.size == 0
    v, _ = loc.local_update(0, loc.shared.flatten(loc.model), 0)
    assert v.shape == (0,) and len(loc.state[0]) == len(list(loc.model.parameters()))
    assert not torch.equal(loc.state[0]["conv1.weight"], loc.state[3]["conv1.weight"])


def test_evaluate_counts_correct_predictions():
    r = _runner("fedper", local_epochs=1)
    w = r.shared.flatten(r.model)
    correct, total, loss = r.evaluate(3, w)
    data = r.clients[3]
    with torch.no_grad():
        logits = r.model(data.x_test)
    assert total == 10
    assert correct == int((logits.argmax(1) == data.y_test).sum())
    assert loss == pytest.approx(
        float(F.cross_entropy(logits, data.y_test, reduction="sum")), rel=1e-5
    )


def test_divergence_is_a_clear_error():
    from fedsheaf.algorithms.base import TrainingDiverged

    r = _runner("fedavg", local_epochs=1)
    r.clients[0].x_train[0, 0, 0, 0] = float("nan")
    with pytest.raises(TrainingDiverged, match="client 0: loss became nan"):
        r.local_update(0, r.shared.flatten(r.model), 0)


def test_a_client_trained_elsewhere_continues_bitwise_after_its_state_moves():
    """Balanced placement: client 0 trains on runner a in round 0, its private state
    travels as a row to runner b, and round 1 on b equals round 1 on a, bit for bit."""
    a, b = (_runner("fedrep", head_epochs=1, body_epochs=1) for _ in range(2))
    w = a.shared.flatten(a.model)
    w1, _ = a.local_update(0, w, 0)
    rows = a.private_rows([0, 3])
    assert rows.shape == (2, a.private_size) and a.private_size == 650  # fc3 of the CNN
    b.load_private_rows([0], rows[:1])
    np.testing.assert_array_equal(b.private_rows([0, 3]), rows)
    wa, la = a.local_update(0, w1, 1)
    wb, lb = b.local_update(0, w1, 1)
    np.testing.assert_array_equal(wa, wb)
    assert la == lb and _same(a.state[0], b.state[0])
    with pytest.raises(ValueError, match="rows"):
        b.load_private_rows([0, 3], rows[:1])


def test_checkpoint_state_covers_the_home_clients_only():
    r = _runner("fedrep", head_epochs=1, body_epochs=0)
    r.home = [3]  # holds clients 0 and 3, home to 3
    r.local_update(3, r.shared.flatten(r.model), 0)
    saved = r.state_dict()
    assert sorted(saved["clients"]) == [3]
    fresh = _runner("fedrep")
    fresh.home = [3]
    fresh.load_state_dict(saved)
    assert _same(fresh.state[3], r.state[3]) and _same(fresh.state[0], r.state[0])
    fresh.home = [0, 3]
    with pytest.raises(CheckpointError, match="this rank hosts"):
        fresh.load_state_dict(saved)
    none = _runner("fedavg")  # everything shared: empty private rows
    assert none.private_rows([0, 3]).shape == (2, 0)
