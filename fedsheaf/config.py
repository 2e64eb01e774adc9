"""Experiment configuration: YAML files, ``key=value`` overrides, validation.

A config file is one YAML mapping whose sections mirror the dataclasses below.
Every key is checked before any training starts: unknown keys, wrong types and
out-of-range values raise :class:`~fedsheaf.errors.ConfigError` naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedsheaf.errors import ConfigError
from fedsheaf.schema import build, spec, to_dict

DATASETS = ("digits", "mnist", "fashionmnist", "cifar10")
DECENTRALIZED = ("sheaf_frl", "noncoop")
SERVER_BASED = ("fedavg", "fedavg_ft", "fedrep", "fedper", "lg_fedavg", "local")
ALGORITHMS = DECENTRALIZED + SERVER_BASED


@dataclass
class DataConfig:
    dataset: str = spec("digits", choices=DATASETS)
    root: str = spec("data", doc="data root in torchvision layout")
    download: bool = spec(False, doc="let torchvision download missing files")
    split: str = spec("train", choices=("train", "test"))
    shift: float = spec(0.7, lo=0.0, hi=1.0, doc="label-shift strength s of Eq. 23")
    pilot_fraction: float = spec(0.1, lo=0.0, hi=0.5, lo_open=True)
    limit: int | None = spec(None, lo=1, doc="use only the first N samples (quick tests)")


@dataclass
class AgentConfig:
    encoder: list[int] = spec(lo=1, doc="output channels of the CNN blocks; d = last width")
    head: list[int] = spec(lo=1, doc="hidden widths of the head MLP")
    classes: list[int] = spec(lo=0, doc="target classes C_i")
    dropout: float = spec(0.1, lo=0.0, hi=0.95)

    @property
    def dim(self) -> int:
        return self.encoder[-1]

    def check(self, prefix: str) -> None:
        if not self.encoder:
            raise ConfigError(f"config key '{prefix}.encoder' needs at least one width")
        if not self.classes:
            raise ConfigError(f"config key '{prefix}.classes' needs at least one class")


@dataclass
class TrainConfig:
    epochs: int = spec(5, lo=1)
    batch_size: int = spec(64, lo=1)
    optimizer: str = spec("sgd", choices=("sgd", "nesterov", "adam"))
    lr: float = spec(0.01, lo=0.0, lo_open=True)
    momentum: float = spec(0.9, lo=0.0, hi=1.0)
    weight_decay: float = spec(5e-4, lo=0.0)
    clip: float | None = spec(1.0, lo=0.0, lo_open=True, doc="per-agent grad-norm clip")
    steps_per_epoch: int | None = spec(None, lo=1, doc="default: the largest agent's batches")
    eval_every: int = spec(1, lo=1)
    device: str = spec("auto", choices=("auto", "cpu", "cuda"))


@dataclass
class SheafConfig:
    lam: float = spec(0.1, lo=0.0, doc="penalty weight λ; λ_i = λ / d_i")
    pilot_batch: int = spec(64, lo=1, doc="K pilots per step")
    map_refresh: str = spec("epoch", choices=("epoch", "step"))
    whitening: str = spec("standardize", choices=("standardize", "zca"))


@dataclass
class FederatedConfig:
    """Server-based runs (SPEC §4): rank 0 serves, clients live on ranks 1..W."""

    model: str = spec("fedrep_cnn", choices=("fedrep_cnn",))
    clients: int = spec(100, lo=1)
    classes_per_client: int = spec(2, lo=1)
    train_per_client: int | None = spec(None, lo=1, doc="default: all of each client's shards")
    test_per_client: int | None = spec(None, lo=1)
    rounds: int = spec(100, lo=1)
    fraction: float = spec(0.1, lo=0.0, hi=1.0, lo_open=True, doc="participation r")
    local_epochs: int = spec(1, lo=1, doc="FedAvg/FedPer/LG-FedAvg local epochs")
    head_epochs: int = spec(10, lo=0, doc="FedRep τ: head epochs, body frozen")
    body_epochs: int = spec(5, lo=0, doc="FedRep τ_φ: body epochs, head frozen")
    finetune_epochs: int = spec(10, lo=0, doc="final local head fine-tuning")
    weighted: bool = spec(True, doc="average weighted by sample count")
    eval_last: int = spec(10, lo=1, doc="score = mean local test accuracy, last N rounds")
    eval_every: int = spec(1, lo=1, doc="evaluate every N rounds (the last eval_last always)")
    augment: bool = spec(False, doc="random crop + horizontal flip (CIFAR-10)")


@dataclass
class OutputConfig:
    dir: str = spec("runs")
    name: str | None = spec(None, doc="run directory name; default <name>-seed<seed>")
    overwrite: bool = spec(False, doc="replace an existing finished run directory")


@dataclass
class ExperimentConfig:
    name: str
    algorithm: str = spec("sheaf_frl", choices=ALGORITHMS)
    graph: str | None = spec(None, doc="graph file (graphs/*.yaml); decentralized only")
    agents: list[AgentConfig] = spec([], doc="one entry per graph node; decentralized only")
    seed: int = spec(0, lo=0)
    data: DataConfig = spec(DataConfig())
    train: TrainConfig = spec(TrainConfig())
    sheaf: SheafConfig = spec(SheafConfig())
    federated: FederatedConfig = spec(FederatedConfig())
    output: OutputConfig = spec(OutputConfig())

    @property
    def decentralized(self) -> bool:
        return self.algorithm in DECENTRALIZED

    def check(self, prefix: str) -> None:
        if self.decentralized:
            if self.graph is None:
                raise ConfigError(f"algorithm {self.algorithm} needs config key 'graph'")
            if not self.agents:
                raise ConfigError(f"algorithm {self.algorithm} needs config key 'agents'")
        n_classes = 10
        for i, agent in enumerate(self.agents):
            bad = [c for c in agent.classes if c >= n_classes]
            if bad:
                raise ConfigError(
                    f"config key 'agents[{i}].classes' has class ids {bad} "
                    f"outside 0..{n_classes - 1}"
                )

    def run_name(self) -> str:
        return self.output.name or f"{self.name}-seed{self.seed}"

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b=value`` into its key path and YAML-parsed value."""
    if "=" not in text:
        raise ConfigError(f"override '{text}' must look like key=value (e.g. train.epochs=3)")
    key, _, raw = text.partition("=")
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override '{text}' has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"override '{text}': cannot parse value: {exc}") from None
    return key.split("."), value


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key=value`` overrides to a raw config mapping (in place) and return it."""
    for text in overrides:
        path, value = parse_override(text)
        node = raw
        for i, part in enumerate(path[:-1]):
            nxt = node.get(part) if isinstance(node, dict) else None
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(
                    f"override '{text}': '{'.'.join(path[: i + 1])}' is not a section"
                )
            node = nxt
        node[path[-1]] = value
    return raw


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping, turning I/O and syntax problems into ConfigError."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {p} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {p} must hold a YAML mapping at top level")
    return raw


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Load, override and validate an experiment config."""
    raw = apply_overrides(read_yaml(path), overrides or [])
    try:
        return build(ExperimentConfig, raw)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def dump_config(cfg: ExperimentConfig) -> str:
    """The resolved config as YAML text (what goes into the run directory)."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
