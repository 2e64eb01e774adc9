"""Sheaf-FRL variants, pilot strategies and the decentralized baselines on real MPI ranks.

One launch (3 ranks, digits) runs every configuration through the real launcher and
then checks strict privacy on the wire: a subclass of the runtime's ``Neighbourhood``
records every buffer a rank sends, and no buffer may contain a raw pilot matrix ``A_i``
or raw test latents (a positive control shows the same check catches the standard
variant, which does send raw pilots).

Run as a script under mpiexec (``python tests/mpi/test_variants.py WORKDIR``) it is the
worker; under pytest it writes the configs, launches the worker and checks the results.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.mpi

HET_DIMS, HOM_DIMS = [12, 20, 12], [16, 16, 16]
EDGES = [[0, 1], [1, 2], [0, 2]]
CLASSES = [[0, 1, 2, 3, 4], [3, 4, 5, 6, 7], [5, 6, 7, 8, 9]]
ONE_STEP = ["train.epochs=1", "train.steps_per_epoch=1", "sheaf.map_refresh=step"]
TWO = ["train.epochs=2", "train.steps_per_epoch=2"]

# name -> (graph, overrides)
RUNS = {
    "het-standard": ("het", ONE_STEP),
    "het-strict": ("het", [*ONE_STEP, "sheaf.variant=strict"]),
    "hom-standard": ("hom", ONE_STEP),
    "hom-homogeneous": ("hom", [*ONE_STEP, "sheaf.variant=homogeneous"]),
    "hom-strict": ("hom", [*ONE_STEP, "sheaf.variant=strict"]),
    "het-strict-window": ("het", [*TWO, "sheaf.variant=strict"]),
    "het-strict-window-overlap": (
        "het",
        [*TWO, "sheaf.variant=strict", "sheaf.overlap_exchange=true"],
    ),
    "het-strict-step-eval1": (
        "het",
        [*TWO, "sheaf.variant=strict", "sheaf.map_refresh=step", "train.eval_every=1"],
    ),
    "het-strict-step-eval2": (
        "het",
        [*TWO, "sheaf.variant=strict", "sheaf.map_refresh=step", "train.eval_every=2"],
    ),
    # no dropout: the test's own step (_spec_step) draws no random numbers
    "het-plain-step": ("het", [*ONE_STEP, *(f"agents[{i}].dropout=0" for i in range(3))]),
    "het-window": ("het", TWO),
    "het-window-overlap": ("het", [*TWO, "sheaf.overlap_exchange=true"]),
    "het-window-fused": ("het", [*TWO, "sheaf.fused_pilots=true"]),
    "hom-homogeneous-window": ("hom", [*TWO, "sheaf.variant=homogeneous"]),
    "het-stratified-parseval": (
        "het",
        [*TWO, "sheaf.pilot_strategy=stratified", "sheaf.parseval=true"],
    ),
    "het-prototype": ("het", [*TWO, "sheaf.pilot_strategy=prototype"]),
    "het-kmeans": ("het", [*TWO, "sheaf.pilot_strategy=kmeans", "sheaf.pilot_batch=12"]),
    "het-comfed": ("het", [*TWO, "algorithm=comfed", "baseline.comfed.rank=8"]),
    "het-fmtl": ("het", [*TWO, "algorithm=sheaf_fmtl", "baseline.fmtl.gamma=0.01"]),
}


#: strict runs that start from their standard twin's initial weights (the strict variant
#: draws its own from each agent's secret), to compare the two step by step
TWINS = {"het-strict": "het-standard", "hom-strict": "hom-standard"}

#: runs whose communication accuracy is recomputed from SPEC Eq. 22 after training
COMM_CHECKED = ("het-standard", "het-window", "hom-standard", "het-comfed")

# ------------------------------------------------------------------ worker (mpiexec)


def _leaks(sent: list, raw: list) -> int:
    """How many sent buffers contain a row or column of a raw matrix (to 1e-4)."""
    import torch

    count = 0
    for buf in sent:
        b = torch.as_tensor(buf, dtype=torch.float64)
        views = [b, b[:, :-1]] if b.shape[1] > 1 else [b]  # evaluation appends labels
        hit = False
        for r in raw:
            r = torch.as_tensor(r, dtype=torch.float64)
            for v in views:
                for x, y in ((v, r), (v.T, r.T)):
                    if x.shape[1] == y.shape[1] and x.numel() and y.numel():
                        gap = torch.cdist(x, y).min()
                        if gap <= 1e-4 * max(1.0, y.norm(dim=1).max().item()):
                            hit = True
        count += hit
    return count


def _eq22(algo, comm) -> dict:
    """SPEC Eq. 22 recomputed outside the algorithm's evaluation, from the trained agents:
    receiver i decodes neighbour j's test latents carried by the map as SPEC orients it —
    h_i(V_ij z_j) where i is the head (V_ij: d_i × d_j, held by both ends), h_i(V_jiᵀ z_j)
    where i is the tail — or, for ComFed, by P_i⁺P_j. Also returns, per neighbour, the
    same with the map's orientation swapped (a positive control for square maps) and the
    maps this rank holds."""
    import torch

    data, dev = algo.agent.data, algo.agent.device
    z = algo.latents(data.x_test).cpu()
    proj = getattr(algo, "proj", None)
    mine = (z, data.y_test.cpu(), None if proj is None else proj.detach().cpu())
    everyone = comm.allgather(mine)
    i = algo.agent.id
    out: dict = {"acc": {}, "swapped": {}, "maps": {}}
    for j in algo.nbr.neighbours:
        zj, yj, pj = everyone[j]
        if pj is not None:
            t = (torch.linalg.pinv(everyone[i][2].double()) @ pj.double()).float()
            right, wrong = zj @ t.T, None
        else:
            v = algo.maps[j].cpu()
            right = zj @ v.T if algo.is_head[j] else zj @ v
            wrong = (zj @ v if algo.is_head[j] else zj @ v.T) if v.shape[0] == v.shape[1] else None
            out["maps"][j] = v.double().tolist()
        for key, mapped in (("acc", right), ("swapped", wrong)):
            if mapped is not None:
                pred = algo.decode(mapped.to(dev)).argmax(1).cpu()
                out[key][j] = float((pred == yj).double().mean())
    return out


def _spec_step(cfg, world) -> list[float]:
    """One Sheaf-FRL step of this rank's agent written from SPEC §2, not through the
    algorithm: CE on the first private batch plus R_i = λ_i/(2K)·Σ‖head − V·tail‖² with
    λ_i = λ/d_i, the neighbours' whitened pilots A_j (d_j × K) as constants, and each
    edge's V = polar factor of A_head A_tailᵀ (with the SPEC's tiny tie-break jitter);
    then the configured optimizer step. Returns the updated parameters."""
    import torch
    import torch.nn.functional as F
    from torch.nn.utils import parameters_to_vector

    from fedsheaf.algorithms.base import build_optimizer, epoch_batches
    from fedsheaf.algorithms.sheaf_frl_pilots import PilotPlan
    from fedsheaf.runtime import experiment
    from fedsheaf.util.seeding import torch_generator

    i, dev, tc = world.rank, world.device, cfg.train
    ds, part = experiment.load_and_partition(cfg)
    data = experiment.agent_data(ds, part, i, dev)
    model = experiment.agent_model(cfg, ds, i, dev)
    model.train()
    steps = experiment.steps_per_epoch(cfg, part)
    gen = torch_generator(cfg.seed, "batches", i, 0)
    idx = epoch_batches(len(data.y_train), tc.batch_size, steps, gen)[0].to(dev)
    ce = F.cross_entropy(model.decode(model.encode(data.x_train[idx])), data.y_train[idx])
    pilots = PilotPlan(cfg.sheaf, cfg.seed, data.x_pilot, data.y_pilot).indices(0, 0)
    a_i = model.encode(data.x_pilot[torch.as_tensor(pilots, device=dev)]).T  # d_i × K
    every = world.comm.allgather(a_i.detach().cpu())
    dims, k = [len(a) for a in every], a_i.shape[1]
    total = a_i.new_zeros(())
    for a, b in EDGES:
        if i not in (a, b):
            continue
        j = b if i == a else a
        i_heads = (dims[i], -i) > (dims[j], -j)
        a_j = every[j].to(dev)
        head, tail = (a_i, a_j) if i_heads else (a_j, a_i)
        m = head.detach().double() @ tail.detach().double().T
        m = m + 1e-6 * m.norm() * torch.eye(*m.shape, dtype=m.dtype, device=dev)
        u, _, wt = torch.linalg.svd(m, full_matrices=False)
        v = (u @ wt).to(a_i.dtype)
        total = total + (head - v @ tail).pow(2).sum()
    loss = ce + cfg.sheaf.lam / dims[i] / (2 * k) * total
    optimizer = build_optimizer(tc, model.parameters())
    optimizer.zero_grad()
    loss.backward()
    if tc.clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip)
    optimizer.step()
    return parameters_to_vector(model.parameters()).detach().double().tolist()


def _spy_run(cfg, world, variant_cls):
    """Train one config by hand with a recording Neighbourhood; return (sent, raw) buffers."""
    import numpy as np

    from fedsheaf.algorithms.base import Agent
    from fedsheaf.runtime import experiment
    from fedsheaf.runtime.topology import Neighbourhood, _as_buffer

    class RecordingNeighbourhood(Neighbourhood):
        def __init__(self, *args):
            super().__init__(*args)
            self.sent: list[np.ndarray] = []
            self.calls = {"start_exchange": 0, "start_exchange_each": 0}

        # every message, blocking or not, is posted through these two
        def start_exchange(self, mat, shapes=None, device=None):
            self.calls["start_exchange"] += 1
            self.sent.append(np.array(_as_buffer(mat)))
            return super().start_exchange(mat, shapes, device)

        def start_exchange_each(self, mats, shapes=None, device=None):
            self.calls["start_exchange_each"] += 1
            self.sent += [np.array(_as_buffer(m)) for m in mats]
            return super().start_exchange_each(mats, shapes, device)

    class Spy(variant_cls):
        raw: list[np.ndarray] = []

        def pilot_matrix(self, epoch, step):
            a = super().pilot_matrix(epoch, step)
            self.raw.append(a.detach().cpu().double().numpy().copy())
            return a

        def latents(self, x, batch=1024):
            z = super().latents(x, batch)
            self.raw.append(z.cpu().double().numpy().copy())
            return z

    class Quiet:
        def epoch(self, record):
            pass

    graph = experiment.build_graph(cfg, world.size)
    ds, part = experiment.load_and_partition(cfg)
    data = experiment.agent_data(ds, part, world.rank, world.device)
    model = experiment.agent_model(cfg, ds, world.rank, world.device)
    agent = Agent(
        world.rank, cfg, graph, data, model, world.device, experiment.steps_per_epoch(cfg, part)
    )
    nbr = RecordingNeighbourhood(world.comm, graph.neighbours(world.rank))
    algo = Spy(agent, nbr, Quiet())
    algo.raw = []
    algo.run()
    nbr.free()
    return nbr, algo.raw


def worker(workdir: Path) -> None:
    import torch
    from torch.nn.utils import parameters_to_vector

    from fedsheaf.algorithms import DECENTRALIZED
    from fedsheaf.algorithms.sheaf_fmtl import fmtl_map_bytes
    from fedsheaf.algorithms.sheaf_frl import SheafFRL
    from fedsheaf.algorithms.sheaf_frl_variants import StrictSheafFRL
    from fedsheaf.config.sections import load_config
    from fedsheaf.launch.decentralized import run_decentralized
    from fedsheaf.runtime import experiment
    from fedsheaf.runtime.world import init_world

    def flat(model: torch.nn.Module) -> list[float]:
        return parameters_to_vector(model.parameters()).detach().double().tolist()

    world = init_world()
    results: dict = {}
    initial_states: dict[str, dict] = {}  # this rank's model at the start of each run
    for name, (graph, overrides) in RUNS.items():
        cfg = load_config(workdir / f"{graph}.yaml", [*overrides, f"output.name={name}"])
        built = []

        def make(agent, nbr, reporter, cfg=cfg, built=built, name=name):
            algo = DECENTRALIZED[cfg.algorithm](agent, nbr, reporter)
            if name in TWINS:
                algo.model.load_state_dict(initial_states[TWINS[name]])
            initial_states[name] = {k: v.clone() for k, v in algo.model.state_dict().items()}
            built.append(algo)
            built.append(flat(algo.model))
            return algo

        summary = run_decentralized(cfg, world, make=make)
        eq22 = _eq22(built[0], world.comm) if name in COMM_CHECKED else None
        if name == "het-plain-step":
            results["spec_step"] = world.gather(_spec_step(cfg, world))
        # every agent's parameters before and after training, for exact comparisons
        gathered = world.gather((built[1], flat(built[0].model), eq22))
        if world.is_root:
            results[name] = summary
            results[name]["initial"] = [g[0] for g in gathered]
            results[name]["trained"] = [g[1] for g in gathered]
            results[name]["eq22"] = [g[2] for g in gathered]
    if world.is_root:
        cfg = load_config(workdir / "het.yaml")
        ds, _ = experiment.load_and_partition(cfg)
        counts = [
            sum(p.numel() for p in experiment.agent_model(cfg, ds, i, world.device).parameters())
            for i in range(3)
        ]
        edges = [tuple(e) for e in EDGES]
        results["fmtl_expected_bytes"] = fmtl_map_bytes(counts, edges, 0.01)

    # strict privacy on the wire, and the positive control
    spy_cfg = load_config(
        workdir / "het.yaml", [*TWO, "train.eval_every=1", "sheaf.overlap_exchange=true"]
    )
    torch.set_num_threads(1)
    checks = {}
    for label, cls in (("strict", StrictSheafFRL), ("standard", SheafFRL)):
        nbr, raw = _spy_run(spy_cfg, world, cls)
        norms_ok, norms_checked = True, 0
        if label == "strict":
            pilot_norms = [float((r**2).sum() ** 0.5) for r in raw if r.shape[1] == 16]
            for buf in nbr.sent:
                if buf.shape[1] == 16:  # transported pilots: an isometric image of some A_i
                    norm = float((buf.astype("float64") ** 2).sum() ** 0.5)
                    norms_ok &= any(abs(norm - n) <= 1e-3 * n for n in pilot_norms)
                    norms_checked += 1
        checks[label] = {
            "rank": world.rank,
            "sent": len(nbr.sent),
            "raw": len(raw),
            "leaks": _leaks(nbr.sent, raw),
            "calls": nbr.calls,
            "norms_ok": norms_ok,
            "norms_checked": norms_checked,
            "degree": len(nbr.neighbours),
        }
    gathered = world.gather(checks)
    if world.is_root:
        results["privacy"] = gathered
        (workdir / "results.json").write_text(json.dumps(results, default=float))
    world.barrier()


# ------------------------------------------------------------------ pytest side


def _write_inputs(workdir: Path) -> None:
    (workdir / "keys").mkdir()
    for i in range(3):
        (workdir / "keys" / f"agent-{i}.key").write_bytes(bytes(range(i, i + 32)))
    for graph, dims in (("het", HET_DIMS), ("hom", HOM_DIMS)):
        nodes = [{"id": i, "dim": d} for i, d in enumerate(dims)]
        (workdir / f"g-{graph}.yaml").write_text(
            yaml.safe_dump({"name": graph, "nodes": nodes, "edges": EDGES})
        )
        cfg = {
            "name": graph,
            "algorithm": "sheaf_frl",
            "seed": 5,
            "graph": str(workdir / f"g-{graph}.yaml"),
            "data": {"dataset": "digits", "shift": 0.5},
            "agents": [
                {"encoder": [8, d], "head": [16], "dropout": 0.1, "classes": c}
                for d, c in zip(dims, CLASSES, strict=True)
            ],
            "train": {"batch_size": 32, "lr": 0.05, "eval_every": 1},
            # (strict runs read their secrets from key files: reproducible, so that runs
            # of them can be compared number for number)
            "sheaf": {
                "lam": 0.5,
                "pilot_batch": 16,
                "mask_secret": "file",
                "mask_secret_dir": str(workdir / "keys"),
            },
            "checkpoint": {"every": 0},
            "output": {"dir": str(workdir / "runs")},
        }
        (workdir / f"{graph}.yaml").write_text(yaml.safe_dump(cfg))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from tests.conftest import run_mpi

    workdir = tmp_path_factory.mktemp("variants")
    _write_inputs(workdir)
    proc = run_mpi(3, [str(Path(__file__).resolve()), str(workdir)], timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((workdir / "results.json").read_text())


def _close(a: dict, b: dict, keys, tol: float) -> None:
    for k in keys:
        assert a[k] == pytest.approx(b[k], abs=tol), k


def _gap(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def test_every_configuration_trains_and_evaluates(results):
    for name in RUNS:
        s = results[name]
        assert 0.0 <= s["private_acc"] <= 1.0 and 0.0 <= s["comm_acc"] <= 1.0, name
        assert len(s["agents"]) == 3 and s["bytes_sent_total"] > 0, name
        for agent, (before, after) in enumerate(zip(s["initial"], s["trained"], strict=True)):
            assert _gap(before, after) > 1e-4, (name, agent, "did not train")


def test_a_step_is_spec_sections_gradient_step(results):
    """The run's one step equals the step written from SPEC §2 in the test (CE + R_i with
    λ_i = λ/d_i, the 1/(2K) scale, maps in head × tail shape, the residual in the head's
    space). With λ in place of λ_i it differs by ~5e-3 (checked)."""
    run = results["het-plain-step"]
    for agent in range(3):
        moved = _gap(run["initial"][agent], run["trained"][agent])
        assert moved > 1e-3, agent
        # (0 here: the same float32 operations in the same order)
        assert _gap(results["spec_step"][agent], run["trained"][agent]) < 1e-6, agent


def test_communication_accuracy_is_eq22(results):
    """Each agent's reported accuracy on each neighbour equals SPEC Eq. 22 recomputed from
    the trained agents with the map oriented as SPEC says (the same samples right: far
    below one sample's worth, 1/51), and on square maps the swapped orientation would have
    been caught."""
    caught = 0
    for name in COMM_CHECKED:
        runs = zip(results[name]["agents"], results[name]["eq22"], strict=True)
        for i, (agent, eq22) in enumerate(runs):
            assert agent["agent"] == i
            reported = {int(j): acc for j, acc in agent["comm_by_neighbour"].items()}
            mine = {int(j): acc for j, acc in eq22["acc"].items()}
            assert reported == pytest.approx(mine, abs=1e-6), (name, i)  # float32 counts
            assert agent["comm_acc"] == pytest.approx(sum(reported.values()) / len(reported))
            caught += sum(eq22["swapped"][j] != eq22["acc"][j] for j in eq22["swapped"])
    assert caught > 0  # a transposed map gives other numbers on these runs


@pytest.mark.parametrize("name", ["het-standard", "het-window", "hom-standard"])
def test_both_ends_of_an_edge_hold_the_same_map(results, name):
    """SPEC §2: head and tail compute V_ij locally from the same pilots; nothing is sent."""
    import numpy as np

    held = [{int(j): np.array(v) for j, v in e["maps"].items()} for e in results[name]["eq22"]]
    dims = HET_DIMS if name.startswith("het") else HOM_DIMS
    for a, b in EDGES:
        head, tail = (a, b) if (dims[a], -a) > (dims[b], -b) else (b, a)
        v_head, v_tail = held[head][tail], held[tail][head]
        assert v_head.shape == (dims[head], dims[tail])
        np.testing.assert_allclose(v_head, v_tail, rtol=0, atol=1e-5, err_msg=f"{name} {a}-{b}")
        assert np.allclose(v_head.T @ v_head, np.eye(dims[tail]), atol=1e-4)  # Stiefel


@pytest.mark.parametrize("graph", ["het", "hom"])
def test_strict_trains_exactly_like_the_standard_algorithm(results, graph):
    """One step with fresh maps from the same weights (the strict run is given the standard
    run's): the same loss (Eq. 42) and the same updated models, up to float32 rounding
    (the transported penalty's gradient is computed as A_i − P_ijᵀ m)."""
    strict, standard = results[f"{graph}-strict"], results[f"{graph}-standard"]
    assert strict["initial"] == standard["initial"]
    for agent in range(3):
        # the step moved some parameter by > 1e-3; the two models differ in rounding only
        assert _gap(standard["initial"][agent], standard["trained"][agent]) > 1e-3
        assert _gap(strict["trained"][agent], standard["trained"][agent]) < 1e-5, agent
    _close(strict, standard, ["loss", "private_acc", "private_acc_val"], 1e-5)


def test_strict_draws_its_initial_weights_from_each_agents_secret(results):
    """Not from the run seed, which every neighbour knows (docs/privacy.md); from the same
    key files, the same weights."""
    own, seeded = results["het-strict-window"]["initial"], results["het-window"]["initial"]
    assert all(_gap(a, b) > 1e-3 for a, b in zip(own, seeded, strict=True))
    assert results["het-strict-window-overlap"]["initial"] == own


def test_homogeneous_tails_train_like_the_standard_algorithm(results):
    """Algorithm 2: a tail fits its map on the head's raw pilots of this very step, so a
    pure tail (agent 2: every neighbour has a smaller id) takes the standard step. Heads
    see the tails' pilots through the tails' previous maps (O = I at the first step), so
    agent 0 (a pure head) takes another."""
    hom, std = results["hom-homogeneous"], results["hom-standard"]
    assert min(_gap(std["initial"][a], std["trained"][a]) for a in range(3)) > 1e-3
    assert _gap(hom["trained"][2], std["trained"][2]) < 1e-5
    assert _gap(hom["trained"][0], std["trained"][0]) > 1e-3
    _close(hom["agents"][2], std["agents"][2], ["private_acc", "private_acc_val"], 1e-6)


def test_overlapping_the_exchange_changes_no_number(results):
    """Back-propagating the private batch while the pilots are in flight gives the very
    same run: losses, accuracies and bytes are equal, not close."""
    for name in ("het-window", "het-strict-window"):
        a, b = results[name], results[f"{name}-overlap"]
        for key in ("loss", "private_acc", "comm_acc", "private_acc_val", "bytes_sent"):
            assert a[key] == b[key], (name, key)
        for x, y in zip(a["agents"], b["agents"], strict=True):
            assert {k: v for k, v in x.items() if k != "seconds"} == {
                k: v for k, v in y.items() if k != "seconds"
            }, name


def test_how_often_a_run_evaluates_changes_no_number(results):
    """The strict variant's per-step mode refits maps for evaluation: on copies only."""
    often, rarely = results["het-strict-step-eval1"], results["het-strict-step-eval2"]
    assert often["trained"] == rarely["trained"]
    for key in ("loss", "private_acc", "comm_acc"):
        assert often[key] == rarely[key], key


def test_fused_pilots_send_what_separate_ones_do_and_train_otherwise(results):
    """One encoder call for the private batch and the pilots: the same pilot messages on
    the wire, but the whitening layer's batch statistics and the dropout masks then cover
    the union of the two batches, so the models train differently (the option is on)."""
    fused, separate = results["het-window-fused"], results["het-window"]
    assert fused["bytes_sent"] == separate["bytes_sent"]
    assert fused["initial"] == separate["initial"]
    assert fused["trained"] != separate["trained"]


def test_strict_sends_more_to_heads_and_homogeneous_sends_the_same(results):
    # heads of unequal edges receive d_head x K instead of d_tail x K
    assert results["het-strict"]["bytes_sent"] > results["het-standard"]["bytes_sent"]
    assert results["hom-homogeneous"]["bytes_sent"] == results["hom-standard"]["bytes_sent"]


def test_fmtl_reports_its_map_memory(results):
    agents = results["het-fmtl"]["agents"]
    assert all(a["fmtl_gamma"] == 0.01 for a in agents)
    assert sum(a["fmtl_map_bytes"] for a in agents) == results["fmtl_expected_bytes"]
    assert results["het-fmtl"]["fmtl_map_bytes"] == results["fmtl_expected_bytes"]
    assert results["het-fmtl"]["fmtl_gamma"] == 0.01


def test_strict_privacy_no_raw_pilots_or_latents_on_the_wire(results):
    assert len(results["privacy"]) == 3  # every rank's buffers were checked
    for check in results["privacy"]:
        strict, standard = check["strict"], check["standard"]
        assert strict["sent"] > 0 and strict["raw"] > 0
        assert strict["leaks"] == 0, check
        assert strict["calls"]["start_exchange"] == 0  # only per-neighbour messages
        # 2 epochs × 2 steps of pilots, then test and validation latents after each epoch
        assert strict["calls"]["start_exchange_each"] == 2 * 2 + 2 * 2
        assert standard["calls"]["start_exchange"] == 2 * 2 + 2 * 2
        assert strict["norms_ok"]  # every pilot message is an isometric image of an A_i
        # ... of which there was one per neighbour and step (2 epochs x 2 steps)
        assert strict["norms_checked"] == 2 * 2 * strict["degree"]
        assert standard["leaks"] > 0  # the check does catch raw pilots


if __name__ == "__main__":
    worker(Path(sys.argv[1]))
