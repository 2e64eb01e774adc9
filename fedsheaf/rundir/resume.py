"""Resuming a run directory: the config it was saved with, and what a resume may change.

``fedsheaf run --resume RUN_DIR`` reads ``RUN_DIR/config.yaml`` (:func:`resume_config`);
``checkpoint.resume=true`` with a config file checks the run directory's saved config
against it (:func:`check_resume`). Only :data:`RESUMABLE_KEYS` may differ: anything
else would mix two experiments in one run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from fedsheaf.config.schema import build
from fedsheaf.config.sections import (
    SERVER_BASED,
    ExperimentConfig,
    apply_overrides,
    error_source,
    flat_keys,
    override_leaves,
    read_yaml,
)
from fedsheaf.graphs import load_graph
from fedsheaf.rundir import checkpoint
from fedsheaf.util.errors import ConfigError, GraphError, relative_hint


def refuse_placing_override(run_dir: Path, text: str) -> None:
    """Refuse ``text`` where it says where the run goes: ``--resume RUN_DIR`` fixes that
    (``output.*``) and resumes (``checkpoint.resume``)."""
    keys = override_leaves(text)
    if any(k.split(".")[0] == "output" or k == "checkpoint.resume" for k in keys):
        raise ConfigError(
            f"cannot resume {run_dir} with '{text}': --resume continues the run in place "
            "(output.* and checkpoint.resume are its own); to start it over use "
            f"fedsheaf run {run_dir / 'config.yaml'} output.overwrite=true, to continue a "
            "copy elsewhere copy the directory and resume the copy"
        )


def resume_config(run_dir: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """The config of an existing run directory, set up to resume it in place.

    Reads ``RUN_DIR/config.yaml``, applies ``overrides`` and points ``output`` at
    ``RUN_DIR`` (wherever it now lives) with ``checkpoint.resume`` on.
    """
    path = Path(run_dir)
    if not path.exists():
        raise ConfigError(f"cannot resume {path}: no such directory")
    if not path.is_dir():
        raise ConfigError(f"cannot resume {path}: a file, not a run directory")
    if not (path / "config.yaml").is_file():
        raise ConfigError(
            f"cannot resume {path}: no config.yaml there (not a fedsheaf run directory)"
        )
    for text in overrides or []:
        refuse_placing_override(path, text)
    raw = apply_overrides(read_run_config(path / "config.yaml"), overrides or [])
    for section in ("output", "checkpoint"):
        if not isinstance(raw.get(section) or {}, dict):
            raise ConfigError(f"{path / 'config.yaml'}: '{section}' must be a section")
        raw[section] = dict(raw.get(section) or {})
    raw["output"].update(dir=str(path.resolve().parent), name=path.resolve().name, overwrite=False)
    raw["checkpoint"]["resume"] = True
    try:
        cfg = build(ExperimentConfig, raw)
    except ConfigError as exc:
        where = error_source(str(exc), overrides or [], str(path / "config.yaml"))
        raise ConfigError(f"{where}: {exc}") from None
    copy = path / GRAPH_COPY
    if cfg.graph and not Path(cfg.graph).exists() and copy.is_file():  # resumed elsewhere
        raise ConfigError(
            f"cannot resume {path}: its graph file {cfg.graph} does not exist"
            f"{relative_hint(cfg.graph)}; the run keeps a copy of its graph: add "
            f"graph={copy}"
        )
    return cfg


#: What a resumed run may change: its length, evaluation cadence, checkpointing, where
#: its files, data and key files are, its device and step timeout, and the step size (a
#: diverged run is resumed from its last checkpoint with a smaller ``train.lr``,
#: ``agents[i].lr`` or ``train.clip``), and which agents share a rank (a decentralized
#: run's checkpoints resume on any rank count and placement: the numbers are the same).
#: Anything else would mix two experiments. ``[*]`` stands for any agent, a trailing
#: ``.`` for a whole section.
RESUMABLE_KEYS = (
    "train.epochs",
    "train.eval_every",
    "train.device",
    "train.step_timeout",
    "train.lr",
    "train.clip",
    "train.placement",
    "train.release_memory",
    "agents[*].lr",
    "sheaf.overlap_exchange",
    "sheaf.recompute_pilots",
    "sheaf.mask_secret_dir",
    "federated.rounds",
    "federated.eval_every",
    "data.root",
    "data.download",
    "checkpoint.",
    "output.",
)


#: How a resume changes a key of :data:`RESUMABLE_KEYS`, where not by any override.
RESUMABLE_HOW = {
    "output.": " (by checkpoint.resume=true; --resume RUN_DIR keeps the run where it is)"
}


def _resumable(key: str) -> bool:
    pattern = re.sub(r"\[\d+\]", "[*]", key)
    return any(pattern == k or (k.endswith(".") and pattern.startswith(k)) for k in RESUMABLE_KEYS)


def resume_changes(
    saved: ExperimentConfig, cfg: ExperimentConfig, graph_copy: Path | None = None
) -> list[str]:
    """``key (old -> new)`` for every setting ``cfg`` changes that a resume may not.

    ``graph_copy``: the run's copy of its graph file (:data:`GRAPH_COPY`), if it has one.
    A changed ``graph`` path is accepted when it names the same graph as the old path
    or the copy (the run may be resumed from another directory, or on its copy); with a
    copy, a graph that differs from it is refused even under the same path (the file
    was edited, or a relative path now names another file).
    """
    old, new = flat_keys(saved.to_dict()), flat_keys(cfg.to_dict())
    copy = graph_copy if graph_copy is not None and graph_copy.is_file() else None
    changes = []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        if key == "graph" and b and copy is not None and (cfg.decentralized or cfg.hub_based):
            if not same_graph(b, copy):
                changes.append(
                    f"graph file {b} (it is not the graph the run started with, kept as "
                    f"{copy}: resume with graph={copy} to continue on that one)"
                )
            continue
        if a == b or _resumable(key):
            continue
        if key == "graph" and a and b and same_graph(a, b):
            continue
        changes.append(f"{key} ({a!r} -> {b!r})")
    return changes


def experiment_keys(cfg: ExperimentConfig) -> dict[str, Any]:
    """The settings of ``cfg`` that a resume may not change, as JSON values by dotted key:
    what checkpoints record (:func:`fedsheaf.rundir.checkpoint.commit`), so that a resume can
    tell an edited ``config.yaml``. The graph's path is left out (a resume may name the
    same graph elsewhere; :data:`GRAPH_COPY` checks the graph itself)."""
    flat = flat_keys(cfg.to_dict())
    kept = {k: v for k, v in flat.items() if k != "graph" and not _resumable(k)}
    return json.loads(json.dumps(kept))


def edited_since_checkpoint(run_dir: Path, cfg: ExperimentConfig) -> list[str]:
    """``key (recorded -> now)`` for every setting ``cfg`` gives otherwise than the
    newest checkpoints of ``run_dir`` were written under (none recorded: nothing)."""
    recorded = checkpoint.recorded_experiment(run_dir)
    if recorded is None:
        return []
    now = experiment_keys(cfg)
    return [
        f"{key} ({recorded[key]!r} -> {now[key]!r})"
        for key in sorted(recorded)
        if key in now and now[key] != recorded[key]
    ]


def check_same_data(run_dir: Path, digest: str, root: str) -> None:
    """Refuse to resume ``run_dir`` on a data set other than the one its checkpoints were
    trained on (``digest``: :func:`fedsheaf.data.sources.data_digest` of the data loaded
    now from ``root``); nothing to compare where none was recorded."""
    recorded = checkpoint.recorded_data(run_dir)
    if recorded is not None and recorded != digest:
        raise ConfigError(
            f"cannot resume {run_dir}: the data set loaded from data.root={root} differs "
            "from the one its checkpoints were trained on (its files have changed since); "
            "resume with the same data, or start over with output.overwrite=true"
        )


def same_graph(a: str | Path, b: str | Path) -> bool:
    """Whether two graph files hold the same graph (nodes, dims, classes, edges; comments,
    layout and name aside); False when either cannot be read."""
    try:
        ga, gb = load_graph(a), load_graph(b)
    except GraphError:
        return False
    return (ga.dims, ga.edges, ga.classes) == (gb.dims, gb.edges, gb.classes)


#: The copy of its graph file a decentralized run keeps in its directory, so that a
#: resume can check it trains on the same graph (paths may point elsewhere by then).
GRAPH_COPY = "graph.yaml"

#: Keys added after runs were first written, with the value a run config that lacks
#: them was run with, for the algorithms that read them (``federated.distinct_classes``:
#: the shard draw of server-based runs before it existed).
LEGACY_DEFAULTS = {("federated", "distinct_classes"): (True, SERVER_BASED)}


def load_run_config(path: Path) -> ExperimentConfig:
    """A run directory's ``config.yaml`` (:func:`read_run_config`), validated."""
    try:
        return build(ExperimentConfig, read_run_config(path))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def read_run_config(path: Path) -> dict[str, Any]:
    """A run directory's ``config.yaml`` as a raw mapping, with :data:`LEGACY_DEFAULTS`
    filled in where it predates a key (dump_config always writes every key)."""
    raw = read_yaml(path, what="run config")
    for (section, key), (value, algorithms) in LEGACY_DEFAULTS.items():
        part = raw.get(section)
        if isinstance(part, dict) and key not in part and raw.get("algorithm") in algorithms:
            part[key] = value
    return raw


def check_resume(run_dir: Path, cfg: ExperimentConfig) -> ExperimentConfig:
    """Refuse to resume ``run_dir`` (holding a config.yaml) under a different experiment;
    return the config it was saved with."""
    try:
        saved = load_run_config(run_dir / "config.yaml")
    except ConfigError as exc:
        raise ConfigError(f"cannot resume {run_dir}: its config.yaml: {exc}") from None
    changes = resume_changes(saved, cfg, run_dir / GRAPH_COPY)
    if changes:
        allowed = ", ".join(
            k.rstrip(".") + ("*" if k.endswith(".") else "") + RESUMABLE_HOW.get(k, "")
            for k in RESUMABLE_KEYS
        )
        raise ConfigError(
            f"cannot resume {run_dir} with a different experiment: {'; '.join(changes)}. "
            f"A resumed run may change only {allowed}; start a new run (another "
            "output.name) to change the others"
        )
    edited = edited_since_checkpoint(run_dir, cfg)
    if edited:
        raise ConfigError(
            f"cannot resume {run_dir}: its checkpoints were written under other settings "
            f"than its config.yaml now gives (was it edited?): {'; '.join(edited)}. Restore "
            "config.yaml (what a resume may change is given as overrides on the resume)"
        )
    return saved
