"""fedsheaf.config.schema: dataclasses from dicts with types, ranges, choices and did-you-mean."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fedsheaf.config.schema import build, spec, to_dict
from fedsheaf.util.errors import ConfigError


@dataclass
class Inner:
    width: int = spec(4, lo=1)
    tags: list[str] = spec([])


@dataclass
class Outer:
    name: str
    rate: float = spec(0.1, lo=0.0, lo_open=True, hi=1.0)
    mode: str = spec("a", choices=("a", "b"))
    flag: bool = spec(False)
    limit: int | None = spec(None, lo=1)
    sizes: list[int] = spec([1, 2], lo=1)
    inner: Inner = spec(Inner())
    many: list[Inner] = spec([])

    def check(self, prefix: str) -> None:
        if self.name == "forbidden":
            raise ConfigError("config key 'name' may not be 'forbidden'")


def test_defaults_are_fresh_copies():
    a, b = build(Outer, {"name": "x"}), build(Outer, {"name": "y"})
    a.sizes.append(3)
    a.inner.tags.append("t")
    assert b.sizes == [1, 2] and b.inner.tags == []


def test_values_convert_and_nest():
    cfg = build(
        Outer,
        {
            "name": "x",
            "rate": "5e-1",
            "limit": 3,
            "inner": {"width": 2},
            "many": [{"width": 7}, None],
            "sizes": (3, 4),
        },
    )
    assert cfg.rate == 0.5 and isinstance(cfg.rate, float)
    assert cfg.inner == Inner(2, []) and cfg.many == [Inner(7), Inner()]
    assert cfg.sizes == [3, 4] and build(Outer, {"name": "x", "rate": 1}).rate == 1.0


@pytest.mark.parametrize(
    "data,message",
    [
        ({}, "missing required config key 'name'"),
        ({"name": "x", "rat": 0.5}, "unknown config key 'rat' (did you mean 'rate'?)"),
        ({"name": "x", "zzz": 1}, "unknown config key 'zzz'; valid keys here: name, rate"),
        ({"name": "x", "inner": {"widht": 2}}, "unknown config key 'inner.widht' (did you mean"),
        ({"name": "x", "many": [{}, {"wdth": 1}]}, "unknown config key 'many[1].wdth'"),
        ({"name": 3}, "config key 'name' must be a string, got 3"),
        ({"name": "x", "rate": "fast"}, "config key 'rate' must be a number, got 'fast'"),
        ({"name": "x", "rate": True}, "config key 'rate' must be a number, got true"),
        ({"name": "x", "rate": float("nan")}, "config key 'rate' must be a finite number"),
        ({"name": "x", "rate": "inf"}, "config key 'rate' must be a finite number"),
        ({"name": "x", "rate": 10**400}, "config key 'rate' must be a finite number"),
        ({"name": "x", "rate": 0.0}, "config key 'rate' must be > 0.0, got 0.0"),
        ({"name": "x", "rate": 1.5}, "config key 'rate' must be <= 1.0, got 1.5"),
        ({"name": "x", "mode": "c"}, "config key 'mode' must be one of a, b; got 'c'"),
        ({"name": "x", "flag": "yes please"}, "config key 'flag' must be true/false"),
        ({"name": "x", "flag": 1}, "config key 'flag' must be true/false, got 1"),
        ({"name": "x", "limit": 0}, "config key 'limit' must be >= 1, got 0"),
        ({"name": "x", "limit": 2.5}, "config key 'limit' must be an integer, got 2.5"),
        ({"name": "x", "sizes": 3}, "config key 'sizes' must be a list, got 3"),
        ({"name": "x", "sizes": [1, "b"]}, "config key 'sizes[1]' must be an integer"),
        ({"name": "x", "sizes": [1, 0]}, "config key 'sizes' must be >= 1, got 0"),
        ({"name": "x", "inner": 5}, "config key 'inner' must be a mapping of keys to values"),
        ({"name": "x", "inner": {"width": 0}}, "config key 'inner.width' must be >= 1"),
        ({"name": "forbidden"}, "config key 'name' may not be 'forbidden'"),
        ([1, 2], "the config must be a mapping"),
    ],
)
def test_bad_values_name_the_key(data, message):
    with pytest.raises(ConfigError) as err:
        build(Outer, data)
    assert message in str(err.value)


def test_to_dict_round_trips():
    cfg = build(Outer, {"name": "x", "many": [{"width": 3, "tags": ["p"]}], "limit": 2})
    plain = to_dict(cfg)
    assert plain["many"] == [{"width": 3, "tags": ["p"]}] and plain["inner"] == {
        "width": 4,
        "tags": [],
    }
    assert build(Outer, plain) == cfg


def test_unsupported_field_types_are_a_programming_error():
    @dataclass
    class Odd:
        x: complex = spec(1j)

    with pytest.raises(TypeError, match="unsupported schema type"):
        build(Odd, {"x": 2j})
