"""What a resume refuses (another experiment, a length before its checkpoint) and how it
survives a damaged newest checkpoint; relative paths are explained when they miss.

The runs that succeed before the tests look (the reference, the run to extend, a
requeued job with nothing to do, the extension of a copy) share one 4-rank job
(``fedsheaf run``'s own entry point, :func:`fedsheaf.cli.main.main`, in a loop: the
module-scoped fixture); the refused launches and the extension past a damaged
checkpoint are ``fedsheaf run`` jobs of their own, two at a time.
"""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fedsheaf.cli import main as cli
from fedsheaf.rundir.files import read_metrics
from tests.conftest import REPO, run_mpi, untimed

pytestmark = pytest.mark.mpi
# evaluated every 2 epochs (and after the last): a run of 4 evaluates epochs 2 and 4 only
COMMON = [
    "train.steps_per_epoch=2",
    "train.eval_every=2",
    "checkpoint.every=1",
    "checkpoint.keep=3",
    "seed=5",
]
QUICK = str((REPO / "configs/quickstart.yaml").resolve())


def _run(*args: str):
    return run_mpi(4, ["-m", "fedsheaf", "run", *args], timeout=240)


def _together(*jobs):
    """Each job (a function that launches one or more runs in turn) in a thread of its own,
    all at once: startup dominates these short 4-rank runs on 2 cores. Their results."""
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [pool.submit(job) for job in jobs]
        return [f.result() for f in futures]


#: The fixture's job: each step a ``fedsheaf`` command line, or ("copy", A, B) to copy
#: the run directory A to B (rank 0, the others waiting).
SCRIPT = """\
import json, shutil, sys
from pathlib import Path

from fedsheaf.cli.main import main
from fedsheaf.runtime.world import init_world

root, steps = Path(sys.argv[1]), json.loads(sys.argv[2])
world = init_world()
for step in steps:
    if step[0] == "copy":
        if world.rank == 0:
            shutil.copytree(root / step[1], root / step[2])
        world.barrier()
    elif main(step) != 0:
        sys.exit("failed: fedsheaf " + " ".join(step))
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, str]:
    """One job: ``ref``, a run of 4 epochs (checkpointed every epoch), and ``cut``, a run
    of 3 epochs checkpointed every 2 epochs and after the last; ``finished``, a copy of
    ``cut`` as it finished, which no test changes; ``fedsheaf run --resume cut``, a
    requeued job with nothing to do; ``short``, another copy of ``cut``, trained on to 4
    epochs (test_a_run_trained_longer_differs_only_in_its_extra_evaluation). The runs'
    directory and the job's output (test_resume_guards_and_fallback damages and extends
    ``cut`` itself)."""
    root = tmp_path_factory.mktemp("runs")
    out = f"output.dir={root}"
    steps = [
        ["run", QUICK, out, "output.name=ref", "train.epochs=4", *COMMON],
        ["run", QUICK, out, "output.name=cut", "train.epochs=3", *COMMON, "checkpoint.every=2"],
        ["copy", "cut", "finished"],
        ["copy", "cut", "short"],
        ["run", "--resume", str(root / "cut")],  # a requeued job: nothing to do, exit 0
        ["run", "--resume", str(root / "short"), "train.epochs=4"],
    ]
    (root / "script.py").write_text(SCRIPT)
    proc = run_mpi(4, [str(root / "script.py"), str(root), json.dumps(steps)], timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root, proc.stdout


def _restricted(record, like):
    """``record`` with only the keys ``like`` has, at every level (lists entry by entry)."""
    if isinstance(like, dict):
        return {k: _restricted(record[k], v) for k, v in like.items()}
    if isinstance(like, list) and len(like) == len(record):
        return [_restricted(r, v) for r, v in zip(record, like, strict=True)]
    return record


def _one_error(proc) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("fedsheaf:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def _checked(capsys, *args: str, code: int = 2) -> str:
    """``fedsheaf check`` in this process: the refusals a job makes before any rank reads
    a checkpoint are the same functions there (:mod:`fedsheaf.rundir.preflight`); its one line."""
    assert cli.main(["check", "-n", "4", *args]) == code
    out, err = capsys.readouterr()
    return (err if code else out).strip().splitlines()[-1]


def test_resume_guards_and_fallback(runs, capsys, monkeypatch):
    """What a finished run refuses, or has nothing to do for, without being changed; a
    damaged newest checkpoint falls back to the one before, ending as the reference."""
    runs, said = runs
    quick, out, tmp_path = QUICK, f"output.dir={runs}", runs
    cut = runs / "cut"  # a finished run of 3 epochs, to be trained longer
    finished = runs / "finished"  # cut as it was before the requeued job ran on it
    # every 2 epochs and after the last, so that it is extended from its end
    assert sorted(p.name for p in (cut / "checkpoints").glob("epoch-*")) == [
        "epoch-0002",
        "epoch-0003",
    ]
    summary = (finished / "summary.json").read_text()
    files = ("summary.json", "config.yaml", "metrics.jsonl")
    kept = {f: (finished / f).read_bytes() for f in files}
    nock = tmp_path / "nock"  # the same finished run without checkpoints: the real job
    shutil.copytree(cut, nock, ignore=shutil.ignore_patterns("checkpoints"))
    # copies whose checkpoints of rank 1 are damaged, or gone: refused extensions
    broken = tmp_path / "broken"
    shutil.copytree(cut, broken)
    for f in (broken / "checkpoints").glob("epoch-*/rank-1.pt"):
        f.write_bytes(b"junk")
    gone = tmp_path / "gone"
    shutil.copytree(cut, gone)
    for f in (gone / "checkpoints").glob("epoch-*/rank-1.pt"):
        f.unlink()
    manifest = (broken / "checkpoints" / "latest.json").read_bytes()
    # a replacement of cut that fails before training (an empty pilot set)
    pilot = [quick, out, "output.name=cut", "train.epochs=3", *COMMON, "output.overwrite=true"]
    # the launches that refuse start together, two at a time
    pilot_proc, nock_proc = _together(
        lambda: _run(*pilot, "data.pilot_fraction=0.0001"),
        lambda: _run("--resume", str(nock), "train.epochs=4"),
    )
    # the requeued job (the fixture's): nothing to do, exit 0, cut left as it was
    assert f"{cut} has already finished its 3 epochs; nothing to do" in said
    assert "train.epochs greater than 3" in said
    assert {f: (cut / f).read_bytes() for f in kept} == kept
    # refusals before any checkpoint is read: through `fedsheaf check`, the same functions
    line = _checked(capsys, "--resume", str(cut), "seed=6", "train.epochs=4")
    assert "cannot resume" in line and "experiment: seed (5 -> 6). A resumed run" in line
    for again, asked in (
        ([quick, out, "output.name=cut", "train.epochs=3", "checkpoint.resume=true", *COMMON], ""),
        (["--resume", str(cut), "train.epochs=2"], ", more than the 2 asked for"),
    ):  # a job-array line run again (maybe after the run was extended)
        line = _checked(capsys, *again, code=0)
        assert f"{cut} has already finished its 3 epochs{asked}; nothing to do" in line
    assert (cut / "summary.json").read_text() == summary
    line = _one_error(nock_proc)
    assert f"{nock} is a finished run with no checkpoint to continue from" in line
    assert "train.epochs=4 and output.overwrite=true" in line
    assert {f: (nock / f).read_bytes() for f in kept} == kept  # refused before any change
    away = tmp_path / "elsewhere"
    away.mkdir()
    monkeypatch.chdir(away)
    line = _checked(capsys, "--resume", str(cut), "train.epochs=4")
    assert f"graphs/quick4.yaml does not exist (relative to the current directory {away})" in line
    assert line.endswith(f"the run keeps a copy of its graph: add graph={cut / 'graph.yaml'}")
    # the same relative path naming another graph there: refused, the run's copy offered
    (away / "graphs").mkdir()
    ring = (REPO / "graphs/quick4.yaml").read_text().replace("  - [0, 2]\n", "")
    assert ring != (REPO / "graphs/quick4.yaml").read_text()
    (away / "graphs" / "quick4.yaml").write_text(ring)
    line = _checked(capsys, "--resume", str(cut), "train.epochs=4")
    assert f"it is not the graph the run started with, kept as {cut}/graph.yaml" in line
    assert f"resume with graph={cut / 'graph.yaml'}" in line
    # ... and that advice works (the copy is the run's graph): here, nothing left to do
    line = _checked(capsys, "--resume", str(cut), f"graph={cut / 'graph.yaml'}", code=0)
    assert "has already finished its 3 epochs" in line
    monkeypatch.chdir(REPO)
    # a finished run that lost its config.yaml: refused before anything is touched
    nocfg = tmp_path / "nocfg"
    shutil.copytree(cut, nocfg)
    (nocfg / "config.yaml").unlink()
    args = [quick, out, "output.name=nocfg", "train.epochs=4", "checkpoint.resume=true"]
    line = _checked(capsys, *args, *COMMON)
    assert "holds a finished run without its config.yaml" in line

    # a refused extension leaves the finished run as it was (broken: launched below)
    line = _checked(capsys, "--resume", str(gone), "train.epochs=4")
    assert "no complete checkpoint" in line and "start over with output.overwrite=true" in line
    # and so does a replacement that fails before training (launched above, with the
    # requeued job): the run is left as it was
    assert "the shared pilot set is empty: data.pilot_fraction=0.0001" in _one_error(pilot_proc)
    assert {f: (cut / f).read_bytes() for f in kept} == kept

    # trained longer, while its newest checkpoint is damaged on one rank: from the one
    # before (launched together with the refused extension of broken)
    torn = cut / "checkpoints" / "epoch-0003" / "rank-2.pt"
    torn.write_bytes(torn.read_bytes()[:100])
    refused, proc = _together(
        lambda: _run("--resume", str(broken), "train.epochs=4"),
        lambda: _run("--resume", str(cut), "train.epochs=4"),
    )
    line = _one_error(refused)
    assert "no checkpoint can be read" in line and "start over with output.overwrite=true" in line
    assert {f: (broken / f).read_bytes() for f in kept} == kept
    assert not (broken / "summary.prev.json").exists()
    # an error, not a silent restart; the manifest stays as it was
    assert (broken / "checkpoints" / "latest.json").read_bytes() == manifest
    assert proc.returncode == 0, proc.stderr
    assert f"extending the finished run {cut} from 3 to 4 epochs" in proc.stdout
    assert "the checkpoint after epoch 3 cannot be used" in proc.stdout
    assert f"resuming {cut} after epoch 2" in proc.stdout
    resumed, reference = (read_metrics(d / "metrics.jsonl") for d in (cut, tmp_path / "ref"))
    assert [r["epoch"] for r in resumed] == [1, 2, 3, 4]
    # (epoch 3 is not evaluated: the fallback dropped the finished run's record of it)
    assert "private_acc" not in resumed[2] and "private_acc" in resumed[3]
    assert untimed(resumed) == untimed(reference)
    summaries = [json.loads((d / "summary.json").read_text()) for d in (cut, tmp_path / "ref")]
    assert untimed(summaries[0]) == untimed(summaries[1])
    assert not (cut / "summary.prev.json").exists()  # set aside during the extension only
    # the damaged checkpoint is not kept in place of a good one (keep=3 would keep 2, 3, 4)
    assert json.loads((cut / "checkpoints" / "latest.json").read_text())["epochs"] == [2, 4]
    assert sorted(p.name for p in (cut / "checkpoints").glob("epoch-*")) == [
        "epoch-0002",
        "epoch-0004",
    ]

    (cut / "summary.json").unlink()  # as if stopped after its epoch-4 checkpoint
    line = _checked(capsys, "--resume", str(cut), "train.epochs=3")
    assert "checkpointed after epoch 4, past the 3 epochs" in line


def test_a_run_trained_longer_differs_only_in_its_extra_evaluation(runs, tmp_path, capsys):
    """Evaluated every 2 epochs, a run of 3 (``short``) still evaluates its last epoch;
    trained on to 4 it equals a run of 4 (``ref``) everywhere else. The run of 4, as if
    stopped after its unevaluated epoch 3, cannot be ended there."""
    runs, said = runs
    short, long = runs / "short", runs / "ref"  # short: trained on by the fixture's job
    assert f"resuming {short} after epoch 3" in said  # from its end
    extended, reference = (untimed(read_metrics(d / "metrics.jsonl")) for d in (short, long))
    assert [r["epoch"] for r in extended] == [1, 2, 3, 4]
    assert "private_acc" in extended[2] and "private_acc" not in reference[2]
    for ext, ref in zip(extended, reference, strict=True):
        assert _restricted(ext, ref) == ref
    summaries = [json.loads((d / "summary.json").read_text()) for d in (short, long)]
    # what crossed MPI includes the extra evaluation's messages (the per-edge training
    # bytes, bytes_sent_total, do not)
    assert summaries[0].pop("mpi_bytes_total") > summaries[1].pop("mpi_bytes_total")
    assert untimed(summaries[0]) == untimed(summaries[1])

    # the long run as if stopped after epoch 3 (not evaluated), then asked to end there
    stopped = tmp_path / "stopped"
    shutil.copytree(long, stopped, ignore=shutil.ignore_patterns("summary.json", "epoch-0004"))
    # (refused on real ranks, the run left as it was: tests/mpi/test_stop_request.py)
    line = _checked(capsys, "--resume", str(stopped), "train.epochs=3")
    assert line.endswith(
        f": cannot end {stopped} at epoch 3: its checkpoint there was taken "
        "without an evaluation (epoch 3 was not its last), so its summary would report epoch "
        "2's accuracies as the final ones; resume with train.epochs greater than 3"
    )
