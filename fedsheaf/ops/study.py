"""Study files: what a sweep varies, expanded into runs (no torch, no MPI).

A study file (``configs/*_sweep.yaml``) names one run config and what varies::

    study: study15                    # name (the sweep directory defaults to runs/<study>)
    config: configs/mnist15.yaml      # run config every run starts from
    output: runs/study15              # optional sweep directory
    seeds: [0, 1, 2]
    set: {train.epochs: 100}          # overrides for every run (mapping or key=value list)
    axis: {name: s, key: data.shift, values: [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]}
    methods:
      - {name: sheaf_frl, set: {algorithm: sheaf_frl}, grid: {sheaf.lam: [1.0e-5, 1.0e-3, 0.1]}}
      - {name: noncoop, set: {algorithm: noncoop}}

The axis either sets one config key (``key``) or uses a preset that writes a run
config per value into the sweep directory: ``preset: table3`` gives the two Table-3
agents at bottleneck ``d`` on a pair graph of that ``d`` (``graphs/pair-d<d>.yaml``).

Every run is ``method × axis value × grid point × seed`` and becomes the command
``mpiexec -n N fedsheaf run <config> key=value...`` with its own ``output.name`` under
``<sweep dir>/runs``. A decentralized method's runs take one rank per graph node by
default, or fewer holding several agents each: a method's ``ranks`` (1 to the node
count), or ``fedsheaf sweep --agents-per-rank K`` (ceil(nodes / K) ranks); FedProto and
FedMuscle take one rank per node plus a server rank (a method's ``ranks``, if given,
must be that count); a server-based method names its own (``ranks: 11``: a server and
1 to ``federated.clients`` workers). ``study.json`` in the sweep directory
(:func:`write_manifest`) records every run for ``fedsheaf report``; :mod:`fedsheaf.ops.sweep`
runs them or lists them.
"""

from __future__ import annotations

import itertools
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedsheaf.config.bundled import STUDY_PATHS, find_preset, lookup
from fedsheaf.config.ranks import check_ranks, rank_range, ranks_needed
from fedsheaf.config.sections import (
    ExperimentConfig,
    load_config,
    override_key,
    override_leaves,
    read_yaml,
)
from fedsheaf.rundir.files import is_run_dir, read_json_object
from fedsheaf.util import yamlio
from fedsheaf.util.atomic import atomic_write_json, atomic_write_text
from fedsheaf.util.errors import ConfigError, relative_hint
from fedsheaf.util.units import count

STUDY_KEYS = ("study", "config", "output", "seeds", "set", "axis", "methods")
METHOD_KEYS = ("name", "set", "grid", "ranks")
AXIS_KEYS = ("name", "key", "values", "preset")
PRESETS = ("table3",)


@dataclass
class Run:
    """One run of a study."""

    name: str
    method: str
    axis: str
    value: Any
    grid: dict[str, Any]
    seed: int
    config: str
    overrides: list[str]
    ranks: int
    dir: str
    extra: dict[str, Any] = field(default_factory=dict)

    def argv(self, launcher: list[str], fedsheaf: list[str]) -> list[str]:
        """The full command line of this run."""
        fill = [part.replace("{n}", str(self.ranks)) for part in launcher]
        return [*fill, *fedsheaf, "run", self.config, *self.overrides]


@dataclass
class Method:
    """One entry of a study's ``methods``, checked: its overrides, grid and rank count
    (None: the one count its runs take, see :func:`_ranks`)."""

    name: str
    overrides: list[str]
    grid: dict[str, list[Any]]
    ranks: int | None

    def points(self) -> list[dict[str, Any]]:
        """Every point of the grid (one empty point without a grid)."""
        keys = list(self.grid)
        return [dict(zip(keys, p, strict=True)) for p in itertools.product(*self.grid.values())]


@dataclass
class Study:
    name: str
    path: str
    output: Path
    axis: str
    grid_keys: list[str]
    runs: list[Run]
    #: a preset axis: (preset, base config, values), whose run configs the runs name
    preset: tuple[str, str, list[Any]] | None = None
    #: the data its runs read from files (data set, data root, split), download off: graph
    #: runs read data.split, server-based runs both splits
    data: set[tuple[str, str, str]] = field(default_factory=set)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _yaml_value(value: Any) -> str:
    """``value`` as the right-hand side of a ``key=value`` override (YAML)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _fmt(value)
    if isinstance(value, str) and _reads_back(value):
        return value
    text = yamlio.dump(value, default_flow_style=True, width=10**6).strip()
    return text.removesuffix("...").strip()


def _reads_back(text: str) -> bool:
    """Whether ``text`` written as is reads back as the same string (not ``1e3``, ``08``)."""
    try:
        return yamlio.load(text) == text
    except (yaml.YAMLError, RecursionError, *yamlio.BAD_VALUE):
        return False


def _as_overrides(raw: Any, where: str) -> list[str]:
    """``set:`` as a mapping ``{key: value}`` or a list of ``key=value`` strings."""
    if raw is None:
        return []
    if isinstance(raw, dict):
        return [f"{k}={_yaml_value(v)}" for k, v in raw.items()]
    if isinstance(raw, list) and all(isinstance(x, str) and "=" in x for x in raw):
        return list(raw)
    raise ConfigError(f"{where} must be a mapping of config keys to values or a key=value list")


def _unknown(raw: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    bad = [k for k in raw if k not in allowed]
    if bad:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(map(str, bad))}; valid keys: {', '.join(allowed)}"
        )


def _list(raw: Any, where: str) -> list[Any]:
    """A non-empty list without repeats (a repeated seed or value would be one run twice)."""
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where} must be a non-empty list")
    for i, value in enumerate(raw):
        if value in raw[:i]:
            first = _yaml_value(raw[raw.index(value)])
            if first == _yaml_value(value):
                raise ConfigError(f"{where} lists {first} twice")
            raise ConfigError(  # YAML's true == 1 and 8 == 8.0 in Python: one run
                f"{where} lists {first} and {_yaml_value(value)}, which are one value "
                "(the same run twice)"
            )
    return raw


def _path(raw: dict[str, Any], key: str, where: str, default: str = "") -> Path:
    """The study's ``key``, a path (``default`` where it is not given)."""
    value = raw.get(key) or default
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: '{key}' must be a path, not {_yaml_value(value)}")
    return Path(value)


def _preset_config(preset: str, value: Any, base: Path, out: Path) -> Path:
    """Write the run config (and graph) of preset ``preset`` at ``value`` under ``out``.

    Returns the config's path relative to ``out``.
    """
    from fedsheaf.config.presets import table3, table3_pair_graph
    from fedsheaf.graphs import save_graph

    if preset != "table3":
        raise ConfigError(f"unknown axis preset {preset!r}; choose one of {', '.join(PRESETS)}")
    d = value
    graph_path = out / "graphs" / f"pair-d{d}.yaml"
    agents = table3(d)  # raises ConfigError for a d outside Table 3
    graph_path.parent.mkdir(parents=True, exist_ok=True)
    save_graph(table3_pair_graph(d), graph_path, comment=f"Table 3 pair, d={d} (fedsheaf sweep)")
    raw = read_yaml(base)
    raw["graph"] = str(graph_path)
    raw["agents"] = [
        {
            "encoder": list(a.encoder),
            "head": list(a.head),
            "dropout": a.dropout,
            "classes": list(a.classes),
        }
        for a in agents
    ]
    cfg_path = Path("configs") / f"{base.stem}-d{d}.yaml"
    atomic_write_text(
        out / cfg_path,
        f"# {base} with the Table 3 agents at d={d} (written by fedsheaf sweep)\n"
        + yamlio.dump(raw, sort_keys=False),
    )
    return cfg_path


def expand(
    study_path: str | Path,
    extra: list[str] | None = None,
    write: bool = True,
    output: str | Path | None = None,
    agents_per_rank: int | None = None,
) -> Study:
    """Read a study file and list its runs (validating every run's config).

    ``extra`` overrides go to every run, after the study's own. ``output`` replaces the
    study's sweep directory. ``agents_per_rank`` K runs a decentralized method without
    its own ``ranks`` on ceil(N / K) ranks (N agents; default one rank per agent). A
    preset axis's run configs and graphs are validated in a scratch folder; once every
    run is valid, ``write`` writes them into the sweep directory
    (:func:`write_presets`), where the runs name them.
    """
    with tempfile.TemporaryDirectory(prefix="fedsheaf-sweep-") as scratch:
        study = _expand(Path(study_path), list(extra or []), Path(scratch), output, agents_per_rank)
    if write:
        write_presets(study)
    return study


def write_presets(study: Study) -> None:
    """Write a preset axis's run configs and graphs into the sweep directory."""
    if study.preset is not None:
        preset, base, values = study.preset
        for value in values:
            _preset_config(preset, value, Path(base), study.output)


def _check_not_owned(overrides: list[str], owned: dict[str, str], where: str) -> None:
    """Refuse an override of a key the sweep sets for each run (the sweep's would win).

    ``owned`` maps keys (a trailing ``.``: a whole section) to the reason. A section or
    list set whole counts by the keys it holds (``data={shift: 0.2}`` sets data.shift).
    """
    for item in overrides:
        for key in override_leaves(item):
            why = owned.get(key) or next(
                (w for k, w in owned.items() if k.endswith(".") and key.startswith(k)), None
            )
            if why:
                whole = override_key(item)
                held = f"{whole} holds {key}, which" if whole != key else f"{key}"
                raise ConfigError(f"{where}: {held} is set by the sweep for each run; {why}")


def _method(raw: Any, where: str, owned: dict[str, str]) -> Method:
    """Check one entry of ``methods`` (its ``set`` may not hold ``owned`` keys, nor its
    own grid keys)."""
    if not isinstance(raw, dict) or "name" not in raw:
        raise ConfigError(f"{where}: every method needs at least a 'name'")
    _unknown(raw, METHOD_KEYS, f"{where}: method {raw.get('name')}")
    here = f"{where}: method {raw['name']}"
    grid = raw.get("grid") or {}
    if not isinstance(grid, dict):
        raise ConfigError(f"{here}: 'grid' must map keys to value lists")
    ranks = raw.get("ranks")
    if ranks is not None and (isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1):
        raise ConfigError(
            f"{here}: 'ranks' must be a whole number of MPI ranks, 1 or more, "
            f"not {_yaml_value(ranks)}"
        )
    method = Method(
        str(raw["name"]),
        _as_overrides(raw.get("set"), f"{here} 'set'"),
        {str(k): _list(v, f"{here}: grid {k}") for k, v in grid.items()},
        ranks,
    )
    # a grid over the axis, the seed or output.* would silently replace the sweep's value
    _check_not_owned([f"{k}=0" for k in method.grid], owned, f"{here}: grid")
    for key, points in method.grid.items():
        mapping = next((v for v in points if isinstance(v, dict)), None)
        if mapping is not None:
            raise ConfigError(
                f"{here}: grid {key} lists the mapping {_yaml_value(mapping)}; grid values "
                "are numbers, strings, booleans or lists (grid each key of a section instead)"
            )
    _check_not_owned(method.overrides, {**owned, **_grid_owned([method])}, f"{here} 'set'")
    return method


def _grid_owned(methods: list[Method], hint: str = "") -> dict[str, str]:
    """The grid keys of ``methods`` (full keys) -> which methods grid them (for
    :func:`_check_not_owned`)."""
    held: dict[str, list[str]] = {}
    for m in methods:
        for key in m.grid:
            held.setdefault(override_key(f"{key}=0"), []).append(m.name)
    return {
        key: f"it is a grid key of {'method' if len(names) == 1 else 'methods'} "
        f"{', '.join(names)}{hint}"
        for key, names in held.items()
    }


def _ranks(
    method: Method,
    cfg: ExperimentConfig,
    where: str,
    tag: str,
    known: dict[Any, tuple[int, int]],
    agents_per_rank: int | None = None,
) -> int:
    """The rank count of run ``tag`` of ``method``: its ``ranks``, checked against the
    run as the job would check it; without one, a decentralized run's one rank per agent
    (``agents_per_rank`` K: ceil(N / K) ranks), the one count a hub run or a server-based
    run with a single client takes, a server-based run's server and ceil(clients / K)
    workers (with ``agents_per_rank``), else an error.

    ``known`` keeps what ``ranks_needed`` said for each graph file and client count, so
    that a study reads each graph once.
    """
    key = (cfg.algorithm, cfg.graph, cfg.federated.clients)
    if key not in known:
        known[key] = ranks_needed(cfg)
    (lo, hi), n = known[key], method.ranks
    needed = rank_range(known[key])
    graph_run = cfg.decentralized or cfg.hub_based
    if n is None and cfg.decentralized:  # 1 to N ranks: N by default
        return hi if agents_per_rank is None else -(-hi // agents_per_rank)
    if n is None and lo == hi:  # a hub run, or a server and a single client
        return lo
    if n is None and agents_per_rank is not None and not graph_run:
        # a server and ceil(clients / K) workers, each hosting K of the clients
        return max(lo, min(hi, 1 - (-cfg.federated.clients // agents_per_rank)))
    if n is None:
        raise ConfigError(
            f"{where}: method {method.name}: server-based algorithm {cfg.algorithm} runs on "
            f"{needed} ranks (a server and worker ranks that host the "
            f"{count(cfg.federated.clients, 'client')}); choose how many with the method's "
            "'ranks' (or --agents-per-rank K: K clients a worker)"
        )
    if cfg.decentralized and not lo <= n <= hi:
        raise ConfigError(
            f"{where}: method {method.name}: ranks {n} does not fit run {tag}: "
            f"{cfg.algorithm} runs on {needed} ranks there (the graph's {count(hi, 'agent')} "
            "share them); leave 'ranks' out for one rank per agent"
        )
    if cfg.hub_based and n != lo:
        raise ConfigError(
            f"{where}: method {method.name}: ranks {n} does not fit run {tag}: "
            f"{cfg.algorithm} runs on exactly {needed} ranks there (one per graph node "
            "plus a server rank); leave 'ranks' out to get that"
        )
    if not graph_run:
        try:
            check_ranks(cfg, n)
        except ConfigError as exc:
            raise ConfigError(
                f"{where}: method {method.name}: ranks {n} does not fit run {tag}: {exc}"
            ) from None
    return n


def check_sweep_dir(out: Path, study: str) -> None:
    """Refuse a sweep directory that is (or lies inside) a run directory, or that holds
    another study's ``study.json`` (the same study's is continued)."""
    where = f"sweep directory {out}"
    choose = "choose another sweep directory (--out DIR or the study's 'output')"
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{where} is a file; {choose}")
    run = next((p for p in (out.absolute(), *out.absolute().parents) if is_run_dir(p)), None)
    if run == out.absolute():
        raise ConfigError(f"{where} is a run directory (a run's config.yaml and results); {choose}")
    if run is not None:
        raise ConfigError(f"{where} lies inside the run directory {run}; {choose}")
    manifest = out / "study.json"
    if not manifest.exists():
        return
    try:
        other = read_json_object(manifest).get("study")
    except (ConfigError, OSError):
        other = None
    if other == study:
        return
    if not isinstance(other, str):
        raise ConfigError(f"{where} holds a study.json that no sweep wrote; {choose}")
    raise ConfigError(
        f"{where} holds the runs of study {other} (its study.json), not of study {study}; {choose}"
    )


def _expand(
    path: Path,
    extra: list[str],
    scratch: Path,
    output: str | Path | None,
    agents_per_rank: int | None = None,
) -> Study:
    shipped = find_preset(path, what="study file")  # `fedsheaf sweep study15_sweep`
    if shipped is not None:
        path = shipped.path
    where = f"study file {path}"
    raw = read_yaml(path, what="study file")
    if shipped is not None:  # its run config is one of the presets
        raw = shipped.rebase(raw, STUDY_PATHS)
    _unknown(raw, STUDY_KEYS, where)
    for key in ("study", "config", "axis", "methods"):
        if raw.get(key) is None:
            raise ConfigError(f"{where} needs key '{key}'")
    name = str(raw["study"])
    base = _path(raw, "config", where)
    # a preset's runs name their config as a preset (`fedsheaf run mnist15 ...`), whose
    # graph then resolves against the presets wherever the run starts
    run_config = base
    by_name = lookup(base)
    if by_name is not None:  # `config: mnist15` in any study
        base, run_config = by_name.path, Path(by_name.name)
    elif shipped is not None and base.parent == shipped.root / "configs":
        run_config = Path(base.stem) if base.suffix == ".yaml" else base
    if not base.is_file() and not base.is_dir():
        raise ConfigError(
            f"{where}: run config {base} does not exist{relative_hint(base)}; a study's "
            "paths are read from where the sweep is started, not from the study file's "
            "folder"
        )
    if "study" in read_yaml(base, what=f"{where}: run config"):
        raise ConfigError(
            f"{where}: run config {base} is a study file, not a run config; name the "
            "config every run starts from"
        )
    out = Path(output) if output else _path(raw, "output", where, f"runs/{name}")
    check_sweep_dir(out, name)
    seeds = _list(raw.get("seeds", [0]), f"{where}: 'seeds'")
    study_set = _as_overrides(raw.get("set"), f"{where}: 'set'")
    owned = {
        "seed": "list the seeds under the study's 'seeds'",
        "output.": "choose the sweep directory with the study's 'output' or --out DIR "
        "(and rerun finished runs with --local --force)",
        "checkpoint.resume": "interrupted runs are resumed by --local and by every --emit line",
    }

    axis = raw["axis"]
    if not isinstance(axis, dict):
        raise ConfigError(f"{where}: 'axis' must be a mapping with name, values and key or preset")
    _unknown(axis, AXIS_KEYS, f"{where}: axis")
    values = _list(axis.get("values"), f"{where}: axis 'values'")
    if ("key" in axis) == ("preset" in axis):
        raise ConfigError(f"{where}: the axis needs exactly one of 'key' or 'preset'")
    axis_name = str(axis.get("name") or axis.get("key") or axis.get("preset"))
    if "key" in axis:
        axis_key = override_key(f"{axis['key']}=0")
        owned[axis_key] = "it is the study's axis (list its values under 'axis')"

    methods = [_method(m, where, owned) for m in _list(raw["methods"], f"{where}: 'methods'")]
    named = Counter(m.name for m in methods)
    again = next((n for n, k in named.items() if k > 1), None)
    if again is not None:
        raise ConfigError(f"{where}: two methods are named {again}; give them distinct names")
    in_grid = _grid_owned(methods, "; to fix it for the other methods, use their own 'set'")
    _check_not_owned(study_set, {**owned, **in_grid}, f"{where}: 'set'")
    _check_not_owned(extra, {**owned, **in_grid}, "--set")
    grid_keys = list(dict.fromkeys(k for m in methods for k in m.grid))
    runs: list[Run] = []
    data: set[tuple[str, str, str]] = set()
    known: dict[Any, tuple[int, int]] = {}
    for value in values:
        if "preset" in axis:
            written = _preset_config(str(axis["preset"]), value, base, scratch)
            cfg_path, check_path = out / written, scratch / written
            axis_over: list[str] = []
        else:
            cfg_path = check_path = run_config
            axis_over = [f"{axis['key']}={_yaml_value(value)}"]
        for m in methods:
            for gp, seed in itertools.product(m.points(), seeds):
                tag = "-".join(
                    [m.name, f"{axis_name}{_fmt(value)}"]
                    + [f"{k.split('.')[-1]}{_fmt(v)}" for k, v in gp.items()]
                    + [f"seed{seed}"]
                )
                overrides = (
                    study_set
                    + extra
                    + m.overrides
                    + axis_over
                    + [f"{k}={_yaml_value(v)}" for k, v in gp.items()]
                    + [f"seed={seed}", f"output.dir={out / 'runs'}", f"output.name={tag}"]
                )
                try:
                    cfg = load_config(check_path, overrides)
                except ConfigError as exc:
                    raise ConfigError(f"study {name}, run {tag}: {exc}") from None
                if not cfg.data.download:
                    graph_run = cfg.decentralized or cfg.hub_based
                    for split in (cfg.data.split,) if graph_run else ("train", "test"):
                        data.add((cfg.data.dataset, cfg.data.root, split))
                runs.append(
                    Run(
                        tag,
                        m.name,
                        axis_name,
                        value,
                        gp,
                        int(seed),
                        str(cfg_path),
                        overrides,
                        _ranks(m, cfg, where, tag, known, agents_per_rank),
                        str(out / "runs" / tag),
                        {"algorithm": cfg.algorithm, "device": cfg.train.device},
                    )
                )
    again = next((t for t, k in Counter(r.name for r in runs).items() if k > 1), None)
    if again is not None:
        raise ConfigError(
            f"{where}: two different runs would both be named {again} (values that differ "
            "only past the 6 significant digits of run names, or a method name that reads "
            "as another's run names); make them differ"
        )
    preset = (str(axis["preset"]), str(base), values) if "preset" in axis else None
    return Study(name, str(path), out, axis_name, grid_keys, runs, preset, data)


def write_manifest(study: Study) -> Path:
    """``study.json``: every run's method, axis value, grid point, seed and directory."""
    path = study.output / "study.json"
    atomic_write_json(
        path,
        {
            "study": study.name,
            "file": study.path,
            "axis": study.axis,
            "grid_keys": study.grid_keys,
            "runs": [asdict(r) for r in study.runs],
        },
    )
    return path
