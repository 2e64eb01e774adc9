"""Paper architectures (SPEC Tables 2 and 3) as data."""

import dataclasses

import pytest

from fedsheaf.config.presets import (
    TABLE2,
    TABLE3_DIMS,
    AgentSpec,
    mnist15_graph,
    table3,
    table3_pair_graph,
)
from fedsheaf.util.errors import ConfigError, FedsheafError

# The d column of SPEC Table 2, typed in independently of the encoder widths.
TABLE2_D = (128, 224, 64, 128, 192, 96, 256, 144, 160, 80, 120, 240, 80, 96, 160)


def test_table2_has_15_agents_with_spec_dims() -> None:
    assert len(TABLE2) == 15
    assert tuple(a.dim for a in TABLE2) == TABLE2_D


def test_table2_spot_values() -> None:
    assert TABLE2[0] == AgentSpec((32, 64, 128), (256, 128, 64), 0.30, (4, 5, 6, 7, 8))
    assert TABLE2[9] == AgentSpec((32, 80), (100,), 0.05, (5, 6, 7, 8, 9))
    assert TABLE2[12].encoder == (20, 40, 60, 80)
    assert TABLE2[8].classes == (0, 2, 4, 6, 8)


def test_table2_entries_are_well_formed() -> None:
    for a in TABLE2:
        assert all(w > 0 for w in a.encoder + a.head)
        assert 0.0 <= a.dropout < 1.0
        assert list(a.classes) == sorted(set(a.classes))
        assert all(0 <= c <= 9 for c in a.classes)


def test_agent_spec_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        TABLE2[0].dropout = 0.5  # type: ignore[misc]


@pytest.mark.parametrize("d", [16, 32, 64, 128, 256, 512])
def test_table3(d: int) -> None:
    a0, a1 = table3(d)
    assert a0.dim == a1.dim == d
    assert a0.classes == (4, 5, 6, 7, 8, 9) and a0.dropout == 0.3
    assert a1.classes == (0, 1, 2, 3, 4, 5) and a1.dropout == 0.1


def test_table3_rows() -> None:
    assert table3(16) == (
        AgentSpec((4, 8, 16), (8, 4), 0.3, (4, 5, 6, 7, 8, 9)),
        AgentSpec((8, 16), (8,), 0.1, (0, 1, 2, 3, 4, 5)),
    )
    a0, a1 = table3(512)
    assert (a0.encoder, a0.head) == ((64, 128, 256, 512), (128, 64))
    assert (a1.encoder, a1.head) == ((64, 256, 512), (128, 64))
    assert TABLE3_DIMS == (16, 32, 64, 128, 256, 512)


@pytest.mark.parametrize("d", [0, 100, 1024, True, "128"])
def test_table3_rejects_other_dims(d: object) -> None:
    with pytest.raises(ConfigError, match="Table 3 has no latent dimension"):
        table3(d)  # type: ignore[arg-type]
    assert issubclass(ConfigError, FedsheafError)


def test_preset_graphs() -> None:
    g = mnist15_graph()
    assert g.n == 15 and g.dims == TABLE2_D and g.is_connected()
    assert g.classes == tuple(a.classes for a in TABLE2)
    p = table3_pair_graph(128)
    assert p.dims == (128, 128) and p.edges == ((0, 1),)
    assert p.tails(0) == [1] and p.heads(1) == [0]
