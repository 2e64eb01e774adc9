"""Strict privacy against a curious neighbour on real MPI ranks (docs/privacy.md).

One launch (4 ranks) trains the quickstart with ``sheaf.variant=strict`` twice through the
runtime's own ``Neighbourhood``: with the old scheme (masks and initial weights from the
run seed: ``OldStrict`` of tests/unit/test_strict_privacy.py) and as the variant is (its
secrets from per-agent key files). A subclass of the neighbourhood records every buffer
a rank sends; each rank saves its records and its own pilot matrices. The pytest side
then plays every neighbour with the attacker of the unit test (config, code, what the
neighbour sent and received): it unmasks every message of the old scheme and none now.

Run as a script under mpiexec (``python tests/mpi/test_strict_privacy.py WORKDIR``) it is
the worker.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.mpi

N = 4


def _config(workdir: Path, label: str):
    from tests.unit.test_strict_privacy import quick_config

    keys = ["sheaf.mask_secret=file", f"sheaf.mask_secret_dir={workdir / 'keys'}"]
    return quick_config(workdir, *(keys if label == "new" else []))


def worker(workdir: Path) -> None:
    import torch

    from fedsheaf.algorithms.base import Agent
    from fedsheaf.algorithms.sheaf_frl_variants import StrictSheafFRL
    from fedsheaf.runtime import experiment
    from fedsheaf.runtime.topology import Neighbourhood, _as_buffer
    from fedsheaf.runtime.world import init_world
    from tests.unit.test_strict_privacy import Collect, OldStrict

    class Recording(Neighbourhood):
        def __init__(self, *args) -> None:
            super().__init__(*args)
            self.sent: list[tuple[int, torch.Tensor]] = []

        def start_exchange(self, mat, shapes=None, device=None):
            self.sent += [(j, torch.from_numpy(_as_buffer(mat))) for j in self.neighbours]
            return super().start_exchange(mat, shapes, device)

        def start_exchange_each(self, mats, shapes=None, device=None):
            for j, m in zip(self.neighbours, mats, strict=True):
                self.sent.append((j, torch.from_numpy(_as_buffer(m))))
            return super().start_exchange_each(mats, shapes, device)

    world = init_world()
    torch.set_num_threads(1)
    for label, cls in (("old", OldStrict), ("new", StrictSheafFRL)):
        cfg = _config(workdir, label)
        pilots: list[torch.Tensor] = []

        class Recorded(cls):  # type: ignore[valid-type,misc]
            own: list[torch.Tensor] = pilots

            def pilot_matrix(self, epoch, step):
                a = super().pilot_matrix(epoch, step)
                self.own.append(a.detach().cpu().clone())
                return a

        graph = experiment.build_graph(cfg, world.size)
        ds, part = experiment.load_and_partition(cfg)
        data = experiment.agent_data(ds, part, world.rank, world.device)
        model = experiment.agent_model(cfg, ds, world.rank, world.device)
        steps = experiment.steps_per_epoch(cfg, part)
        agent = Agent(world.rank, cfg, graph, data, model, world.device, steps)
        nbr = Recording(world.comm, graph.neighbours(world.rank))
        Recorded(agent, nbr, Collect()).run()
        nbr.free()
        torch.save({"sent": nbr.sent, "pilots": pilots}, workdir / f"{label}-rank{world.rank}.pt")
    world.barrier()
    if world.is_root:
        (workdir / "done.json").write_text(json.dumps({"ranks": world.size}))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from tests.conftest import run_mpi
    from tests.unit.test_strict_privacy import write_keys

    workdir = tmp_path_factory.mktemp("strict-privacy")
    write_keys(workdir / "keys", N)
    proc = run_mpi(N, [str(Path(__file__).resolve()), str(workdir)], timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert json.loads((workdir / "done.json").read_text()) == {"ranks": N}
    return workdir


def _run(workdir: Path, label: str):
    import torch

    from fedsheaf.runtime import experiment
    from tests.unit.test_strict_privacy import Run

    cfg = _config(workdir, label)
    log, pilots = [], {}
    for rank in range(N):
        saved = torch.load(workdir / f"{label}-rank{rank}.pt", weights_only=True)
        log += [(rank, j, m) for j, m in saved["sent"]]
        pilots[rank] = saved["pilots"]
    return Run(cfg, experiment.build_graph(cfg, N), log, pilots)


def test_real_ranks_unmask_the_old_scheme_and_nothing_now(recorded):
    from tests.unit.test_strict_privacy import EPOCHS, FAILED, RECOVERED, STEPS, errors

    n = 12 * EPOCHS * STEPS  # the quickstart's 12 directed edges
    old = errors(_run(recorded, "old"))
    assert len(old["seed_mask"]) == len(old["public_init"]) == n
    assert max(old["seed_mask"]) < RECOVERED and max(old["public_init"]) < RECOVERED
    for name, errs in errors(_run(recorded, "new")).items():
        assert len(errs) == n
        assert min(errs) > FAILED, name


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for tests.*
    worker(Path(sys.argv[1]))
