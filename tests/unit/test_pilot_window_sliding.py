"""``sheaf.window``: maps fitted on the last W pilot samples (SPEC §2, "pilot window").

A window of whole batches keeps each batch's cross-product; its fit is the fit on the
concatenated batches. With ``map_refresh: step`` it slides: W = K is Algorithm 1
exactly, bit for bit.
"""

from __future__ import annotations

import io

import pytest
import torch

from fedsheaf.config.sections import load_config
from fedsheaf.sheaf.maps import PilotWindow, stiefel_map, window_batches
from fedsheaf.util.errors import ConfigError
from tests.unit.test_overlap_exchange import build

torch.set_num_threads(1)


def _batches(n: int, k: int = 5) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(11)
    return [(torch.randn(6, k, generator=gen), torch.randn(4, k, generator=gen)) for _ in range(n)]


def test_a_window_of_batches_slides_and_fits_the_concatenation():
    batches = _batches(4)
    window = PilotWindow(batches=2)
    for head, tail in batches:
        window.add("j", head, tail)
    last = batches[2:]
    heads, tails = (torch.cat([b[i] for b in last], dim=1) for i in (0, 1))
    assert window.samples("j") == 10
    expect = heads.double() @ tails.double().T
    torch.testing.assert_close(window.cross("j"), expect, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(window.fit("j", torch.float32), stiefel_map(heads, tails))

    again = PilotWindow(batches=2)  # a checkpoint keeps the batches, not just their sum
    again.load_state(window.state())
    again.add("j", *batches[0])
    window.add("j", *batches[0])
    assert torch.equal(again.cross("j"), window.cross("j")) and again.samples("j") == 10

    unlimited = PilotWindow()
    for head, tail in batches:
        unlimited.add("j", head, tail)
    assert unlimited.samples("j") == 20 and isinstance(unlimited.state()["j"], tuple)
    with pytest.raises(ValueError, match="at least one batch"):
        PilotWindow(batches=0)


def test_window_sizes_round_up_to_whole_batches():
    assert window_batches(None, 32) is None
    assert [window_batches(w, 32) for w in (1, 32, 33, 64, 100)] == [1, 1, 2, 2, 4]


def test_a_window_of_k_refitted_every_step_is_algorithm_1():
    plain, _ = build(3, "sheaf.map_refresh=step")
    windowed, _ = build(3, "sheaf.map_refresh=step", "sheaf.window=32")
    wider, _ = build(3, "sheaf.map_refresh=step", "sheaf.window=64")
    for algo in (plain, windowed, wider):
        algo.train_epoch(0)
    for p, q in zip(plain.model.parameters(), windowed.model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert torch.equal(plain.maps[1], windowed.maps[1])
    assert wider.window.samples(1) == 64 and not torch.equal(plain.maps[1], wider.maps[1])

    resumed, _ = build(3, "sheaf.map_refresh=step", "sheaf.window=64")
    saved = io.BytesIO()  # through a checkpoint file's format
    torch.save(wider.extra_state(), saved)
    saved.seek(0)
    resumed.load_extra_state(torch.load(saved, weights_only=True))
    assert torch.equal(resumed.window.cross(1), wider.window.cross(1))
    assert resumed.window.samples(1) == 64


def test_the_transported_variants_refuse_a_window():
    with pytest.raises(ConfigError, match="sheaf.window applies to sheaf.variant=standard only"):
        load_config("configs/quickstart.yaml", ["sheaf.variant=strict", "sheaf.window=64"])
    assert load_config("configs/quickstart.yaml", ["sheaf.window=64"]).sheaf.window == 64
