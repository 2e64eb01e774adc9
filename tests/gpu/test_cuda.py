"""On a CUDA machine: agents on the GPU build, compute and train as on the CPU.

Skipped where no CUDA device is visible (CI has none); run on a GPU node with
``run/test.sh tests/gpu``. The decentralized run puts 4 real ranks on one GPU.
"""

from __future__ import annotations

import json

import pytest
import torch

from fedsheaf.config.sections import load_config
from fedsheaf.rundir.files import read_metrics
from fedsheaf.runtime import experiment
from tests.conftest import untimed

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

QUICK = ["train.epochs=2", "train.steps_per_epoch=4", "train.eval_every=1"]


def test_agent_models_match_between_cpu_and_gpu():
    """Same initial weights on both devices; eval-mode outputs agree to TF32 precision."""
    cfg = load_config("configs/quickstart.yaml", [])
    ds, part = experiment.load_and_partition(cfg)
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    for agent in range(len(cfg.agents)):
        m_cpu = experiment.agent_model(cfg, ds, agent, cpu).eval()
        m_gpu = experiment.agent_model(cfg, ds, agent, gpu).eval()
        pairs = zip(m_cpu.state_dict().items(), m_gpu.state_dict().values(), strict=True)
        for (name, a), b in pairs:
            assert b.device.type == "cuda"
            assert torch.equal(a, b.cpu()), name
        x = experiment.agent_data(ds, part, agent, cpu).x_train[:64]
        with torch.no_grad():
            ref, out = m_cpu(x), m_gpu(x.to(gpu)).cpu()
        assert torch.linalg.norm(out - ref) <= 1e-3 * torch.linalg.norm(ref)


def _quickstart(mpirun, n: int, out, name: str, extra: list[str]):
    """The quickstart on the GPU in ``n`` ranks, written to ``out/name``."""
    argv = ["-m", "fedsheaf", "run", "configs/quickstart.yaml", "train.device=cuda"]
    argv += [f"output.dir={out}", f"output.name={name}", *QUICK, *extra]
    return mpirun(n, argv, timeout=300)


@pytest.mark.mpi
def test_quickstart_on_one_gpu_completes_and_is_deterministic(mpirun, tmp_path):
    """4 ranks share cuda:0; two runs with one seed give identical metrics, and so does a
    third that back-propagates the private batch while the pilots travel."""
    runs = [
        _quickstart(mpirun, 4, tmp_path, f"r{k}", ["sheaf.overlap_exchange=true"] if k == 2 else [])
        for k in range(3)
    ]
    for proc in runs:
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert "device cuda:0" in runs[0].stdout
    first, second, overlapped = (
        read_metrics(tmp_path / f"r{k}" / "metrics.jsonl") for k in range(3)
    )
    assert len(first) == 2
    assert untimed(first) == untimed(second) == untimed(overlapped)
    # every rank's peak of GPU memory allocated by torch, beside its peak RSS
    summary = json.loads((tmp_path / "r0" / "summary.json").read_text())
    gpu = summary["memory"]["peak_cuda_bytes"]
    assert len(gpu) == 4 and min(gpu) > 0 and "GPU memory allocated" in runs[0].stdout


@pytest.mark.mpi
def test_agents_sharing_a_rank_on_a_gpu_give_the_numbers_of_one_rank_each(mpirun, tmp_path):
    """The quickstart's four agents on 2 ranks (two per rank) on the GPU, holding or
    recomputing the pilot graph, give the metrics of 4 ranks; with two GPUs or more, a
    rank spreads its agents over the GPUs it owns (train.agent_gpus=spread, the default)
    and gives them too."""
    spread = torch.cuda.device_count() >= 2
    cases = {
        "r4": (4, []),
        "r2": (2, ["train.agent_gpus=share"]),
        "r2-recompute": (2, ["train.agent_gpus=share", "sheaf.recompute_pilots=true"]),
        **({"r1-spread": (1, [])} if spread else {}),
    }
    procs = {}
    for name, (n, extra) in cases.items():
        procs[name] = _quickstart(mpirun, n, tmp_path, name, extra)
        assert procs[name].returncode == 0, procs[name].stderr[-3000:]
    want = untimed(read_metrics(tmp_path / "r4" / "metrics.jsonl"))
    for name in cases:
        assert untimed(read_metrics(tmp_path / name / "metrics.jsonl")) == want, name
    if spread:
        assert "devices cuda:0, cuda:1" in procs["r1-spread"].stdout
