import copy

import pytest
import torch

from fedsheaf.models.whitening import Colouring, Whitening, sym_matrix_power

F64 = torch.float64
MODES = ["standardize", "zca"]


def correlated(n: int, d: int, seed: int, dtype: torch.dtype = F64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(d, d, generator=g, dtype=F64) + 2 * torch.eye(d, dtype=F64)
    shift = 3 * torch.randn(d, generator=g, dtype=F64)
    return (torch.randn(n, d, generator=g, dtype=F64) @ mix + shift).to(dtype)


def trained(mode: str, data: torch.Tensor, epochs: int = 30, batch: int = 100) -> Whitening:
    w = Whitening(data.shape[1], mode=mode, momentum=0.1).to(data.dtype)
    w.train()
    for _ in range(epochs):
        for start in range(0, len(data), batch):
            w(data[start : start + batch])
    return w.eval()


@pytest.mark.parametrize("mode", MODES)
def test_eval_whitens_training_data(mode: str) -> None:
    data = correlated(1000, 6, seed=0)
    w = trained(mode, data)
    with torch.no_grad():
        out = w(data)
    torch.testing.assert_close(out.mean(0), torch.zeros(6, dtype=F64), atol=0.05, rtol=0)
    cov = torch.cov(out.T)
    if mode == "standardize":
        torch.testing.assert_close(torch.diagonal(cov), torch.ones(6, dtype=F64), atol=0.05, rtol=0)
    else:
        torch.testing.assert_close(cov, torch.eye(6, dtype=F64), atol=0.05, rtol=0)


@pytest.mark.parametrize("mode", MODES)
def test_train_mode_whitens_the_batch(mode: str) -> None:
    data = correlated(200, 5, seed=1)
    out = Whitening(5, mode=mode, eps=1e-9).to(F64).train()(data)
    torch.testing.assert_close(out.mean(0), torch.zeros(5, dtype=F64), atol=1e-10, rtol=0)
    cov = out.T @ out / len(out)
    if mode == "standardize":
        torch.testing.assert_close(torch.diagonal(cov), torch.ones(5, dtype=F64))
    else:
        torch.testing.assert_close(cov, torch.eye(5, dtype=F64))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("training", [True, False])
def test_colour_inverts_whiten(mode: str, training: bool) -> None:
    data = correlated(300, 4, seed=2)
    w = trained(mode, data)
    c = Colouring(w)
    w.train(training)
    c.train(training)
    z = data[:50]
    torch.testing.assert_close(c(w(z)), z, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("mode", MODES)
def test_colour_whiten_identity_for_autograd(mode: str) -> None:
    # In training the batch statistics depend on z, and colour shares them: d(c∘w)/dz = I.
    z = correlated(40, 3, seed=3).requires_grad_()
    w = Whitening(3, mode=mode).to(F64).train()
    c = Colouring(w).train()
    g_out = torch.randn(40, 3, generator=torch.Generator().manual_seed(4), dtype=F64)
    (grad,) = torch.autograd.grad(c(w(z)), z, g_out)
    torch.testing.assert_close(grad, g_out, atol=1e-8, rtol=1e-8)


def test_zca_gradient_finite_when_batch_smaller_than_dim() -> None:
    z = correlated(5, 12, seed=5, dtype=torch.float32).requires_grad_()
    w = Whitening(12, mode="zca").train()
    out = w(z)
    (out**3).sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(z.grad).all()


def test_sym_matrix_power_gradcheck() -> None:
    g = torch.Generator().manual_seed(6)
    x = torch.randn(4, 4, generator=g, dtype=F64)
    s = (x @ x.T + 0.5 * torch.eye(4, dtype=F64)).requires_grad_()
    for p in (-0.5, 0.5):
        assert torch.autograd.gradcheck(lambda m, p=p: sym_matrix_power(0.5 * (m + m.T), p), (s,))
    # repeated eigenvalues (identity): divided differences must fall back to f'
    eye = torch.eye(3, dtype=F64).requires_grad_()
    assert torch.autograd.gradcheck(lambda m: sym_matrix_power(0.5 * (m + m.T), -0.5), (eye,))


@pytest.mark.parametrize("mode", MODES)
def test_single_sample_in_training_uses_running_stats(mode: str) -> None:
    data = correlated(300, 4, seed=7)
    w = trained(mode, data).train()
    before = {k: v.clone() for k, v in w.state_dict().items()}
    z = data[:1]
    out = w(z)
    assert torch.isfinite(out).all()
    w.eval()
    torch.testing.assert_close(out, w(z))
    for k, v in w.state_dict().items():
        assert torch.equal(v, before[k])
    w.train()
    torch.testing.assert_close(Colouring(w).train()(w(z)), z)


def test_running_stats_update_and_reset() -> None:
    w = Whitening(3, momentum=0.5).to(F64)
    data = correlated(64, 3, seed=8)
    w.train()(data)
    torch.testing.assert_close(w.running_mean, 0.5 * data.mean(0))
    torch.testing.assert_close(w.running_var, 0.5 + 0.5 * data.var(0))
    w.reset_running_stats()
    assert torch.equal(w.running_var, torch.ones(3, dtype=F64))


def test_colouring_shares_but_does_not_own_whitening() -> None:
    w = Whitening(4, mode="zca")
    c = Colouring(w)
    assert list(c.state_dict()) == []
    assert c.whitening is w
    model = torch.nn.ModuleDict({"enc": w, "head": c})
    model.train()
    model["enc"](torch.randn(8, 4, generator=torch.Generator().manual_seed(0)).requires_grad_())
    twin = copy.deepcopy(model)  # the grad-carrying cache must not break deepcopy
    assert twin["head"].whitening is twin["enc"]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        Whitening(3, mode="pca")
    with pytest.raises(ValueError):
        Whitening(3)(torch.zeros(2, 4))
