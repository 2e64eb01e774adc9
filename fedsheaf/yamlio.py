"""Strict YAML reading for configs, studies and graph files.

Two things plain ``yaml.safe_load`` does that a config must not:

* a key given twice in one mapping silently keeps the last value (a second
  ``train:`` section drops the first one whole), and
* an anchor used twice (``&agent`` / ``*agent``, or ``<<: *agent``) gives the *same*
  Python object at both places, so an override of one agent changes every agent
  that shares the anchor.

:func:`load` refuses the first (a :class:`yaml.YAMLError` naming the key and its
line) and copies the second apart.
"""

from __future__ import annotations

from typing import Any

import yaml

#: What PyYAML's scalar constructors raise directly for a value they cannot build
#: (``2020-13-01`` as a date, ``!!float abc``), besides :class:`yaml.YAMLError`.
BAD_VALUE = (ValueError, TypeError, OverflowError)

_MERGE = "tag:yaml.org,2002:merge"
_VALUE = "tag:yaml.org,2002:value"


def _check_keys(loader: yaml.SafeLoader, node: yaml.Node, seen: set[int]) -> None:
    """Refuse a mapping that names one key twice (merged keys may be overridden).

    Keys are compared by the value they build, as the mapping would be, so ``yes`` and
    ``true`` (or ``1`` and ``0x1``) are one key spelled twice.
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
    loader = yaml.SafeLoader(text)
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
