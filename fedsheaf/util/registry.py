"""Name → factory registries for what users plug in (one registry per kind).

A config names a plug-in in one of three ways, tried in this order:

* ``"package.module:callable"`` -- imported where it is named (``callable`` may be a
  dotted attribute path, ``module:Class.build``);
* a built-in name, registered with :meth:`Registry.register`;
* the name of an installed plug-in: an entry point of the registry's group
  (``[project.entry-points."fedsheaf.aggregators"] mine = "mypkg.agg:Mine"``).

The factory found is called with the config's keyword arguments. Whatever goes wrong
(the name does not import, is not callable, does not take those arguments) is one
:class:`~fedsheaf.util.errors.ConfigError` line naming the config key.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from importlib import metadata
from typing import Any

from fedsheaf.util.errors import ConfigError

Factory = Callable[..., Any]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Registry:
    """Factories of one kind of plug-in, by name.

    Parameters
    ----------
    kind:
        What the factories build, in messages (``aggregator``).
    group:
        The entry-point group installed plug-ins register under (``fedsheaf.aggregators``).
    key:
        The config key that names one (``federated.aggregator``).
    args_key:
        The config key that holds its keyword arguments (``federated.aggregator_args``).
    """

    def __init__(self, kind: str, group: str, key: str, args_key: str) -> None:
        self.kind, self.group, self.key, self.args_key = kind, group, key, args_key
        self._builtin: dict[str, Factory] = {}

    def register(self, name: str, factory: Factory) -> Factory:
        """Register a built-in ``factory`` under ``name``; returns the factory."""
        if ":" in name or not name.strip():
            raise ValueError(f"a {self.kind} name must be a plain word, got {name!r}")
        if name in self._builtin:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._builtin[name] = factory
        return factory

    @property
    def builtin(self) -> list[str]:
        """The built-in names, in registration order."""
        return list(self._builtin)

    def installed(self) -> dict[str, metadata.EntryPoint]:
        """Installed plug-ins: the entry points of :attr:`group`, by name."""
        return {ep.name: ep for ep in metadata.entry_points(group=self.group)}

    def _fail(self, ref: str, what: str) -> ConfigError:
        return ConfigError(f"config key '{self.key}': {self.kind} {ref!r} {what}")

    def resolve(self, ref: str) -> Factory:
        """The factory ``ref`` names (see the module's docstring); ConfigError if none."""
        ref = ref.strip()
        if ":" in ref:
            found = self._import(ref)
        elif ref in self._builtin:
            return self._builtin[ref]
        else:
            plugins = self.installed()
            if ref not in plugins:
                raise self._unknown(ref, plugins)
            try:
                found = plugins[ref].load()
            except Exception as exc:  # a plug-in's own import error: said in one line
                raise self._fail(
                    ref, f"(entry point {plugins[ref].value!r}) cannot be loaded: {_one_line(exc)}"
                ) from None
        if not callable(found):
            raise self._fail(ref, f"is not callable (its type: {type(found).__name__})")
        return found

    def _unknown(self, ref: str, plugins: Mapping[str, Any]) -> ConfigError:
        names = self.builtin + sorted(set(plugins) - set(self._builtin))
        close = difflib.get_close_matches(ref, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return self._fail(
            ref,
            f"is unknown{hint}; built-in: {', '.join(self.builtin)}; installed plug-ins "
            f"(entry-point group {self.group}): {', '.join(sorted(plugins)) or 'none'}; or "
            "name your own as 'package.module:callable'",
        )

    def _import(self, ref: str) -> Any:
        module_name, _, attr = ref.partition(":")
        if not module_name or not attr or ":" in attr:
            raise self._fail(ref, "must look like 'package.module:callable'")
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                raise self._fail(
                    ref, f"does not import: no module named {exc.name!r} (is it on PYTHONPATH?)"
                ) from None
            raise self._fail(ref, f"does not import: {_one_line(exc)}") from None
        except Exception as exc:  # the user's module raised while being imported
            raise self._fail(ref, f"does not import: {_one_line(exc)}") from None
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise self._fail(ref, f"does not exist: {module_name} has no {attr!r}")
            obj = getattr(obj, part)
        return obj

    def create(self, ref: str, kwargs: Mapping[str, Any] | None = None) -> Any:
        """Call the factory ``ref`` names with ``kwargs`` (the config's arguments).

        Arguments it does not take, or required ones missing, are a ConfigError naming
        both keys; so is a ValueError or TypeError the factory raises (its own check of
        an argument)."""
        factory = self.resolve(ref)
        kwargs = dict(kwargs or {})
        try:
            inspect.signature(factory).bind(**kwargs)
        except TypeError as exc:
            raise self._fail(
                ref, f"does not take {self.args_key} {_shown(kwargs)}: {exc}"
            ) from None
        except ValueError:  # no signature to read (some built-ins): let the call decide
            pass
        try:
            return factory(**kwargs)
        except ConfigError:
            raise
        except (ValueError, TypeError) as exc:  # its own check of an argument
            why = " ".join(str(exc).split()) if isinstance(exc, ValueError) else _one_line(exc)
            raise self._fail(ref, f"refused {self.args_key} {_shown(kwargs)}: {why}") from None

    def names(self) -> Iterable[str]:
        """Every name :meth:`resolve` takes without a colon: built-ins, then plug-ins."""
        return self.builtin + sorted(set(self.installed()) - set(self._builtin))


def _shown(kwargs: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v!r}" for k, v in kwargs.items()) + "}"
