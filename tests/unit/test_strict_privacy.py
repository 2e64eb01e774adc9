"""Strict privacy against a curious neighbour (docs/privacy.md), on real strict-variant runs.

The runs: the quickstart's four agents (configs/quickstart.yaml, ``sheaf.variant=strict``,
2 epochs of 6 steps), each agent in a thread of this process, joined by an in-process
neighbourhood that records every message (the runtime's MPI one is checked on real ranks
in tests/mpi/test_strict_privacy.py).

The attacker is neighbour j of agent i, honest but curious: it knows the config, the
code, its own state (what it sent to i) and every message i sent it, and tries what the
code allows:

* ``seed_mask``: rebuild i's first mask for the edge from the run seed and the two ids
  (how masks were drawn before: :func:`old_mask`) and unmask the first message;
* ``public_init``: rebuild i's initial encoder from the config, compute i's first pilot
  matrix ``A_i`` itself, and read the mask off the first message (Procrustes);

each then replays i's refits with the code's own refit schedule (:func:`replay`), which
needs only what j received, what j sent and the ``A_i`` it has recovered so far, to unmask
every later message. Against the old scheme both recover every ``A_i`` (a positive
control, so the test can fail); against secret masks with seed-drawn weights the second
still does (why the weights are drawn from the secret too); against the variant as it is
both fail. What the messages still reveal (docs/privacy.md) is checked too.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
import torch
from scipy.optimize import linear_sum_assignment

from fedsheaf.algorithms.base import Agent
from fedsheaf.algorithms.sheaf_frl_pilots import PilotPlan
from fedsheaf.algorithms.sheaf_frl_variants import StrictSheafFRL
from fedsheaf.config.schema import build
from fedsheaf.config.sections import ExperimentConfig, load_config
from fedsheaf.graphs import Graph
from fedsheaf.rundir import checkpoint
from fedsheaf.rundir.resume import resume_changes
from fedsheaf.runtime import experiment
from fedsheaf.sheaf.maps import PilotWindow, random_stiefel, stiefel_map, window_batches
from fedsheaf.sheaf.secret import read_secret
from fedsheaf.util.errors import ConfigError
from fedsheaf.util.seeding import torch_generator

torch.set_num_threads(1)
CPU = torch.device("cpu")
EPOCHS, STEPS = 2, 6
RECOVERED, FAILED = 1e-3, 0.5  # relative errors of an attacker's A_i


# ---------------------------------------------------------------- the runs


class Wire:
    """An in-process network for agents in threads: FIFO queues per directed edge, and a
    log of every message (sender, receiver, matrix) in each sender's order."""

    def __init__(self, graph) -> None:
        self.queues = {(i, j): queue.Queue() for i in range(graph.n) for j in graph.neighbours(i)}
        self.log: list[tuple[int, int, torch.Tensor]] = []
        self.lock = threading.Lock()


class Arriving:
    def __init__(self, queues) -> None:
        self.queues, self.result = queues, None

    def wait(self):
        if self.result is None:
            self.result = [q.get(timeout=300) for q in self.queues]
        return self.result


class WireNeighbourhood:
    """What the runtime's Neighbourhood offers an algorithm, over a :class:`Wire`."""

    def __init__(self, wire: Wire, i: int, neighbours) -> None:
        self.wire, self.i, self.neighbours = wire, i, [int(j) for j in neighbours]

    def start_exchange_each(self, mats, shapes=None, device=None):
        for j, m in zip(self.neighbours, mats, strict=True):
            buf = m.detach().to(CPU, torch.float32).clone()  # float32 on the wire, as MPI's
            with self.wire.lock:
                self.wire.log.append((self.i, j, buf))
            self.wire.queues[(self.i, j)].put(buf)
        return Arriving([self.wire.queues[(j, self.i)] for j in self.neighbours])

    def start_exchange(self, mat, shapes=None, device=None):
        return self.start_exchange_each([mat] * len(self.neighbours), shapes, device)

    def exchange(self, mat, shapes=None, device=None):
        return self.start_exchange(mat, shapes, device).wait()

    def exchange_each(self, mats, shapes=None, device=None):
        return self.start_exchange_each(mats, shapes, device).wait()

    def take_round_bytes(self):
        return {j: 0 for j in self.neighbours}


class Collect:
    def __init__(self) -> None:
        self.records: list[dict] = []

    def epoch(self, record) -> None:
        self.records.append({k: v for k, v in record.items() if k != "seconds"})


class OldStrict(StrictSheafFRL):
    """The reference: how strict masks and weights were drawn before (from the run seed)."""

    def __init__(self, agent, nbr, reporter) -> None:
        super().__init__(agent, nbr, reporter)
        self.model.load_state_dict(public_model(self.cfg, agent.id).state_dict())

    def initial_map(self, j):
        return old_mask(self.cfg, self.agent.graph, self.agent.id, j)


class SeedWeights(StrictSheafFRL):
    """Secret masks, but the encoder initialised from the run seed."""

    def __init__(self, agent, nbr, reporter) -> None:
        super().__init__(agent, nbr, reporter)
        self.model.load_state_dict(public_model(self.cfg, agent.id).state_dict())


@dataclass
class Run:
    cfg: ExperimentConfig
    graph: object
    log: list[tuple[int, int, torch.Tensor]]
    pilots: dict[int, list[torch.Tensor]]  # every agent's own A_i, step by step (the truth)
    algos: list[StrictSheafFRL] = field(default_factory=list)  # (in-process runs)
    initial: list[torch.Tensor] = field(default_factory=list)

    def sent(self, i: int, j: int, k: int) -> list[torch.Tensor]:
        """The pilot messages i sent j (the pilot matrices have K columns)."""
        return [m for s, d, m in self.log if (s, d) == (i, j) and m.shape[1] == k]

    def params(self) -> list[torch.Tensor]:
        return [flat(a.model) for a in self.algos]


def flat(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def quick_config(tmp_path, *overrides: str) -> ExperimentConfig:
    return load_config(
        "configs/quickstart.yaml",
        [
            "sheaf.variant=strict",
            f"train.epochs={EPOCHS}",
            f"train.steps_per_epoch={STEPS}",
            f"output.dir={tmp_path / 'runs'}",
            *overrides,
        ],
    )


def write_keys(directory, n: int, salt: int = 0):
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (directory / f"agent-{i}.key").write_bytes(
            bytes((7 * i + 3 * b + salt) % 256 for b in range(32))
        )
    return directory


def train(cfg: ExperimentConfig, cls=StrictSheafFRL) -> Run:
    """Train every agent of ``cfg`` in its own thread; record the wire and each ``A_i``."""
    graph = experiment.build_graph(cfg, len(cfg.agents))
    ds, part = experiment.load_and_partition(cfg)
    steps = experiment.steps_per_epoch(cfg, part)
    wire, pilots = Wire(graph), {}

    class Recorded(cls):
        def pilot_matrix(self, epoch, step):
            a = super().pilot_matrix(epoch, step)
            pilots.setdefault(self.agent.id, []).append(a.detach().clone())
            return a

    algos, initial = [], []
    for i in range(graph.n):
        data = experiment.agent_data(ds, part, i, CPU)
        model = experiment.agent_model(cfg, ds, i, CPU)
        agent = Agent(i, cfg, graph, data, model, CPU, steps)
        algos.append(Recorded(agent, WireNeighbourhood(wire, i, graph.neighbours(i)), Collect()))
        initial.append(flat(model).clone())
    failed: list[BaseException] = []

    def go(algo) -> None:
        try:
            algo.run()
        except BaseException as exc:  # re-raised below, in the test's thread
            failed.append(exc)

    threads = [threading.Thread(target=go, args=(a,)) for a in algos]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise failed[0]
    return Run(cfg, graph, wire.log, pilots, algos, initial)


# ---------------------------------------------------------------- the attacker


def old_mask(cfg, graph, i: int, j: int) -> torch.Tensor:
    """How strict masks were drawn before: from the run seed and the edge's two ids."""
    d_i = graph.dims[i]
    gen = torch_generator(cfg.seed, "strict-mask", i, j)
    return random_stiefel(max(d_i, graph.dims[j]), d_i, gen)


def public_model(cfg, i: int):
    """Agent i's model as the config and the code build it (the run seed)."""
    ds, _ = experiment.load_and_partition(cfg)
    return experiment.agent_model(cfg, ds, i, CPU)


def public_first_pilots(cfg, i: int, x_pilot: torch.Tensor) -> torch.Tensor:
    """Agent i's first ``A_i`` computed by a neighbour from the config and the code: i's
    seeded initial model, the shared pilots, and a stand-in private batch of the right size
    (whose dropout draws precede the pilots'; its values do not matter)."""
    model = public_model(cfg, i).train()
    with torch.no_grad():
        model(torch.zeros(cfg.train.batch_size, *x_pilot.shape[1:]))
        return PilotPlan(cfg.sheaf, cfg.seed, x_pilot, None).features(model.encode, x_pilot, 0, 0)


def replay(run: Run, i: int, j: int, first_map: torch.Tensor) -> list[torch.Tensor]:
    """Neighbour j unmasks every pilot message of i from a guess of i's first map for the
    edge: it runs i's refits (the code's own ``penalty``/``end_epoch`` for this edge) on
    what it sent i and the ``A_i`` it has unmasked so far."""
    cfg, k = run.cfg, run.cfg.sheaf.pilot_batch
    shadow = object.__new__(StrictSheafFRL)
    shadow.cfg, shadow.nbr = cfg, SimpleNamespace(neighbours=[j])
    shadow.is_head, shadow.out_maps = {j: run.graph.is_head(i, j)}, {j: first_map.clone()}
    shadow.refreshes, shadow.lam_i, shadow.agent = 0, 1.0, SimpleNamespace(device=CPU)
    shadow.window = PilotWindow(batches=window_batches(cfg.sheaf.window, k))
    received, mine = iter(run.sent(i, j, k)), iter(run.sent(j, i, k))
    found = []
    for epoch in range(cfg.train.epochs):
        for _ in range(cfg.train.steps_per_epoch or 0):
            a = shadow.out_maps[j].T @ next(received)
            found.append(a)
            shadow.penalty(a.clone(), [next(mine)])
        shadow.end_epoch(epoch)
    return found


def attacks(run: Run, i: int, j: int) -> dict[str, list[torch.Tensor]]:
    """Every strategy's guesses of i's pilot matrices, step by step."""
    ds, part = experiment.load_and_partition(run.cfg)
    x_pilot = experiment.agent_data(ds, part, j, CPU).x_pilot  # j's copy of the shared pilots
    first = run.sent(i, j, run.cfg.sheaf.pilot_batch)[0]
    a0 = public_first_pilots(run.cfg, i, x_pilot)
    return {
        "seed_mask": replay(run, i, j, old_mask(run.cfg, run.graph, i, j)),
        "public_init": replay(run, i, j, stiefel_map(first, a0)),
    }


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def errors(run: Run) -> dict[str, list[float]]:
    """Per strategy: the relative error of every guess, over every directed edge."""
    out: dict[str, list[float]] = {}
    for i in range(run.graph.n):
        for j in run.graph.neighbours(i):
            for name, guesses in attacks(run, i, j).items():
                truth = run.pilots[i]
                assert len(guesses) == len(truth)
                out.setdefault(name, []).extend(
                    rel(g, t) for g, t in zip(guesses, truth, strict=True)
                )
    return out


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    return write_keys(tmp_path_factory.mktemp("keys"), 4)


@pytest.fixture(scope="module")
def strict_run(tmp_path_factory, keys):
    cfg = quick_config(
        tmp_path_factory.mktemp("new"), "sheaf.mask_secret=file", f"sheaf.mask_secret_dir={keys}"
    )
    return train(cfg)


# ---------------------------------------------------------------- the threat model


def test_the_attacker_that_unmasks_the_old_scheme_recovers_no_pilot_matrix(strict_run, tmp_path):
    """The old scheme first (masks and weights from the run seed), so that the attack is
    known to work: every message of every agent is unmasked, by either strategy. Against
    the variant as it is (its secrets from key files here), no message is."""
    n = 12 * EPOCHS * STEPS  # 12 directed edges
    old = errors(train(quick_config(tmp_path), OldStrict))
    assert len(old["seed_mask"]) == len(old["public_init"]) == n
    assert max(old["seed_mask"]) < RECOVERED
    assert max(old["public_init"]) < RECOVERED
    for name, errs in errors(strict_run).items():
        assert len(errs) == n
        assert min(errs) > FAILED, name


def test_secret_masks_alone_fall_to_the_public_initial_weights(tmp_path):
    """Why the weights come from the secret too: with seed-drawn weights a neighbour
    computes i's first A_i, reads the secret mask off the first message and replays."""
    run = train(quick_config(tmp_path), SeedWeights)
    found = errors(run)
    assert min(found["seed_mask"]) > FAILED
    assert max(found["public_init"]) < RECOVERED


def test_the_os_secret_is_the_default_and_differs_per_agent_and_run(tmp_path):
    cfg = quick_config(tmp_path, "train.epochs=1", "train.steps_per_epoch=1")
    assert cfg.sheaf.mask_secret == "os"
    a, b = train(cfg), train(cfg)
    secrets = [x.secret for x in a.algos] + [x.secret for x in b.algos]
    assert len(set(secrets)) == 8 and all(len(s) == 32 for s in secrets)
    public = [flat(public_model(cfg, i)) for i in range(4)]
    for run in (a, b):  # the initial weights are not the seed's
        assert all((w - p).abs().max() > 1e-3 for w, p in zip(run.initial, public, strict=True))
    assert all((x - y).abs().max() > 1e-3 for x, y in zip(a.initial, b.initial, strict=True))
    assert min(errors(a)["public_init"]) > FAILED


# ---------------------------------------------------------------- what still leaks


def test_messages_reveal_a_i_up_to_one_unknown_rotation(strict_run):
    """docs/privacy.md: orthogonal masks keep the Gram matrix A_iᵀA_i, and since later maps
    are refits, one unknown rotation (the first mask) relates every step's message to A_i:
    from a wrong guess of the first map the replay gives R·A_i with one R for all steps."""
    run, k = strict_run, strict_run.cfg.sheaf.pilot_batch
    i, j = 0, 1  # agent 0 (d = 16) is the tail of its edge to agent 1 (d = 24)
    messages, truth = run.sent(i, j, k), run.pilots[i]
    for m, a in zip(messages, truth, strict=True):
        torch.testing.assert_close(m.T @ m, a.T @ a, atol=2e-4, rtol=1e-4)  # Gram matrices
    basis = torch.linalg.svd(messages[0].double(), full_matrices=False)[0][:, :16].float()
    guesses = replay(run, i, j, basis)  # a first map with the right column space
    x, y = torch.cat(guesses, 1).double(), torch.cat(truth, 1).double()
    assert rel(x, y) > FAILED
    r = stiefel_map(y, x)  # the best single rotation, fitted with the truth
    assert rel(r @ x, y) < 1e-3


def _unit_variance_attack(guesses: list[torch.Tensor], restarts: int = 2) -> torch.Tensor:
    """The rotation U (one for all steps) that gives every latent feature of Uᵀ·guess unit
    variance over each pilot batch, as ``sheaf.whitening=standardize`` makes them."""
    k = guesses[0].shape[1]
    cov = torch.stack([g.double() @ g.double().T / k for g in guesses])
    d = cov.shape[1]
    gen = torch.Generator().manual_seed(0)
    best = (float("inf"), torch.eye(d, dtype=torch.float64))
    for _ in range(restarts):
        w = torch.randn(d, d, generator=gen, dtype=torch.float64).requires_grad_(True)
        opt = torch.optim.LBFGS([w], max_iter=500, line_search_fn="strong_wolfe")

        def loss(w=w, opt=opt):
            opt.zero_grad()
            u = torch.matrix_exp(w - w.T)
            value = (torch.diagonal(u.T @ cov @ u, dim1=1, dim2=2) - 1).pow(2).sum()
            value.backward()
            return value

        for _ in range(3):
            opt.step(loss)
        value = float(loss().detach())
        if value < best[0]:
            best = (value, torch.matrix_exp(w - w.T).detach())
    return best[1]


def _up_to_signed_permutation(x: torch.Tensor, y: torch.Tensor) -> float:
    """Relative error of x against y after the best matching of x's rows to y's rows, signs
    included (what the attacker cannot tell: which feature is which)."""
    corr = (x @ y.T) / (x.norm(dim=1)[:, None] * y.norm(dim=1)[None, :])
    rows, cols = linear_sum_assignment(-corr.abs().numpy())
    p = torch.zeros_like(corr)
    p[cols, rows] = torch.sign(corr[rows, cols])
    return rel(p @ x, y)


@pytest.mark.parametrize("whitening", ["standardize", "zca"])
def test_standardised_latents_pin_the_rotation_down_to_a_signed_permutation(
    whitening, keys, tmp_path
):
    """docs/privacy.md: per-feature standardisation gives every row of A_i unit variance,
    which no other rotation keeps; a neighbour that searches for it learns A_i up to the
    order and signs of i's features (here from 22 messages; from 12 the search did not
    find it). ZCA whitening (identity covariance) leaves no such handle."""
    cfg = quick_config(
        tmp_path,
        f"sheaf.whitening={whitening}",
        "train.steps_per_epoch=11",
        "sheaf.mask_secret=file",
        f"sheaf.mask_secret_dir={keys}",
    )
    run = train(cfg)
    i, j, k = 0, 1, run.cfg.sheaf.pilot_batch
    basis = torch.linalg.svd(run.sent(i, j, k)[0].double(), full_matrices=False)[0][:, :16]
    guesses = replay(run, i, j, basis.float())
    u = _unit_variance_attack(guesses)
    x = torch.cat([u.T @ g.double() for g in guesses], 1)
    y = torch.cat(run.pilots[i], 1).double()
    assert rel(x, y) > FAILED  # A_i itself stays hidden either way
    if whitening == "standardize":
        assert _up_to_signed_permutation(x, y) < 1e-2
    else:
        assert _up_to_signed_permutation(x, y) > FAILED


def test_strict_runs_with_standardised_latents_are_warned(tmp_path):
    warned = experiment.privacy_warning(quick_config(tmp_path))
    assert warned is not None and "sheaf.whitening=zca" in warned and "\n" not in warned
    assert experiment.privacy_warning(quick_config(tmp_path, "sheaf.whitening=zca")) is None
    assert experiment.privacy_warning(quick_config(tmp_path, "sheaf.variant=standard")) is None
    cfg = quick_config(tmp_path)
    ds, part = experiment.load_and_partition(cfg)
    graph = experiment.build_graph(cfg, len(cfg.agents))
    assert warned in experiment.data_warnings(cfg, part, graph)  # said by jobs and checks


# ---------------------------------------------------------------- reproducible mode, resume


def test_key_files_make_runs_reproducible(strict_run, keys, tmp_path):
    again = train(strict_run.cfg)
    assert [a.reporter.records for a in again.algos] == [
        a.reporter.records for a in strict_run.algos
    ]
    assert all(torch.equal(x, y) for x, y in zip(again.params(), strict_run.params(), strict=True))
    assert [a.secret for a in again.algos] == [read_secret(keys, i) for i in range(4)]
    other = write_keys(tmp_path / "other", 4, salt=1)
    cfg = quick_config(
        tmp_path,
        "sheaf.mask_secret=file",
        f"sheaf.mask_secret_dir={other}",
        "train.epochs=1",
        "train.steps_per_epoch=1",
    )
    changed = train(cfg)
    assert all(
        (x - y).abs().max() > 1e-3 for x, y in zip(changed.initial, strict_run.initial, strict=True)
    )


def test_missing_or_short_keys_are_one_line_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="mask_secret=file reads each agent.s key from"):
        quick_config(tmp_path, "sheaf.mask_secret=file")
    keys = tmp_path / "keys"
    keys.mkdir()
    with pytest.raises(ConfigError, match=r"agent 0's key .*agent-0.key does not exist \(create"):
        read_secret(keys, 0)
    (keys / "agent-0.key").write_bytes(b"short")
    with pytest.raises(ConfigError, match="holds 5 bytes; it needs at least 16"):
        read_secret(keys, 0)
    cfg = quick_config(
        tmp_path, "sheaf.mask_secret=file", f"sheaf.mask_secret_dir={tmp_path / 'no'}"
    )
    data = experiment.agent_data(*experiment.load_and_partition(cfg), 0, CPU)
    with pytest.raises(ConfigError, match="is not a directory"):
        StrictSheafFRL.check(cfg, data)


class Echo:
    """One stand-in neighbour (agent 1) that sends back a fixed rotation of what it gets."""

    neighbours = [1]

    def __init__(self, d: int) -> None:
        self.q = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(1)))[0]

    def start_exchange_each(self, mats, shapes=None, device=None):
        m = mats[0].detach()
        return SimpleNamespace(
            wait=lambda: [self.q @ m if m.shape[0] == len(self.q) else m.clone()]
        )

    def exchange_each(self, mats, shapes=None, device=None):
        return self.start_exchange_each(mats).wait()

    def take_round_bytes(self):
        return {1: 0}


class Stop(Exception):
    pass


def _agent(cfg) -> StrictSheafFRL:
    graph = Graph("pair", dims=(16, 16), edges=((0, 1),))
    ds, part = experiment.load_and_partition(cfg)
    data = experiment.agent_data(ds, part, 0, CPU)
    model = experiment.agent_model(cfg, ds, 0, CPU)
    return StrictSheafFRL(Agent(0, cfg, graph, data, model, CPU, 3), Echo(16), Collect())


@pytest.mark.parametrize("mode", ["os", "file"])
def test_resume_keeps_the_secret_and_the_run_bitwise(mode, tmp_path):
    """The secret travels in the agent's own checkpoint: a resumed process (which would
    draw another) continues exactly as the uninterrupted run."""
    agent = {"encoder": [6, 16], "head": [16], "dropout": 0.3, "classes": [0, 1, 2, 3, 4]}
    sheaf = {"variant": "strict", "pilot_batch": 16, "mask_secret": mode}
    if mode == "file":
        sheaf["mask_secret_dir"] = str(write_keys(tmp_path / "keys", 1))
    raw = {
        "name": "one",
        "graph": "unused.yaml",
        "agents": [agent, agent],
        "data": {"limit": 600},
        "sheaf": sheaf,
        "train": {"epochs": 5, "steps_per_epoch": 3, "eval_every": 2, "batch_size": 16},
    }
    cfg = build(ExperimentConfig, raw)
    saved = tmp_path / "ckpt"

    def save(done: int) -> None:
        if done == 3:
            checkpoint.save_rank(saved, done, 0, {"algorithm": straight.state_dict()})
            checkpoint.commit(saved, done, 1)

    straight = _agent(cfg)
    straight.run(0, save)
    resumed = _agent(cfg)
    if mode == "os":
        assert resumed.secret != straight.secret  # a new process draws a new one ...
    ckpt = checkpoint.latest(saved, 1)
    assert ckpt is not None and ckpt.epoch == 3
    resumed.load_state_dict(checkpoint.load_rank(ckpt, 0)["algorithm"])
    assert resumed.secret == straight.secret  # ... and takes the saved one
    if mode == "file":
        assert resumed.secret == read_secret(tmp_path / "keys", 0)
    resumed.run(3)
    assert resumed.reporter.records == straight.reporter.records[3:]
    assert torch.equal(flat(resumed.model), flat(straight.model))


def test_the_key_directory_may_move_between_launches(tmp_path):
    """A resumed agent keeps the secret its checkpoint holds (above), so the key files may
    be elsewhere the next time; the mode itself stays as the run began."""
    before = quick_config(tmp_path, "sheaf.mask_secret=file", f"sheaf.mask_secret_dir={tmp_path}")
    moved = quick_config(tmp_path, "sheaf.mask_secret=file", "sheaf.mask_secret_dir=elsewhere")
    assert resume_changes(before, moved) == []
    assert resume_changes(before, quick_config(tmp_path)) != []
