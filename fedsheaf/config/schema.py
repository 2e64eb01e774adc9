"""Typed, validated dataclasses from plain dicts.

A tiny schema layer used by :mod:`fedsheaf.config.sections`: each config section is a
dataclass whose fields carry their type hints and, optionally, a range or a set
of choices in ``field(metadata=...)``. :func:`build` turns a mapping into such a
dataclass, rejecting unknown keys (with a "did you mean" hint), wrong types and
out-of-range values with one message that names the dotted key.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from fedsheaf.util import yamlio
from fedsheaf.util.errors import ConfigError

T = TypeVar("T")


def spec(
    default: Any = dataclasses.MISSING,
    *,
    lo: float | None = None,
    hi: float | None = None,
    choices: tuple[Any, ...] | None = None,
    lo_open: bool = False,
    doc: str = "",
) -> Any:
    """A dataclass field with validation metadata.

    ``lo``/``hi`` bound numbers (``lo_open`` makes the lower bound strict);
    ``choices`` restricts the value to a fixed set; ``doc`` is what ``fedsheaf keys``
    lists beside the key (:func:`describe`).
    """
    meta = {"lo": lo, "hi": hi, "choices": choices, "lo_open": lo_open, "doc": doc}
    if isinstance(default, list | dict) or dataclasses.is_dataclass(default):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return {
            "int": "an integer",
            "float": "a number",
            "str": "a string",
            "bool": "true/false",
        }.get(tp.__name__, tp.__name__)
    return str(tp).replace("typing.", "")


def _convert(value: Any, tp: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(
            errors[0]
            if len(errors) == 1
            else f"config key '{key}': {shown(value)} is not {_type_name(tp)}"
        )
    if origin is list or origin is tuple:
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"config key '{key}' must be a list, got {shown(value)}")
        out = [_convert(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
        return out if origin is list else tuple(out)
    if origin is dict:  # keyword arguments of a plug-in: names to values
        (_, item_tp) = typing.get_args(tp) or (str, Any)
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"config key '{key}' must be a mapping of names to values, got {shown(value)}"
            )
        out_map = {}
        for name, item in value.items():
            if not isinstance(name, str):
                raise ConfigError(f"config key '{key}' has a key {shown(name)} that is not a name")
            out_map[name] = _convert(item, item_tp, f"{key}.{name}")
        return out_map
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return build(tp, value, key)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        # a quoted plain number ("5e-4") counts, as YAML would read it unquoted (not "1_0",
        # which Python's float() takes); NaN, infinities and overflows are errors
        if isinstance(value, int | float | str) and not isinstance(value, bool):
            number = None
            text = value.strip() if isinstance(value, str) else ""
            special = text.lower().lstrip("+-") in ("inf", "infinity", "nan")  # finite: below
            if not isinstance(value, str) or yamlio.is_float_text(text) or special:
                try:
                    number = float(value)
                except (ValueError, OverflowError):
                    number = None
            if number is not None and math.isfinite(number):
                return number
            if number is not None or not isinstance(value, str):
                raise ConfigError(f"config key '{key}' must be a finite number, got {shown(value)}")
    elif tp is str:
        if isinstance(value, str):
            return value
    else:
        raise TypeError(f"unsupported schema type {tp!r}")
    raise ConfigError(f"config key '{key}' must be {_type_name(tp)}, got {shown(value)}")


def shown(value: Any) -> str:
    """``value`` as an error message quotes it: YAML's words for booleans and null (what
    the user wrote: ``true``, not Python's ``True``), ``repr`` for the rest."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return repr(value)


def _check_range(value: Any, meta: Mapping[str, Any], key: str) -> None:
    if value is None:
        return
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise ConfigError(
            f"config key '{key}' must be one of {', '.join(map(str, choices))}; got {shown(value)}"
        )
    lo, hi = meta.get("lo"), meta.get("hi")
    values = value if isinstance(value, list | tuple) else [value]
    for v in values:
        if not isinstance(v, int | float):
            continue
        if lo is not None and (v < lo or (meta.get("lo_open") and v == lo)):
            rel = ">" if meta.get("lo_open") else ">="
            raise ConfigError(f"config key '{key}' must be {rel} {lo}, got {shown(v)}")
        if hi is not None and v > hi:
            raise ConfigError(f"config key '{key}' must be <= {hi}, got {shown(v)}")


def build(cls: type[T], data: Any, prefix: str = "") -> T:
    """Build dataclass ``cls`` from mapping ``data``, validating every key."""
    where = f"config key '{prefix}'" if prefix else "the config"
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a mapping of keys to values, got {shown(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    for key in data:
        if key not in fields:
            full = f"{prefix}.{key}" if prefix else str(key)
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(
                f"unknown config key '{full}'{hint}; valid keys here: {', '.join(fields)}"
            )
    kwargs = {}
    for name, f in fields.items():
        full = f"{prefix}.{name}" if prefix else name
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"missing required config key '{full}'")
            continue
        value = _convert(data[name], hints[name], full)
        _check_range(value, f.metadata, full)
        kwargs[name] = value
    obj = cls(**kwargs)
    check = getattr(obj, "check", None)
    if callable(check):
        check(prefix)
    return obj


def to_dict(obj: Any) -> Any:
    """Plain-data (YAML/JSON-safe) view of a dataclass tree."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list | tuple):
        return [to_dict(v) for v in obj]
    return obj


@dataclasses.dataclass(frozen=True)
class KeyDoc:
    """One config key as ``fedsheaf keys`` lists it."""

    key: str
    type: str
    default: str
    allowed: str
    doc: str


def _item_class(tp: Any) -> type | None:
    """The dataclass a field holds, directly or as ``list[...]`` items (else None)."""
    if typing.get_origin(tp) is list:
        (tp,) = typing.get_args(tp)
    return tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else None


def _allowed(meta: Mapping[str, Any]) -> str:
    if meta.get("choices"):
        return " | ".join(str(c) for c in meta["choices"])
    lo, hi = meta.get("lo"), meta.get("hi")
    low = "" if lo is None else f"{'>' if meta.get('lo_open') else '>='} {lo}"
    high = "" if hi is None else f"<= {hi}"
    return ", ".join(part for part in (low, high) if part)


def describe(cls: type, prefix: str = "") -> list[KeyDoc]:
    """Every leaf key of dataclass ``cls`` (dotted; ``agents[i].x`` for list items)."""
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        key, tp = f"{prefix}{f.name}", hints[f.name]
        inner = _item_class(tp)
        if inner is not None:
            sub = f"{key}[i]." if typing.get_origin(tp) is list else f"{key}."
            rows.extend(describe(inner, sub))
            continue
        if f.default is not dataclasses.MISSING:
            default = json.dumps(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = json.dumps(f.default_factory())
        else:
            default = "(required)"
        name = _type_name(tp)
        short = {"an integer": "int", "a number": "float", "a string": "str", "true/false": "bool"}
        name = short.get(name, name)
        rows.append(KeyDoc(key, name, default, _allowed(f.metadata), f.metadata.get("doc", "")))
    return rows
