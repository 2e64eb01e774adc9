"""Which launches each benchmark case needs, at each size (pure: no MPI, no torch).

Two sizes:

* ``small`` — fits a 2-core CPU machine in minutes: the Table-3 pair on FashionMNIST
  (2 ranks; also as "twins", two copies of one agent), the quickstart mesh (4 ranks),
  the 15 Table-2 agents on the bundled digits (bytes and speedup: the byte counts
  depend only on d_i, K and the graph),
  weak scaling 1→2 ranks, and FedRep with 100 clients on 4, 2 and 1 workers with a
  shortened schedule (dynamic placement; on 4 workers also balanced and static).
* ``full`` — the paper's sizes for a GPU (``--device cuda``) or a many-core node: the
  15-agent study at full epochs, the pair and its twins, weak scaling 1→16 ranks, the
  FedRep schedule of SPEC §4 on 4 workers (dynamic, balanced and static placement).

Every launch is one ``mpiexec`` running :mod:`fedsheaf.ops.bench.worker` with a spec
(a JSON-able dict); cases listed together share the launch's start-up cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fedsheaf.util.errors import ConfigError

CASE_NAMES = ("overhead", "pilot_cost", "bytes", "speedup", "scaling", "clients", "placement")
#: What ``fedsheaf bench`` runs without case names: all but the placement case (seven
#: launches of its own, ~15 min on 2 cores: ``fedsheaf bench placement``).
DEFAULT_CASES = tuple(c for c in CASE_NAMES if c != "placement")
SIZES = ("small", "full")
#: The 28×28 data sets the decentralized cases run on (Table 2's encoders and byte counts).
DATASETS = ("fashionmnist", "mnist")
#: The data set of the FedRep case (configs/fedrep_fmnist_100c2.yaml), whatever --dataset says.
FEDREP_DATASET = "fashionmnist"

#: Table-2 agent 2 (d = 64): the unit of work per rank in the weak-scaling case.
SCALING_AGENT = {"encoder": [16, 32, 64], "head": [128], "dropout": 0.2}
#: Table-2 agents whose pilot cost is timed at the small size: the smallest model,
#: the largest latent space and the largest model.
SMALL_PILOT_AGENTS = [2, 6, 11]
#: Sheaf-FRL with K = B/8 pilots per step (batch 64): what target 1 costs at a smaller K.
K_EIGHTH_64 = {"sheaf_frl_k/8": ["algorithm=sheaf_frl", "sheaf.pilot_batch=8"]}
#: Name prefix of the overhead case's Sheaf-FRL at a pilot batch chosen with
#: ``fedsheaf bench --pilot-batches`` (``sheaf_frl_K=16``).
K_METHOD = "sheaf_frl_K="
#: The pair with agent 1 a copy of agent 0's model: the neighbours then wait for each
#: other only by jitter, which overlapping the exchange with the backward can hide.
TWINS = ["agents[1].encoder=[32,64,128]", "agents[1].head=[64,32]", "agents[1].dropout=0.3"]
#: The placement case (N agents on R ranks): the 15 Table-2 agents on these rank counts,
#: and a 100-agent graph of small identical models (:data:`PLACEMENT_AGENT`) on these.
PLACEMENT_RANKS_15 = (1, 3, 5, 15)
PLACEMENT_RANKS_100 = {"small": (1, 2, 4), "full": (1, 2, 4, 8, 16)}
#: Built by ``fedsheaf graph build erdos-renyi --name er100 --dims 16,...,16 --p 0.05``.
PLACEMENT_GRAPH = "graphs/er100.yaml"
PLACEMENT_AGENT = {"encoder": [8, 16], "head": [32], "dropout": 0.1, "classes": list(range(10))}


@dataclass
class Launch:
    """One ``mpiexec -n ranks`` of the worker."""

    label: str
    ranks: int
    cases: list[str]
    spec: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 900.0
    #: Extra flags for the local mpiexec (not for a --launcher template).
    mpi_flags: list[str] = field(default_factory=list)

    def worker_spec(self, device: str) -> dict[str, Any]:
        return {"label": self.label, "cases": list(self.cases), "device": device, **self.spec}


def _data(dataset: str, root: str) -> list[str]:
    return [f"data.dataset={dataset}", f"data.root={root}"]


def _twins(img: list[str], reps: int, small: bool) -> Launch:
    limit = ["data.limit=6000", "train.steps_per_epoch=8"] if small else []
    return Launch(
        "twins",
        2,
        ["overhead"],
        {"config": "configs/pair.yaml", "overrides": [*img, *limit, *TWINS], "repeats": reps},
        env={"FEDSHEAF_THREADS": "1"},
    )


def pilot_batch_methods(ks: Sequence[int]) -> dict[str, list[str]]:
    """Overhead-case methods: Sheaf-FRL with each pilot batch K in ``ks``."""
    return {f"{K_METHOD}{k}": ["algorithm=sheaf_frl", f"sheaf.pilot_batch={k}"] for k in ks}


def placement_launches(
    size: str, img: list[str], reps: int, tcmalloc: str | None = None
) -> list[Launch]:
    """The placement case: one launch per rank count R, the 15 Table-2 agents (group
    ``table2-15``; below R = N also with ``sheaf.recompute_pilots``, group
    ``table2-15-recompute``, and with ``train.release_memory`` too, group
    ``table2-15-release``) and the 100 small agents of :data:`PLACEMENT_GRAPH` (group
    ``er100``); Sheaf-FRL, a few timed epochs each (at the small size: 4 steps, a 3-epoch
    median).

    With ``tcmalloc`` (the library's name for ``LD_PRELOAD``), the 15 agents again with
    tcmalloc as every rank's malloc, at every R (group ``table2-15-tcmalloc``: the
    allocator changes R = N too) and below R = N with ``sheaf.recompute_pilots`` (group
    ``table2-15-tcmalloc-recompute``).
    """
    small = size == "small"
    short = ["train.steps_per_epoch=4", "data.limit=6000"] if small else []
    hundred = ["train.steps_per_epoch=4", "data.limit=20000"] if small else []
    repeats = min(reps, 3) if small else reps
    out = []
    recompute = ["sheaf.recompute_pilots=true"]
    below = PLACEMENT_RANKS_15[:-1]  # (R = N: the reference's run, one agent per rank)
    # the Table-2 groups: (label and group suffix, overrides, R, reference group, malloc)
    groups: list[tuple[str, list[str], Sequence[int], str | None, str | None]] = [
        ("", [], PLACEMENT_RANKS_15, None, None),
        ("-recompute", recompute, below, "table2-15", None),
        ("-release", [*recompute, "train.release_memory=true"], below, "table2-15", None),
    ]
    if tcmalloc:
        groups += [
            ("-tcmalloc", [], PLACEMENT_RANKS_15, None, "tcmalloc"),
            ("-tcmalloc-recompute", recompute, below, "table2-15-tcmalloc", "tcmalloc"),
        ]
    for suffix, options, ranks, reference, malloc in groups:
        for r in ranks:
            spec: dict[str, Any] = {
                "config": "configs/mnist15.yaml",
                "overrides": [*img, *short, *options],
                "repeats": repeats,
                "group": f"table2-15{suffix}",
            }
            if reference:
                spec["reference"] = reference
            env = {}
            if malloc:
                spec["malloc"] = malloc  # (the worker checks that the preload took)
                env["LD_PRELOAD"] = str(tcmalloc)
            out.append(Launch(f"placement15-r{r}{suffix}", r, ["placement"], spec, env=env))
    for r in PLACEMENT_RANKS_100[size]:
        spec = {
            "config": "configs/quickstart.yaml",
            "overrides": [*img, f"graph={PLACEMENT_GRAPH}", *hundred],
            "agent": PLACEMENT_AGENT,
            "repeats": repeats,
            "group": "er100",
        }
        out.append(Launch(f"placement100-r{r}", r, ["placement"], spec))
    for launch in out:  # one rank holding every agent may use every core
        launch.mpi_flags = ["--bind-to", "none"]
    return out


def parse_counts(text: str, what: str) -> list[int]:
    """``"1,2,4"`` → ``[1, 2, 4]`` (positive, sorted, unique)."""
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values or values[0] < 1:
        raise ConfigError(f"{what} must be positive integers, got {text!r}")
    return values


def plan(
    size: str,
    cases: Sequence[str],
    *,
    dataset: str = "fashionmnist",
    data_root: str = "../shared/data",
    scaling_ranks: Sequence[int] | None = None,
    workers: Sequence[int] | None = None,
    repeats: int | None = None,
    image_data: bool = True,
    fedrep_data: bool | None = None,
    tcmalloc: str | None = None,
) -> list[Launch]:
    """The launches that run ``cases`` at ``size``.

    ``image_data`` False (no 28×28 data set on this machine) moves every decentralized
    case to the bundled digits. ``fedrep_data`` False (no FashionMNIST, which the FedRep
    case always uses) drops the FedRep case; None means the same as ``image_data``.
    ``tcmalloc``: the placement case's tcmalloc launches preload it (none without).
    """
    if size not in SIZES:
        raise ConfigError(f"bench size must be one of {', '.join(SIZES)}, got {size!r}")
    unknown = sorted(set(cases) - set(CASE_NAMES))
    if unknown:
        raise ConfigError(f"unknown bench case(s) {unknown}; choose from {', '.join(CASE_NAMES)}")
    if dataset not in DATASETS:
        raise ConfigError(f"bench dataset must be one of {', '.join(DATASETS)}, got {dataset!r}")
    if repeats is not None and repeats < 1:
        raise ConfigError(f"bench repeats must be a positive integer, got {repeats}")
    small = size == "small"
    reps = repeats if repeats is not None else (5 if small else 7)
    img = _data(dataset, data_root) if image_data else _data("digits", data_root)
    digits = _data("digits", data_root)
    launches: list[Launch] = []

    if small:
        launches += [
            Launch(
                "pair",
                2,
                ["overhead", "pilot_cost"],
                {
                    "config": "configs/pair.yaml",
                    "overrides": [*img, "data.limit=6000", "train.steps_per_epoch=8"],
                    "repeats": reps,
                    "extra_methods": K_EIGHTH_64,
                },
            ),
            _twins(img, reps, small),
            Launch(
                "quickstart",
                4,
                ["overhead", "pilot_cost", "bytes"],
                {
                    "config": "configs/quickstart.yaml",
                    "overrides": [],
                    "repeats": reps,
                    "extra_methods": {
                        "sheaf_frl_k/8": ["algorithm=sheaf_frl", "sheaf.pilot_batch=4"]
                    },
                    "bytes_steps": 4,
                    "bytes_epochs": 1,
                },
            ),
            Launch(
                "table2-pilots",
                1,
                ["pilot_cost"],
                {
                    "config": "configs/mnist15.yaml",
                    "overrides": [*img, "data.limit=3000"],
                    "pilot_agents": SMALL_PILOT_AGENTS,
                    "pilot_repeats": 3,
                    "pilot_inner": 2,
                },
            ),
            Launch(
                "table2-digits",
                15,
                ["bytes", "speedup"],
                {
                    "config": "configs/mnist15.yaml",
                    "overrides": [*digits, "train.steps_per_epoch=4"],
                    "repeats": reps,
                    "bytes_steps": 2,
                    "bytes_epochs": 1,
                },
                env={"FEDSHEAF_THREADS": "1"},
                mpi_flags=["--bind-to", "none"],  # the sequential side may use every core
            ),
        ]
    else:
        table2 = {
            "config": "configs/mnist15.yaml",
            "overrides": list(img),
            "repeats": reps,
            "extra_methods": K_EIGHTH_64,
            "bytes_steps": 4,
            "bytes_epochs": 1,
        }
        launches += [
            Launch(
                "table2",
                15,
                ["overhead", "bytes", "speedup"],
                table2,
                mpi_flags=["--bind-to", "none"],  # the sequential side may use every core
            ),
            Launch("table2-pilots", 1, ["pilot_cost"], dict(table2, pilot_repeats=7)),
            Launch(
                "pair",
                2,
                ["overhead", "pilot_cost"],
                {
                    "config": "configs/pair.yaml",
                    "overrides": list(img),
                    "repeats": reps,
                    "extra_methods": K_EIGHTH_64,
                },
            ),
            _twins(img, reps, small),
        ]

    counts = list(scaling_ranks or ([1, 2] if small else [1, 2, 4, 8, 16]))
    launches.append(
        Launch(
            "scaling",
            max(counts),
            ["scaling"],
            {
                "config": "configs/mnist15.yaml",
                "overrides": [*img, "train.steps_per_epoch=8", "graph=ring"]
                + (["data.limit=6000"] if small else []),
                "agent": SCALING_AGENT,
                "ranks": counts,
                "repeats": reps,
            },
            env={"FEDSHEAF_THREADS": "1"},  # weak scaling: one core per rank
        )
    )

    if image_data if fedrep_data is None else fedrep_data:
        schedule = (
            ["federated.rounds=5", "federated.body_epochs=1"] if small else ["federated.rounds=6"]
        )
        # dynamic placement (the default); by default also balanced and static on 4
        # workers, for comparison
        placements = [(w, "dynamic") for w in workers or ([4, 2, 1] if small else [4])]
        if workers is None:
            placements[1:1] = [(4, "balanced"), (4, "static")]
        for w, placement in placements:
            launches.append(
                Launch(
                    f"fedrep-{w}w" + ("" if placement == "dynamic" else f"-{placement}"),
                    w + 1,
                    ["clients"],
                    {
                        "config": "configs/fedrep_fmnist_100c2.yaml",
                        "overrides": [
                            f"data.root={data_root}",
                            *schedule,
                            "federated.eval_every=1000",
                            "federated.eval_last=1",
                            "federated.finetune_epochs=0",
                            f"federated.placement={placement}",
                        ],
                    },
                    env={"FEDSHEAF_THREADS": "1"},
                )
            )

    launches += placement_launches(size, img, reps, tcmalloc)

    chosen = []
    for launch in launches:
        launch.cases = [c for c in launch.cases if c in cases]
        if launch.cases:
            chosen.append(launch)
    return chosen
