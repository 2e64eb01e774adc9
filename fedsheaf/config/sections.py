"""Experiment configuration: YAML files, ``key=value`` overrides, validation.

A config file is one YAML mapping whose sections mirror the dataclasses below.
Every key is checked before any training starts: unknown keys, wrong types and
out-of-range values raise :class:`~fedsheaf.util.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from fedsheaf.config.bundled import find_preset
from fedsheaf.config.schema import build, spec, to_dict
from fedsheaf.util import yamlio
from fedsheaf.util.errors import ConfigError

DECENTRALIZED = ("sheaf_frl", "noncoop", "comfed", "sheaf_fmtl")
# Heterogeneous-agent baselines with a central server: rank 0 serves, agents on ranks 1..N.
HUB_BASED = ("fedproto", "fedmuscle")
SERVER_BASED = ("fedavg", "fedavg_ft", "fedrep", "fedper", "lg_fedavg", "local", "head_fedavg")
ALGORITHMS = DECENTRALIZED + HUB_BASED + SERVER_BASED
#: Entry-point group of decentralized algorithm plug-ins (config key ``algorithm``).
ALGORITHM_GROUP = "fedsheaf.algorithms"
# Methods that need every agent to have the same latent dimension d.
EQUAL_DIM_ONLY = ("fedproto", "fedmuscle")


@dataclass
class DataConfig:
    dataset: str = spec(
        "digits",
        doc="digits (scikit-learn's bundled 8×8 digits, no files), mnist, fashionmnist, "
        "cifar10 (from data.root), an installed plug-in (entry-point group fedsheaf.datasets) "
        "or 'package.module:callable'; docs/configuration.md",
    )
    dataset_args: dict[str, Any] = spec(
        {}, doc="keyword arguments of data.dataset's loader (a plug-in's; the built-ins take none)"
    )
    root: str = spec(
        "data", doc="data root (torchvision layout for the built-ins; given to a plug-in)"
    )
    download: bool = spec(False, doc="let the loader (torchvision) download missing files")
    split: str = spec(
        "train",
        choices=("train", "test"),
        doc="graph runs: the split that is partitioned into the pilot set and "
        "the agents' train/val/test shards (server runs use both splits)",
    )
    partition: str = spec(
        "label_shift",
        doc="graph runs: how the agents' pools are drawn: label_shift (Eq. 23: data.shift, "
        "agents[].classes), dirichlet (Dir(data.dirichlet_alpha) label proportions), an "
        "installed plug-in (entry-point group fedsheaf.partitions) or "
        "'package.module:callable'; docs/configuration.md",
    )
    dirichlet_alpha: float = spec(
        0.5, lo=0.0, lo_open=True, doc="data.partition=dirichlet: concentration α"
    )
    partition_args: dict[str, Any] = spec(
        {},
        doc="keyword arguments of data.partition other than label_shift (dirichlet: "
        "{min_size: 10})",
    )
    shift: float = spec(0.7, lo=0.0, hi=1.0, doc="label-shift strength s of Eq. 23")
    pilot_fraction: float = spec(
        0.1,
        lo=0.0,
        hi=0.5,
        lo_open=True,
        doc="share of the samples of the classes every agent observes that forms the shared "
        "pilot set",
    )
    limit: int | None = spec(None, lo=1, doc="use only the first N samples (quick tests)")


#: The built-in agent model, the one that ``agents[i].encoder`` and ``head`` describe.
CNN_MODEL = "cnn"
#: The built-in cnn's head dropout unless ``agents[i].dropout`` says otherwise.
CNN_DROPOUT = 0.1


@dataclass(kw_only=True)
class AgentConfig:
    encoder: list[int] | None = spec(
        None,
        lo=1,
        doc="model cnn (required there): output channels of the CNN blocks; d = last width",
    )
    head: list[int] | None = spec(
        None, lo=1, doc="model cnn (required there): hidden widths of the head MLP ([]: none)"
    )
    classes: list[int] = spec(lo=0, doc="target classes C_i")
    dropout: float = spec(
        CNN_DROPOUT,
        lo=0.0,
        hi=0.95,
        doc="model cnn: dropout after each hidden layer of the head (another model takes "
        "its own in model_args)",
    )
    lr: float | None = spec(
        None, lo=0.0, lo_open=True, doc="this agent's learning rate; default train.lr"
    )
    model: str = spec(
        CNN_MODEL,
        doc="the agent's model: cnn (the Table 2/3 CNN of encoder, head, dropout), an "
        "installed plug-in (entry-point group fedsheaf.models) or 'package.module:callable' "
        "with encode(x) -> (B, d) and decode(z) -> logits; d is checked against the graph "
        "file; docs/configuration.md",
    )
    model_args: dict[str, Any] = spec(
        {}, doc="keyword arguments of agents[i].model other than cnn (the factory's own)"
    )

    @property
    def is_cnn(self) -> bool:
        """Whether the agent's model is the built-in cnn (``encoder``/``head`` describe it)."""
        return self.model.strip() == CNN_MODEL

    @property
    def dim(self) -> int | None:
        """Latent dimension d: the last encoder width of the cnn; None for another model
        (known once built, and checked then against the graph file's dims)."""
        return self.encoder[-1] if self.is_cnn and self.encoder else None

    def check(self, prefix: str) -> None:
        if not self.model.strip():
            raise ConfigError(
                f"config key '{prefix}.model' is empty; name cnn, an installed plug-in or "
                "'package.module:callable'"
            )
        if self.is_cnn:
            for key in ("encoder", "head"):
                if getattr(self, key) is None:
                    raise ConfigError(
                        f"missing required config key '{prefix}.{key}' (the built-in cnn's "
                        f"{'block' if key == 'encoder' else 'hidden head'} widths; another "
                        f"model is named in {prefix}.model)"
                    )
            if not self.encoder:
                raise ConfigError(f"config key '{prefix}.encoder' needs at least one width")
            if self.model_args:
                raise ConfigError(
                    f"config key '{prefix}.model_args' is for a plug-in model; the built-in "
                    f"cnn reads {prefix}.encoder, {prefix}.head and {prefix}.dropout"
                )
        else:
            for key in ("encoder", "head"):
                if getattr(self, key):
                    raise ConfigError(
                        f"config key '{prefix}.{key}': {prefix}.encoder/head describe the "
                        f"built-in cnn only; give your model's arguments in {prefix}.model_args"
                    )
            if self.dropout != CNN_DROPOUT:
                raise ConfigError(
                    f"config key '{prefix}.dropout' is the built-in cnn's; {prefix}.model "
                    f"'{self.model}' ignores it: give your model its dropout in "
                    f"{prefix}.model_args"
                )
        if not self.classes:
            raise ConfigError(f"config key '{prefix}.classes' needs at least one class")


@dataclass
class TrainConfig:
    epochs: int = spec(5, lo=1, doc="training epochs (graph and hub runs)")
    batch_size: int = spec(64, lo=1, doc="private samples per step (B)")
    optimizer: str = spec(
        "sgd", choices=("sgd", "nesterov", "adam"), doc="each agent's (client's) optimizer"
    )
    lr: float = spec(0.01, lo=0.0, lo_open=True, doc="learning rate")
    momentum: float = spec(0.9, lo=0.0, hi=1.0, doc="momentum of sgd and nesterov")
    weight_decay: float = spec(5e-4, lo=0.0, doc="L2 weight decay")
    clip: float | None = spec(1.0, lo=0.0, lo_open=True, doc="per-agent grad-norm clip")
    steps_per_epoch: int | None = spec(None, lo=1, doc="default: the largest agent's batches")
    eval_every: int = spec(1, lo=1, doc="evaluate every N epochs (and after the last)")
    device: str = spec(
        "auto",
        choices=("auto", "cpu", "cuda"),
        doc="auto: a GPU per node-local rank where CUDA is visible, else the CPU",
    )
    placement: str = spec(
        "contiguous",
        choices=("contiguous", "min_cut"),
        doc="graph runs on fewer ranks than agents: which agents share a rank (contiguous: "
        "blocks of consecutive ids; min_cut: blocks that cut few graph edges)",
    )
    agent_gpus: str = spec(
        "spread",
        choices=("spread", "share"),
        doc="graph runs on fewer ranks than agents, on GPUs: spread = a rank's agents take "
        "turns over the node's GPUs it owns (the GPUs dealt out among the node's ranks: "
        "more memory, not more speed, as its agents run one at a time); share = all on the "
        "rank's one GPU. The same numbers either way",
    )
    release_memory: bool = spec(
        False,
        doc="graph runs on fewer ranks than agents: when an agent hands the turn to the "
        "next, hand the memory the rank freed back to the OS (glibc's malloc_trim, or "
        "tcmalloc's release where it is preloaded) if its resident set grew by over 64 MB "
        "since the last time: a lower peak host memory (15 Table-2 agents on one rank with "
        "sheaf.recompute_pilots: 1.5 -> 1.15 GB) for slower steps (about 20% there: the "
        "pages are touched again); the same numbers; no effect with one agent per rank or "
        "under another malloc",
    )
    step_timeout: float | None = spec(
        None,
        lo=0.0,
        lo_open=True,
        doc="seconds a rank may go without finishing a step or an exchange (evaluation and "
        "checkpoints included) before the job ends, naming the rank that holds it up (one "
        "stopped by SIGSTOP); null: wait for ever",
    )


@dataclass
class SheafConfig:
    lam: float = spec(
        0.1, lo=0.0, doc="penalty weight λ (λ_i = λ / d_i); also the baselines' cooperation weight"
    )
    pilot_batch: int = spec(64, lo=1, doc="K pilots per step")
    map_refresh: str = spec(
        "epoch",
        choices=("epoch", "step"),
        doc="refit the edge maps at the end of every epoch (from the pilot window) or at "
        "every step",
    )
    window: int | None = spec(
        None,
        lo=1,
        doc="W: fit the maps on the pilots of the last W samples (whole pilot batches, "
        "rounded up); with map_refresh=step a sliding window refitted every step; null: "
        "every batch since the last refresh (map_refresh=step: this step's, Algorithm 1)",
    )
    whitening: str = spec(
        "standardize",
        choices=("standardize", "zca"),
        doc="latent whitening at the end of every encoder: per-feature standardisation or full ZCA",
    )
    variant: str = spec(
        "standard",
        choices=("standard", "homogeneous", "strict"),
        doc="standard: Algorithm 1; homogeneous: Algorithm 2 (equal d, tail-side SVD only); "
        "strict: Algorithms 3/4 (only transported pilots leave a rank)",
    )
    pilot_strategy: str = spec(
        "uniform",
        choices=("uniform", "stratified", "prototype", "kmeans"),
        doc="uniform or per-class stratified pilot batches; class (prototype) or k-means "
        "group centroids as pilots",
    )
    prototype_members: int = spec(
        8, lo=1, doc="prototype/kmeans: pilots averaged per group and step"
    )
    parseval: bool = spec(False, doc="Parseval-normalise pilot matrices: A (AᵀA)^(-1/2)")
    fused_pilots: bool = spec(
        False,
        doc="encode the private batch and the pilots in one encoder call (faster where small "
        "batches leave the device idle; BatchNorm and whitening then use the union's batch "
        "statistics)",
    )
    overlap_exchange: bool = spec(
        False,
        doc="back-propagate the private batch while the pilots are in flight: the same "
        "gradients, bit for bit (each parameter is used once per forward pass, as in every "
        "fedsheaf model); meant for GPUs, which then compute while the step waits "
        "for neighbours (no gain measured on CPUs; slower where ranks outnumber cores); "
        "no effect with fused_pilots (one graph for both)",
    )
    recompute_pilots: bool = spec(
        False,
        doc="agents sharing a rank: encode the step's pilots without a graph before the "
        "exchange and again with one after it, instead of holding every agent's pilot graph "
        "while the rank's agents exchange (host memory of about one agent's activations "
        "instead of all of them, for one more pilot forward per step); the same numbers, "
        "bit for bit; no effect with one agent per rank or with fused_pilots",
    )
    mask_secret: str = spec(
        "os",
        choices=("os", "file"),
        doc="variant strict: each agent's secret for its masks and initial weights (never "
        "sent): os = fresh OS randomness per run, kept in the agent's own checkpoint; "
        "file = its own key file in mask_secret_dir (reproducible runs); docs/privacy.md",
    )
    mask_secret_dir: str | None = spec(
        None,
        doc="mask_secret=file: directory of the per-agent key files agent-<i>.key "
        "(each agent reads only its own)",
    )


@dataclass
class ComFedConfig:
    rank: int | None = spec(64, lo=1, doc="shared space dimension r; null: the largest d")


@dataclass
class FMTLConfig:
    gamma: float = spec(1e-3, lo=0.0, lo_open=True, doc="edge stalk size γ·min(n_i, n_j)")
    rate: float = spec(1e-2, lo=0.0, lo_open=True, doc="restriction-map learning rate η")


@dataclass
class FedProtoConfig:
    momentum: float = spec(0.9, lo=0.0, hi=1.0, doc="EMA momentum of the global prototypes")


@dataclass
class FedMuscleConfig:
    temperature: float = spec(0.1, lo=0.0, lo_open=True, doc="contrastive temperature τ")
    task_epochs: int = spec(4, lo=0, doc="task-only epochs per round")
    align_epochs: int = spec(1, lo=1, doc="epochs with the alignment loss per round")


@dataclass
class BaselineConfig:
    """Method-specific constants of the heterogeneous baselines (SPEC §3).

    Their cooperation weight is ``sheaf.lam`` (the λ that studies grid-search).
    """

    comfed: ComFedConfig = spec(ComFedConfig())
    fmtl: FMTLConfig = spec(FMTLConfig())
    fedproto: FedProtoConfig = spec(FedProtoConfig())
    fedmuscle: FedMuscleConfig = spec(FedMuscleConfig())


@dataclass
class FederatedConfig:
    """Server-based runs (SPEC §4): rank 0 serves, clients live on ranks 1..W."""

    model: str = spec(
        "fedrep_cnn",
        doc="the common model: fedrep_cnn (the FedRep authors' CNN), an installed plug-in "
        "(entry-point group fedsheaf.server_models) or 'package.module:callable' with "
        "representation(x) and a head submodule named by its HEAD attribute; "
        "docs/server-based.md",
    )
    model_args: dict[str, Any] = spec(
        {}, doc="keyword arguments of federated.model (the factory's own; fedrep_cnn: none)"
    )
    clients: int = spec(100, lo=1, doc="number of clients n")
    classes_per_client: int = spec(
        2,
        lo=1,
        doc="S: shards per client, one label each, drawn as the FedRep authors' code "
        "draws them (a client may get one class twice)",
    )
    distinct_classes: bool = spec(
        False, doc="swap shard labels between clients so that none repeats a class"
    )
    partition: str = spec(
        "shards",
        doc="how the clients' data is drawn: shards (FedRep, classes_per_client), dirichlet "
        "(Dir(federated.dirichlet_alpha) label proportions), an installed plug-in "
        "(entry-point group fedsheaf.partitions) or 'package.module:callable'; "
        "docs/server-based.md",
    )
    dirichlet_alpha: float = spec(
        0.5, lo=0.0, lo_open=True, doc="federated.partition=dirichlet: concentration α"
    )
    partition_args: dict[str, Any] = spec(
        {},
        doc="keyword arguments of federated.partition other than shards (dirichlet: "
        "{min_size: 10})",
    )
    train_per_client: int | None = spec(None, lo=1, doc="default: all of each client's shards")
    test_per_client: int | None = spec(
        None, lo=1, doc="test samples per client; default: all of its test shards"
    )
    rounds: int = spec(100, lo=1, doc="communication rounds")
    fraction: float = spec(0.1, lo=0.0, hi=1.0, lo_open=True, doc="participation r")
    local_epochs: int = spec(1, lo=1, doc="FedAvg/FedPer/LG-FedAvg local epochs")
    head_epochs: int = spec(10, lo=0, doc="FedRep τ: head epochs, body frozen")
    body_epochs: int = spec(5, lo=0, doc="FedRep τ_φ: body epochs, head frozen")
    finetune_epochs: int = spec(10, lo=0, doc="final local head fine-tuning")
    weighted: bool = spec(
        True,
        doc="average weighted by sample count (fedavg and the server optimisers' mean)",
    )
    aggregator: str = spec(
        "fedavg",
        doc="how the server combines the uploads: fedavg, fedadagrad, fedadam, fedyogi, "
        "median, trimmed_mean, an installed plug-in's name (entry-point group "
        "fedsheaf.aggregators) or 'package.module:callable'; docs/server-based.md",
    )
    aggregator_args: dict[str, Any] = spec(
        {},
        doc="keyword arguments of the aggregator (fedadam: {eta: 0.01, beta1: 0.9, "
        "beta2: 0.99, tau: 0.001}; trimmed_mean: {beta: 0.1})",
    )
    prox_mu: float = spec(
        0.0,
        lo=0.0,
        doc="FedProx: each client adds (μ/2)‖w − w_global‖² over the shared parameters it "
        "trains to its local loss (0: plain FedAvg local training)",
    )
    eval_last: int = spec(
        10,
        lo=1,
        doc="score = mean local test accuracy, last N rounds (all, when fewer; FedAvg+FT: final)",
    )
    eval_every: int = spec(1, lo=1, doc="evaluate every N rounds (the last eval_last always)")
    augment: bool = spec(False, doc="random crop + horizontal flip (CIFAR-10)")
    placement: str = spec(
        "dynamic",
        choices=("balanced", "dynamic", "static"),
        doc="which worker trains a sampled client: dynamic (the server hands the clients "
        "out longest first to whichever worker is free, so measured time, not size, "
        "balances the round), balanced (longest first to the least-loaded worker by "
        "training samples, decided ahead on every rank), or static (its home rank "
        "1 + c mod W). With 1 < W < clients and fewer than all clients per round (Local "
        "trains them all: static), dynamic and balanced make every worker hold every "
        "client's data and private parameters; all three give the same results",
    )


@dataclass
class HeadConfig:
    """Head-only FedAvg (SPEC §4, seed 002): regression data, UFM objective, options.

    The local objective is
    ``1/(2N_m)‖W H_m + b1ᵀ − Y_m‖² + λ_H/(2N_m)‖H_m‖² + λ_W/2‖W‖²`` with ``H_m`` the
    private backbone's features; ``federated.local_epochs`` is E, ``train.*`` the optimiser.
    """

    data: str = spec(
        "diabetes3",
        choices=("diabetes3", "geo"),
        doc="diabetes3 (tabular, scikit-learn) or geo (shift/zoom view of data.dataset)",
    )
    lam_H: float = spec(0.01, lo=0.0, lo_open=True, doc="feature penalty λ_H")
    lam_W: float = spec(0.01, lo=0.0, lo_open=True, doc="head penalty λ_W")
    rho: float = spec(0.0, lo=0.0, doc="proximal weight ρ on ‖W − W_t‖²/2")
    align: bool = spec(False, doc="rotate each trained head to the broadcast (Procrustes)")
    moment_gamma: float = spec(0.0, lo=0.0, hi=1.0, doc="scale γ of the moment correction")
    backbone: list[int] = spec(
        [128, 128], lo=1, doc="MLP hidden widths (diabetes3) or conv channels (geo)"
    )
    features: int | None = spec(None, lo=1, doc="feature width P (>= targets C); default 2C")
    lr_min: float | None = spec(
        None, lo=0.0, doc="cosine decay of train.lr to this value within each round"
    )
    test_fraction: float = spec(
        0.2, lo=0.0, hi=0.9, lo_open=True, doc="held-out share when the set has no test split"
    )

    def check(self, prefix: str) -> None:
        if self.features is not None and self.features < 3:
            raise ConfigError(
                f"config key '{prefix}.features' must be >= 3 (the regression targets C), "
                f"got {self.features}"
            )


@dataclass
class CheckpointConfig:
    """Checkpoint/resume of decentralized and server-based runs (see fedsheaf.rundir.checkpoint)."""

    every: int = spec(
        1, lo=0, doc="write a checkpoint every N epochs (rounds) and after the last; 0 = never"
    )
    keep: int = spec(2, lo=1, doc="complete checkpoints kept on disk")
    resume: bool = spec(False, doc="continue from the newest complete checkpoint, if any")


#: Classes of every built-in data set (:mod:`fedsheaf.data.sources`): class ids of graph
#: files written for them run 0..N_CLASSES-1 (``fedsheaf graph --classes``). A run checks
#: agents[i].classes against its data set's own count once loaded.
N_CLASSES = 10


def is_plain_name(value: str, room: int = 0) -> bool:
    """Whether ``value`` can be one file or directory name: not blank, not . or .., no
    path separator or NUL, at most 255 bytes less ``room`` (for a suffix added to it)."""
    return (
        bool(value.strip())
        and value not in (".", "..")
        and not {"/", "\\", "\0"} & set(value)
        and len(value.encode("utf-8", "surrogatepass")) <= 255 - room
    )


def require_plain_name(
    value: str,
    option: str,
    names: str,
    hint: str,
    error: type[Exception] = ConfigError,
    suffix: str = "",
) -> None:
    """Refuse ``value`` for command option ``option`` unless :func:`is_plain_name` (with
    room for the file ``suffix``); the message says what it ``names``, gives the ``hint``."""
    if not is_plain_name(value, len(suffix.encode())):
        raise error(
            f"{option} {value!r} must be a plain name (not blank, no '/' or '\\', not . or "
            f".., at most {255 - len(suffix.encode())} bytes): it names {names}; {hint}"
        )


def check_plain_name(value: str, key: str) -> None:
    """A name that becomes one directory name: no path separators, not empty, not . or .."""
    if not value.strip() or value in (".", "..") or "/" in value or "\\" in value:
        raise ConfigError(
            f"config key '{key}' must be a plain name (one directory name, no '/'), "
            f"got {value!r}; use output.dir to choose where runs go"
        )
    if "\0" in value or len(value.encode("utf-8", "surrogatepass")) > 255:
        raise ConfigError(
            f"config key '{key}' must be a plain name of at most 255 bytes without NUL "
            f"characters (a directory name), got {value[:40]!r}"
            + ("..." if len(value) > 40 else "")
        )


@dataclass
class OutputConfig:
    dir: str = spec("runs", doc="where run directories are created")
    name: str | None = spec(None, doc="run directory name; default <name>-<algorithm>-seed<seed>")
    overwrite: bool = spec(False, doc="replace an existing finished run directory")
    tensorboard: bool = spec(
        False,
        doc="also write TensorBoard event files under RUN_DIR/tb/ (needs the tensorboard "
        "package: pip install 'fedsheaf[tensorboard]'); metrics.jsonl stays the record",
    )

    def check(self, prefix: str) -> None:
        if self.name is not None:
            check_plain_name(self.name, f"{prefix}.name")


_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


#: Plain names of decentralized algorithms registered in this process besides the
#: built-ins (``fedsheaf.register_algorithm``; the algorithm registry adds them here).
REGISTERED_ALGORITHMS: set[str] = set()


def installed_algorithms() -> list[str]:
    """The names of the decentralized algorithm plug-ins known here: those registered in
    this process and the installed ones (entry points of :data:`ALGORITHM_GROUP`), sorted."""
    installed = {ep.name for ep in metadata.entry_points(group=ALGORITHM_GROUP)}
    return sorted(installed | REGISTERED_ALGORITHMS)


def unknown_algorithm(ref: str, installed: Iterable[str]) -> ConfigError:
    """The one line for config key ``algorithm`` = ``ref`` when it names nothing: the
    closest name (built-in or installed), the built-ins, the installed plug-ins. The
    algorithm registry (:mod:`fedsheaf.algorithms.registry`) says the same words."""
    plugins = sorted(set(installed) - set(ALGORITHMS))
    close = difflib.get_close_matches(ref.strip(), [*ALGORITHMS, *plugins], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(
        f"config key 'algorithm': algorithm {ref!r} is unknown{hint}; built-in: "
        f"{', '.join(ALGORITHMS)}; installed plug-ins (entry-point group {ALGORITHM_GROUP}): "
        f"{', '.join(plugins) or 'none'}; or name your own as 'package.module:callable'"
    )


def check_algorithm_ref(ref: str) -> None:
    """Refuse config key ``algorithm`` = ``ref`` where no import is needed to tell: a plain
    name that is neither built-in nor an installed plug-in's (with a did-you-mean), or
    an inline reference not of the form ``package.module:callable``. Whether a plug-in
    imports and builds a DecentralizedAlgorithm is checked where a job validates before
    training (:mod:`fedsheaf.algorithms.registry`)."""
    if ref in ALGORITHMS:
        return
    if ":" in ref:
        module, _, attr = ref.partition(":")
        if not (_DOTTED.fullmatch(module) and _DOTTED.fullmatch(attr)):
            raise ConfigError(
                f"config key 'algorithm': algorithm {ref!r} must look like "
                "'package.module:callable'"
            )
        return
    installed = installed_algorithms()
    if ref not in installed:
        raise unknown_algorithm(ref, installed)


def is_algorithm_ref(value: object) -> bool:
    """Whether ``value`` reads as a value of config key ``algorithm`` (a run directory's
    config, whatever is installed now): a built-in's name, an inline
    ``package.module:callable``, or a plain word (an installed plug-in's name)."""
    if not isinstance(value, str):
        return False
    if ":" in value:
        module, _, attr = value.partition(":")
        return bool(_DOTTED.fullmatch(module) and _DOTTED.fullmatch(attr))
    return value in ALGORITHMS or re.fullmatch(r"[\w.-]+", value) is not None


def algorithm_label(ref: str) -> str:
    """The algorithm's part of a run directory's name: the name itself, or, for an inline
    ``package.module:Name`` (``package.module:Class.build``), the last attribute."""
    return ref.rpartition(":")[2].rpartition(".")[2] if ":" in ref else ref


@dataclass
class ExperimentConfig:
    name: str = spec(doc="experiment name (the run directory's first part)")
    algorithm: str = spec(
        "sheaf_frl",
        doc="the method to run: decentralized sheaf_frl, noncoop, comfed, sheaf_fmtl; with a "
        "server rank fedproto, fedmuscle; server-based fedavg, fedavg_ft, fedrep, fedper, "
        "lg_fedavg, local, head_fedavg; or a decentralized algorithm plug-in: an installed "
        "one's name (entry-point group fedsheaf.algorithms) or 'package.module:callable'; "
        "docs/configuration.md",
    )
    algorithm_args: dict[str, Any] = spec(
        {},
        doc="keyword arguments of a decentralized algorithm plug-in, called as "
        "factory(agent, nbr, reporter, **algorithm_args)",
    )
    graph: str | None = spec(None, doc="graph file (graphs/*.yaml); decentralized only")
    agents: list[AgentConfig] = spec([], doc="one entry per graph node; decentralized only")
    seed: int = spec(0, lo=0, doc="run seed: every random choice derives from it")
    data: DataConfig = spec(DataConfig())
    train: TrainConfig = spec(TrainConfig())
    sheaf: SheafConfig = spec(SheafConfig())
    baseline: BaselineConfig = spec(BaselineConfig())
    federated: FederatedConfig = spec(FederatedConfig())
    head: HeadConfig = spec(HeadConfig())
    output: OutputConfig = spec(OutputConfig())
    checkpoint: CheckpointConfig = spec(CheckpointConfig())

    @property
    def decentralized(self) -> bool:
        """A decentralized method: a built-in one or any algorithm plug-in."""
        return self.algorithm not in HUB_BASED + SERVER_BASED

    @property
    def hub_based(self) -> bool:
        """Heterogeneous agents on a graph plus one server rank (FedProto, FedMuscle)."""
        return self.algorithm in HUB_BASED

    def check(self, prefix: str) -> None:
        check_plain_name(self.name, "name")
        check_algorithm_ref(self.algorithm)
        run_name = self.run_name()
        if self.output.name is None and len(run_name.encode("utf-8", "surrogatepass")) > 255:
            raise ConfigError(
                f"the run directory name <name>-<algorithm>-seed<seed> ({run_name[:40]!r}...) "
                "is longer than 255 bytes; shorten config key 'name' or set output.name"
            )
        if self.decentralized or self.hub_based:
            if self.graph is None:
                raise ConfigError(f"algorithm {self.algorithm} needs config key 'graph'")
            if not self.agents:
                raise ConfigError(f"algorithm {self.algorithm} needs config key 'agents'")
        if self.checkpoint.resume and self.output.overwrite:
            raise ConfigError(
                "config keys 'checkpoint.resume' and 'output.overwrite' exclude each other"
            )
        # (agents[i].classes against the data set's classes: once it is known, before
        # training, fedsheaf.runtime.experiment.check_agent_classes)
        self._check_method()

    def _check_method(self) -> None:
        """Setups a method cannot handle: one readable error before any rank starts."""
        # (a plug-in model's d is known once built: build_graph and the model check it)
        dims = sorted({a.dim for a in self.agents if a.dim is not None})
        if len(dims) > 1 and self.algorithm in EQUAL_DIM_ONLY:
            raise ConfigError(
                f"algorithm {self.algorithm} needs every agent to have the same latent "
                f"dimension d (last encoder width), but the agents have d = {dims}; use "
                "sheaf_frl, noncoop, comfed or sheaf_fmtl for unequal dimensions"
            )
        if self.sheaf.window is not None and self.sheaf.variant != "standard":
            raise ConfigError(
                f"sheaf.window applies to sheaf.variant=standard only: the {self.sheaf.variant} "
                "variant's messages are transported by maps that change at every refit, so "
                "older batches cannot stay in a window; leave sheaf.window null"
            )
        strict = self.algorithm == "sheaf_frl" and self.sheaf.variant == "strict"
        if strict and self.sheaf.mask_secret == "file" and self.sheaf.mask_secret_dir is None:
            raise ConfigError(
                "sheaf.mask_secret=file reads each agent's key from sheaf.mask_secret_dir "
                "(agent-<i>.key); set it, or use sheaf.mask_secret=os"
            )
        if len(dims) > 1 and self.algorithm == "sheaf_frl" and self.sheaf.variant == "homogeneous":
            raise ConfigError(
                f"sheaf.variant=homogeneous (Algorithm 2) needs equal latent dimensions, but "
                f"the agents have d = {dims}; use sheaf.variant=standard or strict"
            )

    def ignored_settings(self) -> list[str]:
        """What this config sets (away from the defaults) that its algorithm never reads,
        as ``keys (what such runs read instead)``: a warning, not an error, since one
        file may serve several methods."""
        hub = "decentralized and hub methods only"
        if self.decentralized or self.hub_based:
            unused = {"federated": "server-based methods only", "head": "head_fedavg only"}
        else:
            unused = {
                "graph": hub,
                "agents": hub,
                "sheaf": hub,
                "baseline": hub,
                "train.epochs": "server-based runs count federated.rounds and "
                "federated.local_epochs, for FedRep head_epochs and body_epochs",
                "train.steps_per_epoch": "server-based runs train whole local epochs",
                "train.eval_every": "server-based runs read federated.eval_every",
                "data.partition": "server-based runs read federated.partition",
                "data.dirichlet_alpha": "server-based runs read federated.partition",
                "data.partition_args": "server-based runs read federated.partition",
            }
            if self.algorithm != "head_fedavg":
                unused["head"] = "head_fedavg only"
            if self.algorithm == "local":
                unused["federated.fraction"] = "Local trains every client in every round"
                for key in ("aggregator", "aggregator_args", "prox_mu"):
                    unused[f"federated.{key}"] = "Local shares nothing with the server"
        if not self.decentralized:
            unused["algorithm_args"] = "decentralized algorithms only"
        plugin = self.algorithm not in ALGORITHMS  # (what it reads is its own business)
        if self.decentralized or self.hub_based:  # (baseline.* may serve the file's other methods)
            if self.sheaf.pilot_strategy not in ("prototype", "kmeans"):
                unused["sheaf.prototype_members"] = "pilot_strategy prototype or kmeans only"
            strict = self.algorithm == "sheaf_frl" and self.sheaf.variant == "strict"
            if not (strict or plugin):
                unused["sheaf.mask_secret"] = "sheaf_frl with sheaf.variant=strict only"
                unused["sheaf.mask_secret_dir"] = "sheaf_frl with sheaf.variant=strict only"
            elif strict and self.sheaf.mask_secret == "os":
                unused["sheaf.mask_secret_dir"] = "sheaf.mask_secret=file only"
        if self.train.optimizer == "adam":
            unused["train.momentum"] = "Adam has no momentum term; sgd and nesterov read it"
        mine = flat_keys(self.to_dict())
        base = flat_keys(ExperimentConfig(name=self.name, algorithm=self.algorithm).to_dict())
        changed = {k for k in mine.keys() | base.keys() if mine.get(k) != base.get(k)}
        found: dict[str, list[str]] = {}
        for key, why in unused.items():
            if any(k == key or k.startswith((f"{key}.", f"{key}[")) for k in changed):
                found.setdefault(why, []).append(key)
        return [f"{', '.join(keys)} ({why})" for why, keys in found.items()]

    def run_name(self) -> str:
        """``output.name``, else ``<name>-<algorithm>-seed<seed>`` (methods never collide);
        for an inline plug-in ``package.module:Name`` the algorithm part is ``Name``."""
        label = algorithm_label(self.algorithm)
        return self.output.name or f"{self.name}-{label}-seed{self.seed}"

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


_KEY_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)")


def parse_override(text: str) -> tuple[list[str | int], Any]:
    """Split ``a.b=value`` into its key path and YAML-parsed value.

    List entries are addressed by index: ``agents[1].lr=0.5`` gives the path
    ``["agents", 1, "lr"]``.
    """
    if "=" not in text:
        raise ConfigError(f"override '{text}' must look like key=value (e.g. train.epochs=3)")
    key, _, raw = text.partition("=")
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override '{text}' has an empty key")
    path: list[str | int] = []
    for part in key.split("."):
        match = _KEY_PART.fullmatch(part)
        if match is None:
            raise ConfigError(
                f"override '{text}': '{part}' is not a key name (letters, digits, _ and "
                "optional [index])"
            )
        path.append(match.group(1))
        path.extend(int(i) for i in re.findall(r"\d+", match.group(2)))
    try:
        value = yamlio.load(raw) if raw.strip() else None
    except (yaml.YAMLError, RecursionError, *yamlio.BAD_VALUE) as exc:
        raise ConfigError(f"override '{text}': cannot parse value: {yamlio.problem(exc)}") from None
    return path, value


def _key_text(path: list[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def section_keys() -> dict[str, list[str]]:
    """Leaf key name -> the sections of ExperimentConfig that hold it (``rounds`` -> federated)."""
    found: dict[str, list[str]] = {}
    for f in dataclasses.fields(ExperimentConfig):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(default):
            for sub in dataclasses.fields(default):
                found.setdefault(sub.name, []).append(f.name)
    return found


def expand_shorthand(path: list[str | int], text: str) -> list[str | int]:
    """``rounds=3`` means ``federated.rounds=3`` when exactly one section has that key.

    Only single-word overrides that are not top-level keys are expanded; a name held by
    several sections is an error that lists the full keys to choose from.
    """
    top = {f.name for f in dataclasses.fields(ExperimentConfig)}
    if len(path) != 1 or not isinstance(path[0], str) or path[0] in top:
        return path
    sections = section_keys().get(path[0], [])
    if len(sections) == 1:
        return [sections[0], path[0]]
    if len(sections) > 1:
        choices = " or ".join(f"{s}.{path[0]}" for s in sections)
        raise ConfigError(f"override '{text}' is ambiguous: use {choices}")
    return path


def override_key(text: str) -> str:
    """The full dotted key an override sets (``rounds=3`` -> ``federated.rounds``)."""
    path, _ = parse_override(text)
    return _key_text(expand_shorthand(path, text))


def override_leaves(text: str) -> list[str]:
    """Every full dotted key an override sets: its key, or for a section or a list of
    entries given whole, each key inside (``data={shift: 0.2}`` -> ``data.shift``)."""
    path, value = parse_override(text)
    key = _key_text(expand_shorthand(path, text))
    if isinstance(value, dict | list):
        return [k for k in flat_keys(value, key) if not k.endswith(".count")]
    return [key]


def _merged(old: Any, new: Any) -> Any:
    """``new``, merged key by key into ``old`` where both are mappings."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return new
    out = dict(old)
    for key, value in new.items():
        out[key] = _merged(out.get(key), value)
    return out


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key=value`` overrides to a raw config mapping (in place) and return it.

    A mapping given to a section merges into it (``train={epochs: 1, lr: 0.1}`` sets
    two keys and keeps the others); any other value replaces what was there."""
    for text in overrides:
        path, value = parse_override(text)
        path = expand_shorthand(path, text)
        node: Any = raw
        for i, part in enumerate(path):
            last = i == len(path) - 1
            if isinstance(part, int):
                if not isinstance(node, list) or part >= len(node):
                    size = f"has {len(node)} entries" if isinstance(node, list) else "is not a list"
                    raise ConfigError(f"override '{text}': '{_key_text(path[:i])}' {size}")
            elif not isinstance(node, dict):
                raise ConfigError(f"override '{text}': '{_key_text(path[:i])}' is not a section")
            if last:
                here = node[part] if isinstance(part, int) or part in node else None
                node[part] = _merged(here, value)
            else:
                if isinstance(part, str) and node.get(part) is None:
                    node[part] = [] if isinstance(path[i + 1], int) else {}
                node = node[part]
    return raw


def read_yaml(path: str | Path, what: str = "config file") -> dict[str, Any]:
    """Read a YAML mapping, turning I/O and syntax problems into ConfigError.

    ``what`` names the file in messages (``study file``, ``config file``).
    """
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{what} {p} is a directory, not a file")
    if not p.is_file():
        raise ConfigError(f"{what} {p} does not exist")
    try:
        raw = yamlio.load(p.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} {p} cannot be read: {exc}") from None
    except (yaml.YAMLError, RecursionError, *yamlio.BAD_VALUE) as exc:
        raise ConfigError(f"{what} {p} is not valid YAML: {yamlio.problem(exc)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{what} {p} must hold a YAML mapping at top level")
    return raw


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Load, override and validate an experiment config. An error about a key that an
    override set names that override, not the file.

    ``path`` may name a preset (``quickstart``: :func:`fedsheaf.config.bundled.find_preset`),
    whose graph then resolves against the preset, not the current directory."""
    overrides = overrides or []
    preset = find_preset(path)
    if preset is not None:
        path = preset.path
        raw = apply_overrides(preset.rebase(read_yaml(path)), overrides)
    else:
        raw = apply_overrides(read_yaml(path), overrides)
    try:
        return build(ExperimentConfig, raw)
    except ConfigError as exc:
        raise ConfigError(f"{error_source(str(exc), overrides, str(path))}: {exc}") from None


def error_source(message: str, overrides: list[str], file: str) -> str:
    """Where a config error ``message`` comes from: ``override 'k=v'`` for the last
    override that set a key the message names (or an item of it: ``'k[1]'``), else
    ``file``."""
    return next(
        (
            f"override '{text}'"
            for text in reversed(overrides)  # the last one to set a key is the one used
            if any(
                re.search(f"'{re.escape(leaf)}(\\[\\d+\\])*'", message)
                for leaf in override_leaves(text)
            )
        ),
        file,
    )


def flat_keys(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted leaves of a config tree (``agents[1].lr``; other lists are leaves)."""
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(flat_keys(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(tree, list) and tree and all(isinstance(v, dict) for v in tree):
        out = {f"{prefix}.count": len(tree)}
        for i, value in enumerate(tree):
            out.update(flat_keys(value, f"{prefix}[{i}]"))
        return out
    return {prefix: tree}


def dump_config(cfg: ExperimentConfig) -> str:
    """The resolved config as YAML text (what goes into the run directory)."""
    return yamlio.dump(cfg.to_dict(), sort_keys=False)
