"""Property tests of the config parser: valid overrides round-trip, corruptions are ConfigErrors."""

from __future__ import annotations

import copy
import json
import string
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fedsheaf.config.sections as config_module
from fedsheaf.config.schema import build
from fedsheaf.config.sections import ExperimentConfig, dump_config, load_config, read_yaml
from fedsheaf.util.errors import ConfigError

QUICK = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
RAW = read_yaml(QUICK)
SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
finite = {"allow_nan": False, "allow_infinity": False}

VALID: dict[str, st.SearchStrategy[Any]] = {
    "seed": st.integers(0, 2**40),
    "train.epochs": st.integers(1, 10**6),
    "train.batch_size": st.integers(1, 4096),
    "train.lr": st.floats(1e-9, 1e3, **finite),
    "train.momentum": st.floats(0.0, 1.0),
    "train.weight_decay": st.floats(0.0, 1.0),
    "train.optimizer": st.sampled_from(["sgd", "nesterov", "adam"]),
    "train.clip": st.none() | st.floats(1e-6, 1e3, **finite),
    "train.steps_per_epoch": st.none() | st.integers(1, 10**4),
    "train.device": st.sampled_from(["auto", "cpu", "cuda"]),
    "sheaf.lam": st.floats(0.0, 1e3, **finite),
    "sheaf.pilot_batch": st.integers(1, 512),
    "sheaf.map_refresh": st.sampled_from(["epoch", "step"]),
    "data.shift": st.floats(0.0, 1.0),
    "data.limit": st.none() | st.integers(1, 10**6),
    "output.name": st.text(string.ascii_letters + string.digits + "-_.", min_size=1, max_size=16),
    "checkpoint.every": st.integers(0, 1000),
    "checkpoint.keep": st.integers(1, 20),
    "checkpoint.resume": st.booleans(),
    **{f"agents[{i}].lr": st.none() | st.floats(1e-6, 10.0, **finite) for i in range(4)},
    **{f"agents[{i}].dropout": st.floats(0.0, 0.95) for i in range(4)},
}


def _get(cfg: ExperimentConfig, key: str) -> Any:
    node: Any = cfg
    for part in key.replace("[", ".").replace("]", "").split("."):
        node = node[int(part)] if part.isdigit() else getattr(node, part)
    return node


@SETTINGS
@given(
    st.dictionaries(st.sampled_from(sorted(VALID)), st.none(), min_size=1).flatmap(
        lambda keys: st.fixed_dictionaries({k: VALID[k] for k in keys})
    )
)
def test_valid_overrides_apply_and_the_dump_reloads_equal(tmp_path_factory, values):
    overrides = [f"{k}={json.dumps(v)}" for k, v in values.items()]
    cfg = load_config(QUICK, overrides)
    for key, value in values.items():
        assert _get(cfg, key) == value, key
    path = tmp_path_factory.mktemp("dump") / "config.yaml"
    path.write_text(dump_config(cfg))
    assert load_config(path) == cfg


# ---- corruptions ---------------------------------------------------------------------
junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path into a raw config tree (mapping keys and list indices)."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    out = []
    for k, v in items:
        out.append((*prefix, k))
        if isinstance(v, dict | list):
            out.extend(_paths(v, (*prefix, k)))
    return out


PATHS = _paths(RAW)


def _node(raw: Any, path: tuple) -> Any:
    for k in path:
        raw = raw[k]
    return raw


#: Settings whose value in the quickstart config is a number (int or float, not bool).
SCALAR_NUMBERS = {
    p for p in PATHS if isinstance(v := _node(RAW, p), int | float) and not isinstance(v, bool)
}


def _build(raw: dict) -> ExperimentConfig | None:
    """Build, allowing only ConfigError; None when rejected. What is accepted must be a
    config that its own dump (what a run writes as config.yaml) loads back as."""
    try:
        cfg = build(ExperimentConfig, raw)
    except ConfigError:
        return None
    assert build(ExperimentConfig, yaml.safe_load(dump_config(cfg))) == cfg
    return cfg


@SETTINGS
@given(st.sampled_from(PATHS), junk)
def test_replacing_any_value_gives_a_config_or_a_config_error(path, value):
    raw = copy.deepcopy(RAW)
    _node(raw, path[:-1])[path[-1]] = value
    cfg = _build(raw)
    if cfg is not None and isinstance(value, str) and path in SCALAR_NUMBERS:
        raise AssertionError(f"text {value!r} accepted for the number at {path}")


@SETTINGS
@given(st.sampled_from(PATHS))
def test_deleting_any_key_gives_a_config_or_a_config_error(path):
    raw = copy.deepcopy(RAW)
    del _node(raw, path[:-1])[path[-1]]
    cfg = _build(raw)
    if cfg is not None and len(path) == 2 and all(isinstance(k, str) for k in path):
        # a deleted setting of a section takes its documented default
        section = getattr(cfg, path[0])
        default = getattr(type(section)(), path[1])
        assert getattr(section, path[1]) == default, path


FIELD_NAMES = {f.name for f in fields(ExperimentConfig)}
MAPPINGS = [()] + [p for p in PATHS if isinstance(_node(RAW, p), dict)]


@SETTINGS
@given(st.sampled_from(MAPPINGS), st.text(min_size=1, max_size=12), junk)
def test_an_unknown_key_anywhere_is_a_config_error(where, key, value):
    raw = copy.deepcopy(RAW)
    target = _node(raw, where)
    known = FIELD_NAMES if where == () else {f.name for f in fields(_section_type(where))}
    if key in known:
        return
    target[key] = value
    try:
        build(ExperimentConfig, raw)
    except ConfigError as exc:
        assert "unknown config key" in str(exc)
    else:
        raise AssertionError(f"unknown key {key!r} under {where} was accepted")


def _section_type(path: tuple) -> type:
    """The config dataclass of the mapping at ``path`` (annotations are strings here)."""
    cls: Any = ExperimentConfig
    for part in path:
        if not isinstance(part, int):
            name = {f.name: f.type for f in fields(cls)}[part]
            cls = getattr(config_module, name.removeprefix("list[").removesuffix("]"))
    return cls


@SETTINGS
@given(st.text(max_size=40))
def test_any_override_text_gives_a_config_or_a_config_error(text):
    try:
        load_config(QUICK, [text])
    except ConfigError:
        pass


QUICK_TEXT = QUICK.read_text()


@SETTINGS
@given(st.integers(0, len(QUICK_TEXT)), st.integers(0, 40), st.text(max_size=6))
def test_damaged_yaml_gives_a_config_or_a_config_error(tmp_path_factory, at, cut, insert):
    path = tmp_path_factory.mktemp("damaged") / "c.yaml"
    path.write_text(QUICK_TEXT[:at] + insert + QUICK_TEXT[at + cut :])
    try:
        load_config(path)
    except ConfigError:
        pass
