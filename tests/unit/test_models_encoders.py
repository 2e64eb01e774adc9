import copy

import pytest
import torch

from fedsheaf.models.encoders import AgentModel, CNNEncoder, build_agent_model
from fedsheaf.models.seeded import GeneratorDropout

torch.set_num_threads(1)


def images(b: int, c: int, h: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(b, c, h, h, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    "shape,widths",
    [
        ((1, 8), [4, 8]),
        ((1, 8), [4, 6, 8]),
        ((1, 8), [4, 6, 8, 10]),  # 8→4→2→1, last pool skipped
        ((1, 28), [4, 8, 12]),
        ((3, 32), [4, 6, 8, 10]),
        ((3, 32), [5, 7]),
    ],
)
@pytest.mark.parametrize("mode", ["standardize", "zca"])
def test_encoder_shapes(shape: tuple[int, int], widths: list[int], mode: str) -> None:
    c, h = shape
    enc = CNNEncoder(c, widths, whitening_mode=mode)
    for training in (True, False):
        enc.train(training)
        z = enc(images(5, c, h))
        assert z.shape == (5, widths[-1])
        assert torch.isfinite(z).all()


def test_agent_model_roundtrip() -> None:
    m = build_agent_model(1, [4, 8, 16], [12, 6], 0.3, 10, seed=0)
    assert isinstance(m, AgentModel) and m.latent_dim == 16
    x = images(6, 1, 8)
    m.eval()
    z = m.encode(x)
    assert z.shape == (6, 16)
    logits = m(x)
    assert logits.shape == (6, 10)
    torch.testing.assert_close(m.decode(z), logits)
    # the head sees un-whitened geometry: colour(encode(x)) = raw features
    torch.testing.assert_close(m.head.colouring(z), m.encoder.features(x), atol=1e-5, rtol=1e-5)
    # head without hidden layers
    m0 = build_agent_model(1, [4, 8], [], 0.0, 3, seed=0)
    assert m0(x).shape == (6, 3)


def test_train_step_runs_and_whitening_buffers_live_in_encoder() -> None:
    m = build_agent_model(1, [4, 8], [8], 0.2, 10, whitening_mode="zca", seed=1)
    keys = list(m.state_dict())
    assert any(k.startswith("encoder.whitening.running_cov") for k in keys)
    assert not any(k.startswith("head.colouring") for k in keys)
    m.train()
    m.set_dropout_generator(torch.Generator().manual_seed(0))
    loss = torch.nn.functional.cross_entropy(m(images(16, 1, 8)), torch.arange(16) % 10)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)
    twin = copy.deepcopy(m)
    assert twin.head.colouring.whitening is twin.encoder.whitening


def flat_params(m: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in m.parameters()])


def test_seeded_init_reproducible_and_rng_untouched() -> None:
    args = (3, [8, 16], [12], 0.1, 10)
    state = torch.get_rng_state()
    a = build_agent_model(*args, seed=123)
    b = build_agent_model(*args, seed=123)
    c = build_agent_model(*args, seed=124)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(flat_params(a), flat_params(b))
    assert not torch.equal(flat_params(a), flat_params(c))
    for (na, pa), (nc, pc) in zip(a.named_parameters(), c.named_parameters(), strict=True):
        assert na == nc
        if pa.numel() > 1 and "bn" not in na:  # BatchNorm starts at (1, 0) regardless
            assert not torch.equal(pa, pc), na


def test_seeded_init_matches_default_scale() -> None:
    m = build_agent_model(3, [32, 64], [128], 0.1, 10, seed=0)
    conv = m.encoder.blocks[1].conv.weight
    bound = (1.0 / conv[0].numel()) ** 0.5  # kaiming_uniform(a=√5) bound = 1/√fan_in
    assert conv.abs().max() <= bound
    assert conv.abs().max() > 0.9 * bound


def test_generator_dropout_is_reproducible() -> None:
    m = build_agent_model(1, [4, 8], [64], 0.5, 10, seed=0).train()
    drops = [mod for mod in m.modules() if isinstance(mod, GeneratorDropout)]
    assert len(drops) == 1
    x = images(4, 1, 8)
    outs = []
    for _ in range(2):
        m.set_dropout_generator(torch.Generator().manual_seed(9))
        outs.append(m(x))
    torch.testing.assert_close(outs[0], outs[1])
    m.set_dropout_generator(torch.Generator().manual_seed(10))
    assert not torch.allclose(outs[0], m(x))
    m.set_dropout_generator(None)  # the global RNG would not derive from the run seed
    with pytest.raises(RuntimeError, match="without a generator"):
        m(x)
    m.eval()(x)  # evaluation draws no masks


def test_bad_widths() -> None:
    with pytest.raises(ValueError):
        CNNEncoder(1, [])
    with pytest.raises(ValueError):
        build_agent_model(1, [4, 0], [], 0.1, 10, seed=0)
