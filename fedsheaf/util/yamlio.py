"""Strict YAML reading for configs, studies and graph files.

Three things plain ``yaml.safe_load`` does that a config must not:

* a key given twice in one mapping silently keeps the last value (a second
  ``train:`` section drops the first one whole);
* an anchor used twice (``&agent`` / ``*agent``, or ``<<: *agent``) gives the *same*
  Python object at both places, so an override of one agent changes every agent
  that shares the anchor; and
* YAML 1.1's plain scalars change what was typed: ``seed: 010`` is octal 8,
  ``epochs: 1:00`` base-60 60, ``0x10`` 16, ``1_000`` 1000, ``on``/``yes`` true.

:func:`load` refuses the first (a :class:`yaml.YAMLError` naming the key and its
line), copies the second apart, and reads plain numbers and booleans as the decimal
part of YAML 1.2's core schema (and JSON) does: decimal integers (leading zeros kept
decimal), decimal floats (``1e-3`` included, ``.inf``, ``.nan``) and ``true``/``false``.
Anything else (``0x10`` and ``0o17`` too) is a string, which the schema then refuses
where it wants a number or a boolean. :func:`dump` writes what :func:`load` reads back.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_INT, _FLOAT, _BOOL = (f"tag:yaml.org,2002:{t}" for t in ("int", "float", "bool"))


class _Loader(yaml.SafeLoader):
    """:class:`yaml.SafeLoader` with YAML 1.2's plain numbers and booleans."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT, _FLOAT, _BOOL)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
# integers before floats: a plain "10" is an integer
_RESOLVED = (
    (_INT, re.compile(r"^[-+]?[0-9]+$")),
    (
        _FLOAT,
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
    ),
)
for _tag, _rx in _RESOLVED:
    _Loader.add_implicit_resolver(_tag, _rx, list("-+0123456789."))


def _construct_int(loader: _Loader, node: yaml.ScalarNode) -> int:
    return int(loader.construct_scalar(node), 10)


_Loader.add_constructor(_INT, _construct_int)


class _Dumper(yaml.SafeDumper):
    """:class:`yaml.SafeDumper` that quotes exactly the strings :func:`load` would read as
    something else (``"1e3"``, ``"08"``), and no others."""


_Dumper.yaml_implicit_resolvers = {k: list(v) for k, v in _Loader.yaml_implicit_resolvers.items()}


def dump(data: Any, **options: Any) -> str:
    """``yaml.safe_dump(data, **options)`` whose text :func:`load` reads back as ``data``."""
    return yaml.dump(data, Dumper=_Dumper, **options)


def is_float_text(text: str) -> bool:
    """Whether ``text`` is a plain number :func:`load` reads as a float or an integer."""
    return any(rx.match(text) for tag, rx in _RESOLVED if tag in (_INT, _FLOAT))


#: What PyYAML's scalar constructors raise directly for a value they cannot build
#: (``2020-13-01`` as a date, ``!!float abc``), besides :class:`yaml.YAMLError`.
BAD_VALUE = (ValueError, TypeError, OverflowError)

_MERGE = "tag:yaml.org,2002:merge"
_VALUE = "tag:yaml.org,2002:value"


def _check_keys(loader: _Loader, node: yaml.Node, seen: set[int]) -> None:
    """Refuse a mapping that names one key twice (merged keys may be overridden).

    Keys are compared by the value they build, as the mapping would be, so ``true`` and
    ``True`` (or ``1`` and ``01``) are one key spelled twice.
    """
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, yaml.MappingNode):
            keys: dict[Any, yaml.Node] = {}
            for key, value in n.value:
                stack += [key, value]
                if key.tag == _MERGE or not isinstance(key, yaml.ScalarNode):
                    continue
                if key.tag == _VALUE:  # "=": PyYAML builds it only while merging
                    built: Any = (key.tag, key.value)
                else:
                    built = loader.construct_object(key)
                if built in keys:
                    first = keys[built]
                    spelled = "" if first.value == key.value else f", as {first.value!r}"
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping",
                        n.start_mark,
                        f"found the key {key.value!r} twice (the first at line "
                        f"{first.start_mark.line + 1}{spelled})",
                        key.start_mark,
                    )
                keys[built] = key
        elif isinstance(n, yaml.SequenceNode):
            stack += n.value


def _unshared(value: Any) -> Any:
    """``value`` with a fresh container at every place (no two places share one)."""
    if isinstance(value, dict):
        return {k: _unshared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unshared(v) for v in value]
    return value


def load(text: str) -> Any:
    """Parse one YAML document like ``yaml.safe_load``, but strictly (see the module).

    Raises :class:`yaml.YAMLError` (syntax, duplicate keys), one of :data:`BAD_VALUE`
    for a scalar that cannot be built, or :class:`RecursionError` for a document that
    nests too deeply or refers to itself.
    """
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_keys(loader, node, set())
        return _unshared(loader.construct_document(node))
    finally:
        loader.dispose()


def problem(exc: BaseException) -> str:
    """A YAML error on one line: where it is and what is wrong."""
    if isinstance(exc, RecursionError):
        return "nested too deeply (or an anchor that refers to itself)"
    if isinstance(exc, BAD_VALUE):
        return f"bad value ({exc})"
    mark = getattr(exc, "problem_mark", None)
    what = "; ".join(
        str(part) for part in (getattr(exc, "context", None), getattr(exc, "problem", None)) if part
    )
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{what or exc}".replace("\n", " ")
