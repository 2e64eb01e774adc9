"""Malformed input to ``fedsheaf run``: one clear message, non-zero exit, never a traceback.

``python -m fedsheaf run`` on one rank works without mpiexec (an MPI singleton),
so no case here needs a launcher. Most cases run in *one* driver process that
calls the CLI entry point again and again and records each exit status and
stderr (an exception escaping the CLI would be a traceback for the user, so it
fails the case); three cases are real, separate processes. Parser-level cases
live in tests/unit/test_config*.py and tests/unit/test_graphs*.py.

Every process costs its imports on a 2-core machine, so launches are shared: one
singleton run (the module fixture ``trained``) serves the real-process checks, the
changed-data refusal and the read-only resume (the latter two on copies of it), and a
resume refused and then allowed runs in one process (or job) of its own (:data:`STEPS`).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedsheaf.rundir.files import mark, read_metrics
from fedsheaf.util import reader_gone
from tests.conftest import REPO, mpi_env, run_mpi

pytestmark = pytest.mark.mpi

DRIVER = r"""
import contextlib, io, json, sys, traceback
from fedsheaf.cli.main import main

out = []
for argv in json.load(open(sys.argv[1])):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        except BaseException:
            code = "crash"
            traceback.print_exc(file=err)
    out.append({"argv": argv, "code": code, "stderr": err.getvalue()})
json.dump(out, open(sys.argv[2], "w"))
"""

#: ``fedsheaf`` command lines one after another in one process (on every rank of a job),
#: each one's exit status and stderr recorded as :data:`DRIVER` does (argv: a JSON list of
#: steps, the output file, suffixed with the rank); a step ``{"put": [file, source]}``
#: writes ``source``'s bytes into ``file`` (rank 0), and the data sets load anew after it.
STEPS = r"""
import contextlib, io, json, os, sys, traceback
from pathlib import Path
from fedsheaf.cli.main import main

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
out = []
for step in json.load(open(sys.argv[1])):
    if "put" in step:
        from mpi4py import MPI
        from fedsheaf.data.datasets_registry import clear_cache
        target, source = step["put"]
        if rank == 0:
            Path(target).write_bytes(Path(source).read_bytes())
        MPI.COMM_WORLD.Barrier()
        clear_cache()  # as a new process would: read the files again
        continue
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(step["argv"])
        except SystemExit as exc:
            code = exc.code
        except BaseException:
            code = "crash"
            traceback.print_exc(file=err)
    out.append({"argv": step["argv"], "code": code, "stderr": err.getvalue()})
json.dump(out, open(f"{sys.argv[2]}.{rank}", "w"))
"""

AGENT = {"encoder": [4, 6], "head": [8], "classes": [0, 1, 2]}


def _steps(n: int, steps: list[dict], work: Path) -> list[dict]:
    """:data:`STEPS` in one process (``n`` = 1: an MPI singleton) or one job of ``n``
    ranks; rank 0's record of each command line (every rank's exit statuses agree)."""
    (work / "steps.json").write_text(json.dumps(steps))
    args = ["-c", STEPS, str(work / "steps.json"), str(work / "steps-out.json")]
    if n == 1:
        proc = subprocess.run(
            [sys.executable, *args], cwd=REPO, env=mpi_env(), capture_output=True, text=True
        )
    else:
        proc = run_mpi(n, args, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranks = [json.loads((work / f"steps-out.json.{r}").read_text()) for r in range(n)]
    for other in ranks[1:]:
        assert [s["code"] for s in other] == [s["code"] for s in ranks[0]], ranks
    return ranks[0]


def _graph(tmp: Path, name: str, nodes, edges) -> str:
    path = tmp / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {"name": name, "nodes": [{"id": i, "dim": 6} for i in nodes], "edges": edges}
        )
    )
    return str(path)


def _config(tmp: Path, name: str, graph: str, n_agents: int = 1, **extra) -> str:
    cfg = {
        "name": name,
        "graph": graph,
        "agents": [AGENT] * n_agents,
        "train": {"epochs": 1, "steps_per_epoch": 2},
        "sheaf": {"pilot_batch": 8},
        "data": {"limit": 400},
        "output": {"dir": str(tmp / "runs")},
        **extra,
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _cases(tmp: Path) -> list[tuple[list[str], str]]:
    one = _graph(tmp, "one", [0], [])
    good = _config(tmp, "good", one)
    bad_yaml = tmp / "bad.yaml"
    bad_yaml.write_text("name: x\nagents: [unclosed\n")
    fm = ["data.dataset=fashionmnist"]
    empty_root = tmp / "empty"
    (empty_root / "FashionMNIST" / "raw").mkdir(parents=True)
    torn_root = tmp / "torn"
    (torn_root / "FashionMNIST" / "raw").mkdir(parents=True)
    for f in (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ):
        (torn_root / "FashionMNIST" / "raw" / f).write_bytes(b"\x00\x00\x08\x03\x00")
    unfinished = tmp / "runs" / "unfinished"
    (unfinished / "checkpoints").mkdir(parents=True)
    mark(unfinished)  # a fedsheaf run's (without the mark: somebody else's)
    finished = tmp / "runs" / "finished"
    finished.mkdir(parents=True)
    (finished / "config.yaml").write_text(Path(good).read_text())
    (finished / "summary.json").write_text("{}")
    foreign = tmp / "runs" / "notes"
    foreign.mkdir(parents=True)
    (foreign / "todo.txt").write_text("mine\n")
    blocker = tmp / "afile"
    blocker.write_text("a file, not a directory\n")
    run = ["run"]
    return [
        (run + [good, "output.name=../escape"], "'output.name' must be a plain name"),
        (run + [good, "name=a/b"], "'name' must be a plain name"),
        (run + [good, "output.name=notes"], "is not a fedsheaf run (it holds todo.txt)"),
        (run + [good, f"output.dir={blocker}"], f"cannot create run directory {blocker}/"),
        (run + [str(tmp / "nope.yaml")], "nope.yaml does not exist"),
        (run + [str(bad_yaml)], "bad.yaml is not valid YAML"),
        (run + [good, "train.epoch=2"], "unknown config key 'train.epoch' (did you mean"),
        (run + [good, "train.epochs=two"], "'train.epochs' must be an integer, got 'two'"),
        (run + [good, "sheaf.lam=-1"], "config key 'sheaf.lam' must be >= 0.0, got -1.0"),
        (run + [good, "agents[0].lr=0"], "config key 'agents[0].lr' must be > 0.0"),
        (run + [good, "agents[3].lr=1"], "'agents' has 1 entries"),
        (run + [good, "train"], "must look like key=value"),
        (run + [good, f"graph={tmp / 'missing.yaml'}"], "missing.yaml"),
        (
            run + [_config(tmp, "loop", _graph(tmp, "g_loop", [0, 1], [[0, 1], [1, 1]]), 2)],
            "self-loop",
        ),
        (
            run + [_config(tmp, "dup", _graph(tmp, "g_dup", [0, 1], [[0, 1], [1, 0]]), 2)],
            "duplicate",
        ),
        (
            run + [_config(tmp, "ghost", _graph(tmp, "g_ghost", [0, 1], [[0, 1], [1, 5]]), 2)],
            "names node 5, which does not exist",
        ),
        (run + [_config(tmp, "apart", _graph(tmp, "g_apart", [0, 1], []), 2)], "connected"),
        # (one process may hold every agent of a graph, issue 29; a job with more ranks
        # than agents is refused: tests/mpi/test_run.py's 5 ranks for 4 agents)
        (run + [_config(tmp, "count", one, 2)], "config lists 2 agents but graph"),
        (
            run + [good, *fm, "data.root=/nonexistent"],
            "/nonexistent/FashionMNIST/raw/train-images-idx3-ubyte",
        ),
        (run + [good, *fm, f"data.root={empty_root}"], "train-images-idx3-ubyte"),
        (run + [good, *fm, f"data.root={torn_root}"], "cannot load dataset 'fashionmnist'"),
        (run + [good, "data.dataset=imagenet"], "config key 'data.dataset': dataset 'imagenet' is"),
        (run + [good, "output.name=unfinished"], "holds an unfinished run"),
        # the run directory is checked before the data are loaded (the torn files would
        # fail): a long data load does not come before its refusal
        (
            run + [good, *fm, f"data.root={torn_root}", "output.name=unfinished"],
            "holds an unfinished run",
        ),
        (
            run + [good, *fm, f"data.root={torn_root}", f"output.dir={blocker}"],
            f"cannot create run directory {blocker}/",
        ),
        (run + ["--resume", str(finished), "train.epochs=2"], "with no checkpoint to continue"),
        (run + ["--resume", str(tmp)], "no config.yaml there"),
        (run + [good, "--resume", str(finished)], "give a CONFIG file or --resume RUN_DIR"),
        (run, "needs a CONFIG file or --resume RUN_DIR"),
        (run + [good, "checkpoint.resume=true", "output.overwrite=true"], "exclude each other"),
    ]


def test_bad_inputs_give_one_clear_message(tmp_path):
    cases = _cases(tmp_path)
    (tmp_path / "cases.json").write_text(json.dumps([argv for argv, _ in cases]))
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(tmp_path / "cases.json"), str(tmp_path / "out.json")],
        cwd=REPO,
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "out.json").read_text())
    failures = []
    for (argv, expected), got in zip(cases, results, strict=True):
        lines = got["stderr"].strip().splitlines()
        ok = (
            got["code"] == 2
            and len(lines) == 1
            and expected in lines[0]
            and lines[0].startswith("fedsheaf: error")
            and "Traceback" not in got["stderr"]
        )
        if not ok:
            failures.append(f"{argv[1:]}: exit {got['code']}, stderr {got['stderr']!r}")
    assert not failures, "\n".join(failures)
    finished = tmp_path / "runs" / "finished" / "summary.json"
    assert list(tmp_path.rglob("summary.json")) == [finished], "a bad input started a run"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedsheaf", *args],
        cwd=REPO,
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One singleton run (``fedsheaf run``, no launcher) of one agent on a small
    FashionMNIST copy (3 classes), 2 epochs checkpointed after each, its standard output's
    reader gone before the first line (``| head -0``): what it said and wrote, and a
    pristine copy of its run directory (``pristine``) for the tests that resume it."""
    work = tmp_path_factory.mktemp("trained")
    labels = _small_fashionmnist(work, 3)
    data = {"dataset": "fashionmnist", "root": str(work / "data"), "limit": 300}
    train = {"epochs": 2, "steps_per_epoch": 2}
    config = _config(work, "fp", _graph(work, "g1", [0], []), data=data, train=train)
    read_end, write_end = os.pipe()
    os.close(read_end)
    proc = subprocess.run(
        [sys.executable, "-m", "fedsheaf", "run", config, "checkpoint.every=1"],
        cwd=REPO,
        env=mpi_env(),
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    os.close(write_end)
    assert proc.returncode == 0, proc.stderr
    run = work / "runs" / "fp-sheaf_frl-seed0"
    shutil.copytree(run, work / "pristine")
    return {
        "returncode": proc.returncode,
        "stderr": proc.stderr,
        "n_agents": json.loads((run / "summary.json").read_text())["n_agents"],
        "checkpoints": json.loads((run / "checkpoints" / "latest.json").read_text())["epochs"],
        "epochs": [r["epoch"] for r in read_metrics(run / "metrics.jsonl")],
        "pristine": work / "pristine",
        "labels": labels,
        "data": work / "data",
    }


def test_real_processes_without_mpiexec(tmp_path, trained):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [\n")
    proc = _cli("run", str(bad))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "is not valid YAML" in proc.stderr

    good = _config(tmp_path, "good", _graph(tmp_path, "one", [0], []))
    proc = _cli("run", good, "data.dataset=mnist", f"data.root={tmp_path / 'no-data'}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no-data/MNIST/raw/train-images-idx3-ubyte" in proc.stderr

    # a singleton trains a one-agent run, checkpointing every epoch, with standard
    # output's reader gone before the first line (`| head -0`): the run goes on
    assert trained["returncode"] == 0, trained["stderr"]
    assert trained["stderr"].count(reader_gone.NOTICE) == 1, trained["stderr"]
    assert "Traceback" not in trained["stderr"]
    assert trained["n_agents"] == 1
    assert trained["checkpoints"] == [1, 2]
    assert trained["epochs"] == [1, 2]


def test_argument_errors_reach_the_user_under_mpiexec(mpirun):
    """Every rank parses the command line and only rank 0 prints; the others wait before
    exiting, or mpiexec may end rank 0 before it has said why (1 launch in 20 did: one
    launch per case shows that only rank 0 prints, not that the race is gone)."""
    for argv, words in (
        (["trian", "x"], "unknown command 'trian'"),
        (["run", "configs/quickstart.yaml", "--epochs", "3"], "unrecognized arguments: --epochs"),
    ):
        proc = mpirun(4, ["-m", "fedsheaf", *argv])
        assert proc.returncode != 0 and proc.stderr.count(words) == 1, proc.stderr


def test_bad_thread_count_is_one_message_on_every_rank_count(mpirun, tmp_path):
    good = _config(tmp_path, "good", _graph(tmp_path, "pair", [0, 1], [[0, 1]]), 2)
    proc = mpirun(2, ["-m", "fedsheaf", "run", good], env=mpi_env(FEDSHEAF_THREADS="two"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("FEDSHEAF_THREADS must be a positive integer, got 'two'") == 1
    assert not (tmp_path / "runs").exists()


def test_a_run_file_that_is_a_directory_is_refused_before_overwrite_removes_anything(
    mpirun, tmp_path
):
    good = _config(tmp_path, "dirs", _graph(tmp_path, "pair", [0, 1], [[0, 1]]), 2)
    run = tmp_path / "runs" / "dirs-sheaf_frl-seed0"  # an interrupted run, as it lies
    (run / "checkpoints" / "epoch-0001").mkdir(parents=True)
    for rank in (0, 1):
        (run / "checkpoints" / "epoch-0001" / f"rank-{rank}.pt").write_bytes(b"state")
    (run / "checkpoints" / "latest.json").write_text('{"epoch": 1, "n_ranks": 2}')
    (run / "config.yaml").write_text("name: dirs\n")
    mark(run)
    (run / "metrics.jsonl").mkdir()  # what a stray mkdir or copy leaves
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    again = mpirun(2, ["-m", "fedsheaf", "run", good, "output.overwrite=true"])
    assert again.returncode == 2 and "Traceback" not in again.stderr
    assert again.stderr.count(f"{run / 'metrics.jsonl'} is not a file") == 1, again.stderr
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # checkpoints kept


def _small_fashionmnist(tmp_path: Path, classes: int) -> Path:
    """A FashionMNIST root of 300 + 60 random images in the real on-disk format, labels
    below ``classes``; returns the train labels' file."""
    import numpy as np

    from tests.unit.test_data_sources import _write_idx

    raw = tmp_path / "data" / "FashionMNIST" / "raw"
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 300), ("t10k", 60)):
        _write_idx(raw, prefix, rng.integers(0, 256, (n, 28, 28)), rng.integers(0, classes, n))
    return raw / "train-labels-idx1-ubyte"


def _changed_labels(labels: Path, classes: int) -> bytes:
    """Edit 50 labels of ``labels`` in place (valid values, so loading succeeds); returns
    the file as it was."""
    kept = labels.read_bytes()
    edited = bytearray(kept)
    edited[8:58] = bytes((b + 1) % classes for b in kept[8:58])  # after the header
    labels.write_bytes(bytes(edited))
    return kept


def _refused_for_data(refused: dict, run: Path, root: Path) -> str:
    """The one line that refuses a resume of ``run`` on changed data (a :func:`_steps`
    record); returns it."""
    said = (
        f"fedsheaf: error: cannot resume {run}: the data set loaded from data.root="
        f"{root} differs from the one its checkpoints were trained on (its "
        "files have changed since); resume with the same data, or start over with "
        "output.overwrite=true\n"
    )
    stderr = refused["stderr"]
    assert refused["code"] == 2 and "Traceback" not in stderr
    assert stderr.count("fedsheaf: error") == 1 and said in stderr, stderr
    return said


def test_a_resume_on_data_files_that_changed_since_its_checkpoint_is_refused(tmp_path, trained):
    """Checkpoints record a fingerprint of the data set: labels edited in place (valid
    values, so loading succeeds) would silently mix two data sets into one run. (The run:
    a copy of ``trained``'s; the refusals and the resume once the labels are back: one
    process.)"""
    run = tmp_path / "runs" / "fp-sheaf_frl-seed0"
    shutil.copytree(trained["pristine"], run)
    labels = trained["labels"]
    kept = tmp_path / "labels.kept"
    kept.write_bytes(_changed_labels(labels, 3))
    try:
        # (check first: a refused run leaves its lock to its process, which lives on)
        checked, refused, resumed = _steps(
            1,
            [
                {"argv": ["check", "--resume", str(run), "train.epochs=3"]},  # finds it too
                {"argv": ["run", "--resume", str(run), "train.epochs=3"]},
                {"put": [str(labels), str(kept)]},
                {"argv": ["run", "--resume", str(run), "train.epochs=3"]},
            ],
            tmp_path,
        )
    finally:
        labels.write_bytes(kept.read_bytes())
    said = _refused_for_data(refused, run, trained["data"])
    assert refused["stderr"] == said
    assert checked["code"] == 2 and checked["stderr"] == said
    assert resumed["code"] == 0, resumed["stderr"]
    assert json.loads((run / "summary.json").read_text())["epoch"] == 3
    # the refusal left the run untouched: the resume continued from epoch 2's checkpoint
    assert [r["epoch"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2, 3]


def test_a_server_run_resumed_on_changed_data_files_is_refused(tmp_path):
    """Server-based runs record the fingerprint of both splits their clients are cut from
    (the server computes it: every rank loads the splits, none keeps them whole)."""
    labels = _small_fashionmnist(tmp_path, 10)
    config = tmp_path / "fedavg.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "fp",
                "algorithm": "fedavg",
                "data": {"dataset": "fashionmnist", "root": str(tmp_path / "data")},
                "train": {"batch_size": 10},
                "federated": {
                    "clients": 2,
                    "classes_per_client": 5,
                    "train_per_client": 20,
                    "test_per_client": 5,
                    "rounds": 1,
                },
                "output": {"dir": str(tmp_path / "runs")},
            }
        )
    )
    run = tmp_path / "runs" / "fp-fedavg-seed0"
    kept, changed = tmp_path / "labels.kept", tmp_path / "labels.changed"
    kept.write_bytes(_changed_labels(labels, 10))
    changed.write_bytes(labels.read_bytes())
    labels.write_bytes(kept.read_bytes())
    resume = {"argv": ["run", "--resume", str(run), "federated.rounds=2"]}
    # one job of 2 ranks: the first run; the labels changed: the resume refused; the labels
    # back: resumed
    first, refused, resumed = _steps(
        2,
        [
            {"argv": ["run", str(config)]},
            {"put": [str(labels), str(changed)]},
            resume,
            {"put": [str(labels), str(kept)]},
            resume,
        ],
        tmp_path,
    )
    assert first["code"] == 0, first["stderr"]
    said = _refused_for_data(refused, run, tmp_path / "data")  # said without a rank
    assert resumed["code"] == 0, resumed["stderr"]
    assert [r["round"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2]
    recorded = json.loads((run / "checkpoints" / "latest.json").read_text())["data"]
    assert len(recorded.split("+")) == 2  # train and test
    labels.write_bytes(changed.read_bytes())  # `fedsheaf check` finds it too
    try:
        checked = _cli("check", "-n", "2", "--resume", str(run), "federated.rounds=3")
    finally:
        labels.write_bytes(kept.read_bytes())
    assert checked.returncode == 2 and checked.stderr == said


def test_a_sweep_stops_when_two_runs_in_a_row_are_refused_alike(tmp_path):
    """Each run of a study on a damaged data file failed on its own, one launch apiece,
    and the sweep never said why; now it prints the error and stops at the second."""
    labels = _small_fashionmnist(tmp_path, 3)
    images = labels.with_name("train-images-idx3-ubyte")
    images.write_bytes(images.read_bytes()[:1000])  # there, but cut short
    data = {"dataset": "fashionmnist", "root": str(tmp_path / "data"), "limit": 300}
    config = _config(tmp_path, "sw", _graph(tmp_path, "g1", [0], []), data=data)
    study = tmp_path / "study.yaml"
    study.write_text(
        yaml.safe_dump(
            {
                "study": "damaged",
                "config": config,
                "output": str(tmp_path / "sweep"),
                "seeds": [0, 1, 2],
                "axis": {"key": "sheaf.lam", "values": [0.1]},
                "methods": [{"name": "sheaf_frl"}],
            }
        )
    )
    out = _cli("sweep", str(study), "--local")
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stderr.splitlines()  # a run's failure, and why, are errors: on stderr
    refusals = [ln for ln in lines if "fedsheaf: error: " in ln and "truncated" in ln]
    assert [ln.split(":")[0] for ln in refusals] == [
        "[1/3] sheaf_frl-sheaf.lam0.1-seed0",
        "[2/3] sheaf_frl-sheaf.lam0.1-seed1",
    ], out.stderr
    assert "sweep damaged: stopped: two runs in a row were refused with the same error" in (
        out.stderr
    )
    said = (out.stdout + out.stderr).splitlines()
    assert not any(ln.startswith("[3/3]") for ln in said), out.stdout + out.stderr


def _read_only_mounts(probe_dir: Path) -> list[str] | None:
    """The command words that run a command in a mount namespace of its own, where it may
    bind-mount a directory read-only (root: ``unshare -m``; others: in a user namespace of
    their own too), or None where this machine does not allow it (tried on ``probe_dir``)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    words = [unshare, "-m"] if os.geteuid() == 0 else [unshare, "-r", "-m"]
    d = shlex.quote(str(probe_dir))
    probe = subprocess.run(
        [*words, "sh", "-c", f"mount --bind {d} {d} && mount -o remount,bind,ro {d}"],
        capture_output=True,
        timeout=60,
    )
    return words if probe.returncode == 0 else None


def test_a_resume_on_a_read_only_file_system_says_so_without_advising_another_output_dir(
    tmp_path, trained
):
    """``fedsheaf run --resume RUN_DIR`` keeps the run where it is, so its refusal on a file
    system mounted read-only must say that, and not advise another output.dir. The mount
    (a read-only bind of the run directory, made in a mount namespace of the resuming
    process's own: chmod does not stop root) is real; so is the run being resumed."""
    words = _read_only_mounts(tmp_path)
    if words is None:
        pytest.skip("no mount namespace with a read-only bind mount allowed here")
    run = tmp_path / "runs" / "ro"
    shutil.copytree(trained["pristine"], run)  # a real run's directory
    (run / "summary.json").unlink()  # as a run cut short leaves it
    before = sorted(p.name for p in run.iterdir())
    resume = shlex.join([sys.executable, "-m", "fedsheaf", "run", "--resume", str(run)])
    d = shlex.quote(str(run))
    script = f"mount --bind {d} {d} && mount -o remount,bind,ro {d} && exec {resume}"
    proc = subprocess.run(
        [*words, "sh", "-c", script],
        cwd=REPO,
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == (
        f"fedsheaf: error: cannot write into run directory {run}: it is on a read-only file "
        "system; remount it read-write, or copy the run directory to a writable place and "
        "resume the copy\n"
    )
    assert "output.dir" not in proc.stderr
    assert sorted(p.name for p in run.iterdir()) == before
