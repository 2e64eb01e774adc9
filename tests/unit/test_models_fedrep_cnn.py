import pytest
import torch

from fedsheaf.models.fedrep_cnn import FedRepCNN, build_fedrep_cnn

torch.set_num_threads(1)


def n_params(m: torch.nn.Module, names: list[str] | None = None) -> int:
    params = dict(m.named_parameters())
    return sum(params[n].numel() for n in (names if names is not None else params))


def test_cifar_parameter_count_and_split() -> None:
    m = build_fedrep_cnn(3, 32, 10, seed=0)
    assert m.flat_dim == 1600
    conv1 = 3 * 64 * 25 + 64
    conv2 = 64 * 64 * 25 + 64
    fc = (1600 * 120 + 120) + (120 * 64 + 64) + (64 * 10 + 10)
    assert n_params(m) == conv1 + conv2 + fc == 307_842
    assert m.head_names() == ["fc3.weight", "fc3.bias"]
    assert n_params(m, m.head_names()) == 650
    body = m.body_names()
    assert set(body).isdisjoint(m.head_names())
    assert set(body) | set(m.head_names()) == {n for n, _ in m.named_parameters()}
    assert not any(isinstance(x, torch.nn.modules.batchnorm._BatchNorm) for x in m.modules())


@pytest.mark.parametrize("c,size,flat", [(3, 32, 1600), (1, 28, 1024), (1, (28, 32), 64 * 4 * 5)])
def test_shapes(c: int, size, flat: int) -> None:
    m = FedRepCNN(c, size, 10)
    assert m.flat_dim == flat
    h, w = (size, size) if isinstance(size, int) else size
    x = torch.randn(2, c, h, w, generator=torch.Generator().manual_seed(0))
    assert m(x).shape == (2, 10)
    assert m.representation(x).shape == (2, 64)


def test_seeded_and_rng_untouched() -> None:
    state = torch.get_rng_state()
    a, b, c = (build_fedrep_cnn(1, 28, 10, seed=s) for s in (5, 5, 6))
    assert torch.equal(torch.get_rng_state(), state)
    for (n, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters(), strict=True):
        assert torch.equal(pa, pb), n
        assert not torch.equal(pa, pc), n


def test_too_small_input() -> None:
    with pytest.raises(ValueError):
        FedRepCNN(1, 8)
