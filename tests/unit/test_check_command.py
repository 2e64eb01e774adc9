"""``fedsheaf check``: a job's pre-flight checks in one process, writing nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from fedsheaf.cli import main as cli
from fedsheaf.config.sections import dump_config
from fedsheaf.rundir import checkpoint
from fedsheaf.rundir.files import mark
from fedsheaf.rundir.preflight import run_config

QUICK = "configs/quickstart.yaml"


def check(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def checkpointed(run, config: str, overrides: list[str], after: int, ranks: int) -> None:
    """Give ``run`` the resolved config and a complete checkpoint after ``after``, written
    by ``ranks`` ranks (files a job could read; their states hold nothing else)."""
    (run / "config.yaml").write_text(dump_config(run_config(config, overrides, None)))
    for rank in range(ranks):
        checkpoint.save_rank(run, after, rank, {})
    checkpoint.commit(run, after, ranks)


@pytest.fixture
def out_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    return tmp_path / "runs"


def test_a_sound_config_is_described_and_nothing_is_written(capsys, out_dir):
    code, out, err = check(capsys, QUICK, f"output.dir={out_dir}", "train.epochs=2")
    assert (code, err) == (0, "")
    lines = out.splitlines()  # (between them: memory and what the job will ask for)
    first, second = lines[0], lines[-1]
    assert first.startswith("fedsheaf check: ok for 4 ranks: sheaf_frl 'quickstart' on quick4")
    assert "2 epochs x" in first and first.endswith("seed 0")
    assert (
        second == f"fedsheaf check: would write a new run in {out_dir}/quickstart-sheaf_frl-seed0"
    )
    assert not out_dir.exists()


def test_it_does_not_import_mpi():
    code = (
        "import sys, fedsheaf.cli.check, fedsheaf.rundir.preflight; print('mpi4py' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_job_error_is_one_line_and_exit_2(capsys, out_dir):
    code, out, err = check(capsys, "-n", "5", QUICK, f"output.dir={out_dir}")
    assert (code, out) == (2, "")
    assert err.startswith("fedsheaf: error: graph graphs/quick4.yaml has 4 nodes but the job")
    assert err.count("\n") == 1
    code, _, err = check(
        capsys, QUICK, f"output.dir={out_dir}", "data.dataset=mnist", "data.root=/nonexistent"
    )
    assert code == 2 and "not found under data root /nonexistent" in err


@pytest.mark.parametrize(
    "overrides,message",
    [  # found by the job while it builds each agent's shard and its algorithm
        (["data.limit=20"], "empty private sets: agent 0 (val, test); agent 1 (test); agent"),
        (
            ["sheaf.pilot_strategy=stratified", "data.limit=300"],
            "stratified pilot batch 30 needs 3 pilots per class",
        ),
    ],
)
def test_shards_and_the_algorithms_set_up_are_checked(capsys, out_dir, overrides, message):
    code, out, err = check(capsys, QUICK, f"output.dir={out_dir}", *overrides)
    assert (code, out) == (2, ""), out
    assert err.startswith("fedsheaf: error: ") and message in err, err


def test_a_run_directory_the_job_cannot_create_is_refused(capsys, tmp_path):
    (tmp_path / "afile").write_text("not a directory\n")
    code, _, err = check(capsys, QUICK, f"output.dir={tmp_path / 'afile' / 'runs'}")
    assert code == 2
    assert f"cannot create run directory {tmp_path}/afile/runs/quickstart-sheaf_frl-seed0: " in err
    assert f"{tmp_path}/afile is a file" in err


def test_server_based_needs_a_rank_count_or_takes_the_allocations(capsys, out_dir, monkeypatch):
    args = (
        "configs/head_fedavg_diabetes3.yaml",
        f"output.dir={out_dir}",
        "federated.rounds=2",
    )
    code, _, err = check(capsys, *args)
    assert code == 2 and "give the job's rank count with -n N (this config takes 2 to 4" in err
    code, _, err = check(capsys, "-n", "1", *args)
    assert code == 2 and "needs at least 2 ranks" in err
    monkeypatch.setenv("SLURM_NTASKS", "3")
    code, out, err = check(capsys, *args)
    assert code == 0, err
    assert out.startswith("fedsheaf check: ok for 3 ranks (SLURM_NTASKS; -n to check another")
    assert "3 clients on 2 worker ranks" in out and "2 rounds" in out
    for bad in ("0", "four"):  # an allocation's count that is none is said, not used
        monkeypatch.setenv("SLURM_NTASKS", bad)
        code, _, err = check(capsys, *args)
        assert code == 2 and f"SLURM_NTASKS='{bad}' is not a rank count; give it with -n N" in err


def test_hub_methods_count_the_server_rank(capsys, out_dir, tmp_path):
    nodes = [{"id": i, "dim": 16} for i in range(3)]
    graph = {"name": "tri", "nodes": nodes, "edges": [[0, 1], [1, 2], [0, 2]]}
    (tmp_path / "g.yaml").write_text(json.dumps(graph))
    cfg = {
        "name": "hub",
        "graph": str(tmp_path / "g.yaml"),
        "data": {"dataset": "digits"},
        "agents": [{"encoder": [8, 16], "head": [16], "classes": list(range(10))}] * 3,
        "output": {"dir": str(out_dir)},
    }
    (tmp_path / "hub.yaml").write_text(json.dumps(cfg))
    args = (str(tmp_path / "hub.yaml"), "algorithm=fedmuscle")
    code, out, err = check(capsys, *args)
    assert code == 0, err
    assert out.startswith("fedsheaf check: ok for 4 ranks: fedmuscle 'hub' on tri (3 agents")
    code, _, err = check(capsys, "-n", "3", *args)
    assert code == 2 and "plus a server rank: launch with mpiexec -n 4" in err


def test_the_run_directory_is_checked_as_the_job_would(capsys, out_dir):
    run = out_dir / "quickstart-sheaf_frl-seed0"
    base = (QUICK, f"output.dir={out_dir}", "train.epochs=3")
    run.mkdir(parents=True)
    mark(run)  # a run's directory (fedsheaf's mark)
    (run / "metrics.jsonl").write_text('{"epoch": 1}\n')
    code, _, err = check(capsys, *base)
    assert code == 2 and "holds an unfinished run" in err
    code, out, _ = check(capsys, *base, "output.overwrite=true")
    assert code == 0 and f"would replace the run in {run}" in out
    assert (run / "metrics.jsonl").exists()  # nothing removed

    # an unfinished run with a complete checkpoint after epoch 2, written by 4 ranks
    checkpointed(run, QUICK, [f"output.dir={out_dir}", "train.epochs=3"], after=2, ranks=4)
    code, out, err = check(capsys, "--resume", str(run))
    assert code == 0, err
    assert out.splitlines()[-1] == f"fedsheaf check: would resume {run} after epoch 2"
    code, out, err = check(capsys, "--resume", str(run), "-n", "3")  # agents share ranks
    assert code == 0 and out.splitlines()[-1].endswith(f"would resume {run} after epoch 2"), err
    code, _, err = check(capsys, "--resume", str(run), "-n", "5")
    assert code == 2 and "has 4 nodes but the job has 5 ranks" in err
    code, _, err = check(capsys, "--resume", str(run), "train.epochs=1")
    assert code == 2 and "checkpointed after epoch 2, past the 1 epochs" in err
    # ended at its checkpoint's epoch, which was not evaluated: refused, as the job would
    (run / "metrics.jsonl").write_text('{"epoch": 1, "private_acc": 0.5}\n{"epoch": 2}\n')
    code, _, err = check(capsys, "--resume", str(run), "train.epochs=2")
    assert code == 2, err
    assert f"cannot end {run} at epoch 2: its checkpoint there was taken without" in err
    assert "report epoch 1's accuracies as the final ones" in err
    code, _, err = check(capsys, "--resume", str(run), "sheaf.lam=0.5")
    assert code == 2 and "cannot resume" in err and "sheaf.lam" in err
    # checkpoint files it cannot read: the one before, or none, as the job would
    checkpointed(run, QUICK, [f"output.dir={out_dir}", "train.epochs=3"], after=1, ranks=4)
    checkpointed(run, QUICK, [f"output.dir={out_dir}", "train.epochs=3"], after=2, ranks=4)
    (run / "metrics.jsonl").write_text('{"epoch": 1}\n{"epoch": 2}\n')
    newest = checkpoint.rank_file(run, 2, 3)
    newest.write_bytes(newest.read_bytes()[:40])  # a copy cut short
    code, out, err = check(capsys, "--resume", str(run))
    assert code == 0, err
    last = out.splitlines()[-1]
    assert last.startswith(
        f"fedsheaf check: would resume {run} after epoch 1 (the checkpoint after epoch 2 "
        f"cannot be used: checkpoint file {newest} is truncated (40 of its "
    ) and last.endswith(" bytes))"), last
    older = checkpoint.rank_file(run, 1, 0)
    older.write_bytes(b"not a checkpoint")
    code, _, err = check(capsys, "--resume", str(run))
    assert code == 2 and f"cannot resume {run}: no checkpoint can be read (checkpoint " in err
    checkpointed(run, QUICK, [f"output.dir={out_dir}", "train.epochs=3"], after=2, ranks=4)

    (run / "summary.json").write_text(json.dumps({"private_acc": 0.5}))
    code, out, err = check(capsys, "--resume", str(run))
    assert code == 0, err
    assert f"{run} has already finished its 3 epochs; nothing to do" in out
    code, out, err = check(capsys, "--resume", str(run), "train.epochs=5")
    assert code == 0, err
    assert (
        out.splitlines()[-1] == f"fedsheaf check: would extend the finished run {run} after epoch 2"
    )
    code, _, err = check(capsys, *base)
    assert code == 2 and "already holds a finished run" in err


def test_resuming_where_nothing_is_yet_starts_a_new_run(capsys, out_dir):
    code, out, err = check(capsys, QUICK, f"output.dir={out_dir}", "checkpoint.resume=true")
    assert code == 0, err
    run = out_dir / "quickstart-sheaf_frl-seed0"
    assert out.splitlines()[-1] == (
        f"fedsheaf check: would write a new run in {run} (nothing to resume there yet)"
    )


def test_a_server_based_resume_takes_the_checkpointing_jobs_rank_count(capsys, out_dir):
    run = out_dir / "head_fedavg_diabetes3-head_fedavg-seed0"
    run.mkdir(parents=True)
    checkpointed(run, "configs/head_fedavg_diabetes3.yaml", [f"output.dir={out_dir}"], 1, 3)
    code, out, err = check(capsys, "--resume", str(run))
    assert code == 0, err
    assert out.startswith("fedsheaf check: ok for 3 ranks (as the job that wrote its checkpoints")
    assert out.splitlines()[-1] == f"fedsheaf check: would resume {run} after round 1"


def test_options_may_follow_the_config(capsys, out_dir):
    code, out, err = check(capsys, QUICK, "-n", "4", f"output.dir={out_dir}", "seed=3")
    assert code == 0, err
    assert "seed 3" in out.splitlines()[0]
    code, out, err = check(capsys, QUICK, "-n5", f"output.dir={out_dir}", "seed=3")
    assert code == 2 and "has 4 nodes but the job has 5 ranks" in err


def test_the_15_agent_study_is_what_15_ranks_would_run(capsys, out_dir, fmnist_root):
    """Table 2: the graph of 15 nodes and 42 edges, every agent's shard and model."""
    code, out, err = check(
        capsys,
        "-n",
        "15",
        "configs/mnist15.yaml",
        "data.dataset=fashionmnist",
        f"data.root={fmnist_root}",
        "data.limit=3000",
        f"output.dir={out_dir}",
    )
    assert code == 0, err
    assert out.startswith("fedsheaf check: ok for 15 ranks: sheaf_frl 'mnist15' on mnist15 ")
    assert "(15 agents, 42 edges), fashionmnist" in out
    code, _, err = check(capsys, "-n", "16", "configs/mnist15.yaml", f"output.dir={out_dir}")
    assert code == 2 and "has 15 nodes but the job has 16 ranks" in err


def test_it_says_what_the_job_will_ask_for(capsys, out_dir):
    """On a login node, before sbatch: tasks and their roles, GPUs and memory a task."""
    code, out, err = check(capsys, QUICK, f"output.dir={out_dir}")
    assert code == 0, err
    lines = out.splitlines()
    ok, action = lines[0], lines[-1]
    assert ok.startswith("fedsheaf check: ok for 4 ranks") and "would write" in action
    asks = next(ln for ln in lines if ln.startswith("fedsheaf check: the job will ask for: "))
    assert asks.startswith("fedsheaf check: the job will ask for: 4 tasks (1 per agent), no GPU")
    assert "train.device=auto" in asks and "--gpus-per-task=1" in asks
    # the estimate (fedsheaf.rundir.footprint) + 50%, in whole GB, beside the measured peak
    memory = r", ~2 GB memory per task \((the estimated peak [\d.]+ [kMG]B \+ 50%, rounded up; )?"
    assert re.search(memory + r"measured: a rank peaks at [^)]*GB[^)]*\)$", asks), asks
    _, out, _ = check(capsys, QUICK, f"output.dir={out_dir}", "train.device=cuda")
    assert ": 4 tasks (1 per agent), 1 GPU per task (train.device=cuda), ~" in out
    _, out, _ = check(capsys, QUICK, f"output.dir={out_dir}", "train.device=cpu")
    assert ": 4 tasks (1 per agent), no GPU (train.device=cpu), ~" in out
    server = "configs/head_fedavg_diabetes3.yaml"
    code, out, err = check(capsys, "-n", "3", server, f"output.dir={out_dir}")
    assert code == 0, err
    assert "the job will ask for: 3 tasks (1 server + 2 workers), " in out


def test_it_describes_the_placement_of_agents_on_fewer_ranks(capsys, out_dir):
    """Issue 29: which agents each rank holds, the edges between ranks, the tasks a job
    of R ranks asks for and the memory of its fullest rank."""
    code, out, err = check(capsys, QUICK, f"output.dir={out_dir}")
    assert code == 0, err
    assert out.splitlines()[0].startswith("fedsheaf check: ok for 4 ranks: ")
    assert (
        "fedsheaf check: placement: one agent per rank (the config takes 1 to 4 ranks; fewer "
        "hold several agents each: check them with -n R)\n" in out
    )
    one = _estimate(out, "agent 2")
    code, out, err = check(capsys, "-n", "3", QUICK, f"output.dir={out_dir}")
    assert code == 0, err
    lines = [ln.removeprefix("fedsheaf check: ") for ln in out.splitlines()]
    assert lines[1:6] == [
        "placement: 4 agents on 3 ranks (1 to 2 per rank, contiguous; 5 of 6 edges between ranks)",
        "rank 0: agents 0-1",
        "rank 1: agents 2",
        "rank 2: agents 3",
        "edges between ranks (rank pairs that exchange): 0-1 (2 edges), 0-2 (2 edges), "
        "1-2 (1 edge)",
    ]
    asks = next(ln for ln in lines if ln.startswith("the job will ask for: "))
    assert asks.startswith("the job will ask for: 3 tasks (1 to 2 agents each, 4 in all), ")
    # the fullest rank holds torch once and two agents' models and data
    assert _estimate(out, "rank 0 (2 agents)") > one
    code, out, err = check(capsys, "-n", "1", QUICK, f"output.dir={out_dir}")
    assert code == 0, err
    assert "no graph edge between ranks: nothing crosses MPI" in out
    assert "the job will ask for: 1 task (4 agents each, 4 in all), " in out
    # what the agents hold while they meet: their pilot graphs, none when recomputed,
    # their whole steps with one graph for batch and pilots
    estimates = {"": _estimate(out, "rank 0 (4 agents)")}
    for option in ("recompute_pilots", "fused_pilots"):
        args = ("-n", "1", QUICK, f"output.dir={out_dir}", f"sheaf.{option}=true")
        code, out, err = check(capsys, *args)
        assert code == 0, err
        estimates[option] = _estimate(out, "rank 0 (4 agents)")
    assert estimates["recompute_pilots"] < estimates[""] < estimates["fused_pilots"], estimates


def test_a_shared_rank_s_estimate_adds_one_whole_step_to_what_the_others_hold():
    """placed_footprint: agents take turns, so the rank's step activations are one
    agent's whole step plus what each other agent holds across the meetings."""
    from fedsheaf.rundir.footprint import Footprint, placed_footprint

    def agent(step: int, held: int, evaluation: int = 0) -> Footprint:
        return Footprint(model=1, activations=max(step, evaluation), data=10, step=step, held=held)

    rank = placed_footprint([agent(100, 30), agent(50, 20), agent(80, 0)], [[0, 1, 2]], 4)
    assert rank.activations == 30 + 20 + 0 + max(100 - 30, 50 - 20, 80 - 0)
    assert (rank.model, rank.data, rank.rank) == (3, 4 + 3 * 6, "rank 0 (3 agents)")
    # an evaluation chunk, one agent at a time, may need more than any step
    assert placed_footprint([agent(10, 10, 500), agent(10, 10)], [[0, 1]], 0).activations == 500


def _estimate(out: str, rank: str) -> float:
    """The estimated peak memory ``fedsheaf check`` printed, in bytes, checking which
    rank it names as the one that needs most."""
    found = re.search(r"estimated peak memory per rank ~([\d.]+) (kB|MB|GB) \((.*)\)$", out, re.M)
    assert found and found[3].endswith(f"; {rank}, the rank that needs most"), out
    return float(found[1]) * {"kB": 1e3, "MB": 1e6, "GB": 1e9}[found[2]]
