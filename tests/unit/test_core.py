"""Seeds, metrics, run directories, post-hoc ZCA and the per-rank experiment builders."""

import json
import math

import numpy as np
import pytest
import torch

from fedsheaf.algorithms.base import epoch_batches
from fedsheaf.algorithms.metrics import accuracy, harmonic, network_summary
from fedsheaf.config.sections import load_config
from fedsheaf.rundir.files import MARKER, RunDir, read_metrics
from fedsheaf.rundir.progress import accuracies, agent_table
from fedsheaf.runtime import experiment
from fedsheaf.sheaf.zca import zca_fit
from fedsheaf.util.atomic import atomic_write_json
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.seeding import derive_seed, rng, torch_generator


def test_derived_seeds_depend_only_on_their_keys():
    # a fixed value: the same in every process, on every rank, whatever PYTHONHASHSEED
    assert derive_seed(0, "model", 3) == 3724733436224096330
    assert (
        len(
            {
                derive_seed(0, "model", 3),
                derive_seed(0, "model", 4),
                derive_seed(1, "model", 3),
                derive_seed(0, "data", 3),
            }
        )
        == 4
    )
    state = torch.get_rng_state()
    torch_generator(5, "x").seed  # noqa: B018
    rng(5, "x").random()
    assert torch.equal(state, torch.get_rng_state())


def test_accuracy_and_network_summary():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0]])
    assert accuracy(logits, torch.tensor([0, 1, 1])) == pytest.approx(2 / 3)
    assert math.isnan(accuracy(logits[:0], torch.tensor([], dtype=torch.long)))
    agents = [
        dict(private_acc=0.9, comm_acc=0.5, private_acc_val=0.8, comm_acc_val=0.4, degree=1),
        dict(private_acc=0.7, comm_acc=0.8, private_acc_val=0.6, comm_acc_val=0.6, degree=3),
        dict(
            private_acc=0.5,
            comm_acc=float("nan"),
            private_acc_val=0.5,
            comm_acc_val=float("nan"),
            degree=0,
        ),
    ]
    net = network_summary(agents)
    assert net["private_acc"] == pytest.approx(0.7)
    assert net["comm_acc"] == pytest.approx(0.65)  # isolated agent skipped
    assert net["comm_acc_deg"] == pytest.approx((0.5 + 3 * 0.8) / 4)
    assert net["score_val"] == pytest.approx(harmonic(net["private_acc_val"], 0.5))
    assert harmonic(0.0, 1.0) == 0.0


def test_agent_table_lists_every_agent():
    recs = [
        dict(agent=1, dim=24, degree=2, private_acc=0.5, comm_acc=0.25),
        dict(agent=0, dim=16, degree=0, private_acc=0.75, comm_acc=float("nan")),
    ]
    lines = agent_table(recs).splitlines()
    assert lines[2].split() == ["0", "16", "0", "0.750", "–"]  # as watch and the epoch lines
    assert lines[3].split() == ["1", "24", "2", "0.500", "0.250"]


def test_network_accuracies_say_in_words_when_no_agent_has_a_neighbour():
    line = dict(private_acc=0.9125, comm_acc=0.75, comm_acc_deg=0.8)
    assert accuracies(line) == "private 0.912  comm 0.750 (degree-weighted 0.800)"
    nan = float("nan")  # one agent alone, or a graph without edges
    alone = dict(private_acc=0.5, comm_acc=nan, comm_acc_deg=nan)
    assert accuracies(alone) == "private 0.500  comm – (no agent has a neighbour)"
    assert accuracies({**alone, "comm_acc": None}) == accuracies(alone)  # as summary.json has it


def test_run_dir_is_atomic_and_refuses_to_clobber(tmp_path):
    run = RunDir(tmp_path / "r")
    run.write_config("a: 1\n")
    run.append_metrics({"epoch": 1, "acc": float("nan"), "v": np.float32(0.5)})
    with open(run.metrics_path, "a") as fh:
        fh.write('{"epoch": 2, "torn')  # a crash mid-line
    assert read_metrics(run.metrics_path) == [{"epoch": 1, "acc": None, "v": 0.5}]
    run.write_summary({"x": 1})
    assert json.loads((tmp_path / "r" / "summary.json").read_text()) == {"x": 1}
    left = [p.name for p in (tmp_path / "r").iterdir() if p.name.startswith(".")]
    assert left == [MARKER]  # no temporary file left; fedsheaf's own marker
    with pytest.raises(ConfigError, match="already holds a finished run"):
        RunDir(tmp_path / "r")
    RunDir(tmp_path / "r", overwrite=True)
    assert not (tmp_path / "r" / "summary.json").exists()
    atomic_write_json(tmp_path / "deep" / "x.json", {"a": [1, 2]})
    assert json.loads((tmp_path / "deep" / "x.json").read_text()) == {"a": [1, 2]}


@pytest.mark.parametrize("name", ["metrics.jsonl", "summary.json", "config.yaml"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_run_file_that_is_a_directory_is_named_before_anything_is_removed(
    tmp_path, name, overwrite
):
    (tmp_path / "r" / name).mkdir(parents=True)
    if name != "config.yaml":
        (tmp_path / "r" / "config.yaml").touch()
    with pytest.raises(ConfigError, match=f"r/{name} is not a file"):
        RunDir(tmp_path / "r", overwrite=overwrite)
    assert (tmp_path / "r" / name).is_dir()


def test_zca_whitens_and_inverts():
    g = torch.Generator().manual_seed(0)
    mix = torch.randn(5, 5, generator=g, dtype=torch.float64)
    z = torch.randn(4000, 5, generator=g, dtype=torch.float64) @ mix + 3.0
    zca = zca_fit(z, eps=1e-12)
    w = zca.whiten(z)
    assert torch.allclose(w.mean(0), torch.zeros(5, dtype=torch.float64), atol=1e-10)
    assert torch.allclose(torch.cov(w.T), torch.eye(5, dtype=torch.float64), atol=1e-8)
    assert torch.allclose(zca.colour(w), z, atol=1e-8)
    assert torch.allclose(zca.w, zca.w.T)  # zero-phase: symmetric


def test_epoch_batches_cover_every_sample_and_wrap():
    batches = epoch_batches(10, 4, 5, torch.Generator().manual_seed(0))
    assert [len(b) for b in batches] == [4] * 5
    flat = torch.cat(batches)
    assert sorted(flat[:10].tolist()) == list(range(10))


def test_a_batch_larger_than_the_data_is_capped_at_it():
    # train.batch_size=100000000 used to build a 1e8-index batch (25.6 GB of digits rows)
    batches = epoch_batches(10, 100_000_000, 3, torch.Generator().manual_seed(0))
    assert [sorted(b.tolist()) for b in batches] == [list(range(10))] * 3


def test_builders_check_graph_against_config():
    cfg = load_config("configs/quickstart.yaml")
    graph = experiment.build_graph(cfg, 4)
    assert graph.dims == (16, 24, 32, 24)
    with pytest.raises(Exception, match="5 ranks"):
        experiment.build_graph(cfg, 5)
    cfg.agents[0].encoder = [8, 20]
    with pytest.raises(ConfigError, match="latent dimension 20"):
        experiment.build_graph(cfg, 4)


def test_a_graph_built_for_other_class_sets_is_a_warning():
    cfg = load_config("configs/quickstart.yaml")
    graph = experiment.build_graph(cfg, 4)
    assert graph.classes is not None and experiment.graph_class_warning(cfg, graph) is None
    cfg.agents[1].classes, cfg.agents[3].classes = [7, 8], [0, 9]
    assert experiment.graph_class_warning(cfg, graph) == (
        f"fedsheaf: warning: graph {cfg.graph} gives node 1 classes {list(graph.classes[1])} "
        "but agents[1].classes is [7, 8] (and 1 other node): the graph was built for other "
        "class sets, and its edges may not follow the agents' data"
    )


def test_every_rank_derives_the_same_partition_and_its_own_shard():
    cfg = load_config("configs/quickstart.yaml")
    ds, part = experiment.load_and_partition(cfg)
    _, again = experiment.load_and_partition(cfg)
    assert all(
        np.array_equal(a.train, b.train) for a, b in zip(part.agents, again.agents, strict=False)
    )
    data = [experiment.agent_data(ds, part, i, torch.device("cpu")) for i in range(4)]
    assert all(torch.equal(d.x_pilot, data[0].x_pilot) for d in data)
    steps = experiment.steps_per_epoch(cfg, part)
    assert steps == max(math.ceil(len(d.y_train) / cfg.train.batch_size) for d in data)
    assert experiment.batch_warning(cfg, part) is None
    sizes = [len(d.y_train) for d in data]
    cfg.train.batch_size = sorted(sizes)[1] + 1  # more than the two smallest shards hold
    small = sorted(range(4), key=lambda i: sizes[i])[:2]
    assert experiment.batch_warning(cfg, part) == (
        f"fedsheaf: warning: train.batch_size={cfg.train.batch_size} exceeds the training "
        f"samples of 2 agents (agent {min(small)}: {sizes[min(small)]}, agent {max(small)}: "
        f"{sizes[max(small)]}): each of their batches is capped at its training set (the "
        "numbers shown)"
    )
    n = len(part.pilots)
    assert experiment.pilot_warning(cfg, part) is None
    cfg.sheaf.pilot_batch = n + 1
    said = f"fedsheaf: warning: sheaf.pilot_batch={n + 1} exceeds the {n} shared pilots"
    assert experiment.pilot_warning(cfg, part) == (
        f"{said}: capped at {n} (every step uses all of them)"
    )
    graph = experiment.build_graph(cfg, 4)
    assert experiment.data_warnings(cfg, part, graph) == [
        experiment.batch_warning(cfg, part),
        experiment.pilot_warning(cfg, part),
    ]
    cfg.sheaf.pilot_strategy = "prototype"  # class prototypes: no batch to exceed
    assert experiment.pilot_warning(cfg, part) is None
    cfg.sheaf.pilot_strategy = "uniform"
    cfg.algorithm = "noncoop"  # fits its maps on every pilot: no batch to exceed
    assert experiment.pilot_warning(cfg, part) is None
    m0 = experiment.agent_model(cfg, ds, 0, torch.device("cpu"))
    m0b = experiment.agent_model(cfg, ds, 0, torch.device("cpu"))
    m1 = experiment.agent_model(cfg, ds, 1, torch.device("cpu"))
    assert all(
        torch.equal(a, b)
        for a, b in zip(m0.state_dict().values(), m0b.state_dict().values(), strict=False)
    )
    assert m1.encode(data[1].x_test[:3]).shape == (3, 24)
