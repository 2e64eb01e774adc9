"""`fedsheaf watch`: progress lines from a (running or finished) run's metrics.jsonl."""

import io
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fedsheaf.cli import main as cli
from fedsheaf.ops.watch import MetricsTail, watch
from fedsheaf.rundir.files import RunDir, write_failure
from fedsheaf.util.errors import ConfigError
from tests.unit.test_report_runs import make_decentralized, make_head, make_server


def _watch(path, **kw) -> list[str]:
    out = io.StringIO()
    assert watch(path, out=out, **kw) == 0
    return out.getvalue().splitlines()


def test_partial_run_with_a_torn_last_line(tmp_path):
    path = make_decentralized(tmp_path, "run", epochs=4, seed=2, finished=False)
    lines = (path / "metrics.jsonl").read_text().splitlines(keepends=True)
    (path / "metrics.jsonl").write_text("".join(lines[:2]) + lines[2][:25])  # torn epoch 3
    out = _watch(path, once=True)
    assert out[0].startswith("quickstart · sheaf_frl · seed 2 · ")
    assert out[0].endswith(f"4 epochs · {path}")
    assert len(out) == 4
    assert out[1].startswith("epoch 1/4") and out[2].startswith("epoch 2/4")
    assert "private 0.720" in out[2] and "comm 0.300" in out[2] and "sent 1.0 kB" in out[2]
    assert out[3] == "running: 2 epochs so far"


def test_tail_picks_up_a_line_once_it_is_complete(tmp_path):
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    assert tail.poll() == []  # no file yet
    path.write_text('{"epoch": 1}\n{"epoch": 2, "lo')
    assert tail.poll() == [{"epoch": 1}]
    assert tail.poll() == []
    with open(path, "a") as fh:
        fh.write('ss": 0.5}\n{"epoch": 3}\n')
    assert tail.poll() == [{"epoch": 2, "loss": 0.5}, {"epoch": 3}]
    assert tail.poll() == []


def test_tail_rereads_a_file_that_was_replaced_or_cut(tmp_path):
    """A resumed run rewrites metrics.jsonl up to its checkpoint (os.replace), then
    appends the re-run epochs; none of them may be lost."""
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    path.write_text("".join(f'{{"epoch": {e}}}\n' for e in (1, 2, 3)))
    assert len(tail.poll()) == 3
    new = tmp_path / "metrics.jsonl.tmp"
    new.write_text('{"epoch": 1}\n')
    os.replace(new, path)
    with open(path, "a") as fh:
        fh.write('{"epoch": 2, "resumed": true}\n')
    assert tail.poll() == [{"epoch": 1}, {"epoch": 2, "resumed": True}]
    assert tail.restarted
    path.write_text('{"epoch": 1, "again": true}\n')  # cut in place (same file)
    assert tail.poll() == [{"epoch": 1, "again": True}] and tail.restarted
    assert tail.poll() == [] and not tail.restarted
    path.unlink()  # gone for a moment: nothing read, nothing restarted
    assert tail.poll() == [] and not tail.restarted


def test_no_epoch_yet(tmp_path):
    path = make_decentralized(tmp_path, "run", epochs=1, finished=False)
    (path / "metrics.jsonl").unlink()  # config written, first epoch not yet
    assert _watch(path, once=True)[1:] == ["running: no epochs recorded yet"]


def test_finished_server_run_prints_rounds_final_and_summary(tmp_path):
    path = make_server(tmp_path, "fedrep", rounds=3)
    out = _watch(path, interval=0.01)  # not --once: returns because summary.json exists
    assert out[0].startswith("fedrep_fmnist_100c2 · fedrep · seed 3 · 100 clients · 3 rounds")
    assert [line.split("  ")[0].strip() for line in out[1:5]] == [
        "round 1/3",
        "round 2/3",
        "round 3/3",
        "final",
    ]
    assert "acc" not in out[1] and "acc 0.200" in out[2]
    assert "up 3.0 kB down 4.0 kB" in out[1]
    assert out[5].startswith("finished in 12.5 s: acc 0.3000 final acc 0.9500 score 0.3500")
    assert out[5].endswith("(mean acc over rounds 3-4)") and len(out) == 6


def test_head_fedavg_lines_show_mse_and_gram_error(tmp_path):
    out = _watch(make_head(tmp_path, "head", rounds=2), once=True)
    assert "test_mse 1.000" in out[2] and "gram_err 0.01" in out[2]


class Beside(threading.Thread):
    """``steps()`` in a thread beside ``watch``. If a step fails, the run gets a summary
    and a failed.json anyway, so that ``watch`` returns instead of following for ever,
    and :meth:`join` raises the failure in the test's own thread."""

    def __init__(self, steps: Callable[[], None], path: Path) -> None:
        super().__init__()
        self.steps, self.path, self.error = steps, path, None

    def run(self) -> None:
        try:
            self.steps()
        except BaseException as exc:
            self.error = exc
            RunDir(self.path).write_summary({"wall_seconds": 0.0})
            write_failure(self.path, 0, "the test's steps failed")  # before a config too

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self.error is not None:
            raise self.error


def watch_beside(steps: Callable[[], None], path: Path, out: io.StringIO, **kw) -> int:
    """``watch(path)``'s exit status, while ``steps()`` runs in a thread beside it."""
    writer = Beside(steps, path)
    writer.start()
    try:
        return watch(path, out=out, **kw)
    finally:
        writer.join()


def test_follow_mode_prints_new_records_until_summary_appears(tmp_path):
    path = make_decentralized(tmp_path, "run", epochs=1, finished=False)
    first, second = _Signalling("epoch 1/1"), threading.Event()

    class Output(io.StringIO):
        def write(self, s: str) -> int:
            first.write(s)
            if "epoch 2/1" in s:
                second.set()
            return super().write(s)

    def finish():
        assert first.event.wait(timeout=60)  # record 2 arrives while watch follows
        rd = RunDir(path)
        rd.append_metrics({"epoch": 2, "loss": 0.25, "private_acc": 0.9, "seconds": 0.1})
        assert second.wait(timeout=60)
        rd.write_summary({"wall_seconds": 2.0, "private_acc": 0.9, "comm_acc": 0.4})

    output = Output()
    assert watch_beside(finish, path, output, interval=0.02) == 0
    out = output.getvalue().splitlines()
    assert [line[:9] for line in out[1:3]] == ["epoch 1/1", "epoch 2/1"]
    assert out[3] == "finished in 2.0 s: private 0.9000 comm 0.4000"


def test_undefined_numbers_read_as_a_dash_and_the_validation_score_is_named():
    from fedsheaf.ops.watch import finished_line, format_record

    nan = float("nan")  # communication accuracy of agents without neighbours
    rec = {"epoch": 2, "loss": 0.5, "private_acc": 0.9, "comm_acc": nan, "score_val": 0.8}
    line = format_record(rec, {"train": {"epochs": 3}})
    assert "comm –" in line and "val score 0.800" in line and "nan" not in line
    end = finished_line({"wall_seconds": 2.0, "private_acc": 0.9, "comm_acc": nan})
    assert end == "finished in 2.0 s: private 0.9000 comm –"
    memory = {"peak_rss_bytes": [9e8, 1.2e9], "peak_rss_bytes_max": 1.2e9}
    end = finished_line({"wall_seconds": 2.0, "private_acc": 0.9, "memory": memory})
    assert end == "finished in 2.0 s: private 0.9000 · peak memory 1.20 GB a rank"


def test_cli_watch_and_errors(tmp_path, capsys):
    path = make_decentralized(tmp_path, "run", epochs=2)
    assert cli.main(["watch", str(path), "--once"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and out[-1].startswith("finished in 1.8 s: private 0.7000")
    assert cli.main(["watch", str(tmp_path / "missing"), "--once"]) == 2
    assert "no such run directory" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="no config.yaml"):
        watch(tmp_path, once=True)
    with pytest.raises(ConfigError, match="--interval"):
        watch(path, interval=0)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--interval", "nan"),
        ("--interval", "inf"),
        ("--interval", "1e10"),  # time.sleep overflows
        ("--interval", "-1"),
        ("--stall", "nan"),
        ("--stall", "inf"),
        ("--stall", "0"),
    ],
)
def test_a_bad_interval_or_stall_is_one_error_line(tmp_path, capsys, option, value):
    path = make_decentralized(tmp_path, "run", epochs=2)  # finished: returns at once
    assert cli.main(["watch", str(path), option, value]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(f"fedsheaf: error: {option} must be a finite positive number of ")


def test_corrupt_config_or_summary_is_one_error_line(tmp_path, capsys):
    path = make_decentralized(tmp_path, "run", epochs=2)
    summary = (path / "summary.json").read_text()
    (path / "summary.json").write_text("{broken")
    assert cli.main(["watch", str(path), "--once"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedsheaf: error: {path / 'summary.json'} is not valid JSON: ")
    assert err.count("\n") == 1
    (path / "summary.json").write_text(summary)
    (path / "config.yaml").write_text("name: x\nalgorithm: [sheaf_frl,\n")
    assert cli.main(["watch", str(path), "--once"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedsheaf: error: config file {path / 'config.yaml'} is not valid YAML")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_help_shows_the_interval_default(capsys):
    with pytest.raises(SystemExit):
        cli.main(["watch", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "seconds between polls, at most a day (default: 5.0)" in out


class StartsTheJob(io.StringIO):
    """Output that starts the (stand-in) job once watch says it is waiting for it."""

    def __init__(self, start) -> None:
        super().__init__()
        self.start = start

    def write(self, text: str) -> int:
        if text.startswith("waiting for"):
            self.start()
        return super().write(text)


def test_follow_mode_waits_for_a_job_that_has_not_started(tmp_path):
    path = tmp_path / "run"
    out = StartsTheJob(lambda: make_decentralized(tmp_path, "run", epochs=1))
    assert watch(path, interval=0.02, out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == f"waiting for {path} (the job creates it when it starts)"
    assert lines[2].startswith("epoch 1/1") and lines[-1].startswith("finished in")


def test_follow_mode_says_what_it_waits_for_in_a_directory_without_a_config(tmp_path):
    path = tmp_path / "run"
    path.mkdir()  # the job made its directory and has not yet written its config
    out = StartsTheJob(lambda: make_decentralized(tmp_path, "run", epochs=1))
    assert watch(path, interval=0.02, out=out) == 0
    lines = out.getvalue().splitlines()
    waiting = f"waiting for {path / 'config.yaml'} (the job writes it before its first epoch"
    assert lines[0] == waiting + " or round)"
    assert lines[-1].startswith("finished in")
    early = tmp_path / "early"
    early.mkdir()
    write_failure(early, 2, "the pilot set is empty")  # it failed before its first epoch
    out = io.StringIO()
    assert watch(early, interval=0.02, out=out) == 1
    assert out.getvalue().splitlines()[-1] == "failed on rank 2: the pilot set is empty"


def test_a_stalled_run_says_when_it_last_wrote(tmp_path):
    path = make_decentralized(tmp_path, "run", epochs=3, finished=False)
    old = time.time() - 25 * 60
    os.utime(path / "metrics.jsonl", (old, old))
    assert _watch(path, once=True)[-1] == "running: 3 epochs so far, last record 25 min ago"
    (tmp_path / "file").touch()
    with pytest.raises(ConfigError, match="is not a run directory"):
        watch(tmp_path / "file")


class _Signalling(io.StringIO):
    """Output that sets ``event`` once ``text`` has been written."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text, self.event = text, threading.Event()

    def write(self, s: str) -> int:
        n = super().write(s)
        if self.text in self.getvalue():
            self.event.set()
        return n


def test_following_a_run_through_a_resume_that_extends_it(tmp_path):
    """A resume rewrites metrics.jsonl up to its checkpoint and may change the length."""
    path = make_decentralized(tmp_path, "run", epochs=3, finished=False)
    longer = make_decentralized(tmp_path, "longer", epochs=5)
    out = _Signalling("epoch 3/3")

    def resume():
        assert out.event.wait(timeout=60)  # watch has printed what the first launch wrote
        os.replace(longer / "config.yaml", path / "config.yaml")
        kept = (longer / "metrics.jsonl").read_text().splitlines(keepends=True)
        (tmp_path / "cut.jsonl").write_text("".join(kept[:2]))
        os.replace(tmp_path / "cut.jsonl", path / "metrics.jsonl")
        time.sleep(0.1)
        with open(path / "metrics.jsonl", "a") as fh:
            fh.write("".join(kept[2:]))
        time.sleep(0.1)
        os.replace(longer / "summary.json", path / "summary.json")

    assert watch_beside(resume, path, out, interval=0.02) == 0
    lines = out.getvalue().splitlines()
    epochs = [ln.split()[1] for ln in lines if ln.startswith("epoch ")]
    assert epochs == ["1/3", "2/3", "3/3", "1/5", "2/5", "3/5", "4/5", "5/5"]
    # before the first record of the resumed launch: a note and the new header (in the
    # order the resume's two files were seen to change)
    between = lines[lines.index(next(ln for ln in lines if "epoch 3/3" in ln)) + 1 :]
    between = between[: between.index(next(ln for ln in between if "epoch 1/5" in ln))]
    assert sorted(between) == sorted(
        [
            "metrics.jsonl was rewritten (the run was resumed from a checkpoint or started "
            "again): its records from the start",
            lines[0].replace("3 epochs", "5 epochs"),
        ]
    )
    assert lines[0].endswith(f"3 epochs · {path}") and lines[-1].startswith("finished in")


def test_a_run_that_never_starts_is_asked_about_once(tmp_path):
    """A job refused at start-up (a bad config under sbatch) never creates the run
    directory: after --stall minutes watch asks about it, once, and keeps watching."""
    path = tmp_path / "never"
    out = _Signalling("no run started")

    def fail_late():
        assert out.event.wait(timeout=60)
        time.sleep(0.2)  # more polls: the line must not repeat
        path.mkdir()
        write_failure(path, 0, "the job gave up")

    assert watch_beside(fail_late, path, out, interval=0.02, stall=0.002) == 1
    lines = out.getvalue().splitlines()
    asked = [ln for ln in lines if ln.startswith("no run started")]
    assert len(asked) == 1 and asked[0].endswith(
        "is its job still queued, or did it end before it started (see the job's output)? "
        "(still watching)"
    )
    assert lines[0].startswith("waiting for") and lines[-1] == "failed on rank 0: the job gave up"


def test_following_a_run_that_stopped_writing_says_so_once(tmp_path):
    path = make_decentralized(tmp_path, "run", epochs=2, finished=False)
    old = time.time() - 45 * 60
    os.utime(path / "metrics.jsonl", (old, old))

    first = _Signalling("no new record")

    def finish():
        assert first.event.wait(timeout=60)
        time.sleep(0.2)  # more polls: the stall line must not repeat
        RunDir(path).write_summary({"wall_seconds": 2.0, "private_acc": 0.9})
        os.utime(path / "metrics.jsonl", (old, old))  # the summary, not a record, came

    assert watch_beside(finish, path, first, interval=0.02, stall=30) == 0
    out = first.getvalue().splitlines()
    stalled = [ln for ln in out if ln.startswith("no new record")]
    assert stalled == ["no new record for 45 min: is the job still running? (still watching)"]
    assert out[-1].startswith("finished in")
    assert cli.main(["watch", str(path), "--stall", "0"]) == 2
    touched = time.time() - 20
    os.utime(path / "metrics.jsonl", (touched, touched))
    (path / "summary.json").unlink()
    out = _Signalling("no new record")  # under a minute, in seconds

    def finish():
        assert out.event.wait(timeout=60)
        RunDir(path).write_summary({"wall_seconds": 2.0})

    assert watch_beside(finish, path, out, interval=0.02, stall=0.1) == 0
    said = re.search(r"no new record for (\d+) s: is the job still running\?", out.getvalue())
    # in seconds, counted from the file's time: at least the 20 s it was set back
    assert said and 20 <= int(said.group(1)) < 60, out.getvalue()


def test_the_header_counts_in_the_singular_too():
    from fedsheaf.ops.watch import header

    one = {"name": "x", "algorithm": "sheaf_frl", "seed": 0, "agents": [{}], "train": {"epochs": 1}}
    assert header(one, Path("r")) == "x · sheaf_frl · seed 0 · 1 agent · 1 epoch · r"
    fed = {"name": "y", "algorithm": "fedrep", "seed": 1, "federated": {"clients": 1, "rounds": 2}}
    assert header(fed, Path("r")) == "y · fedrep · seed 1 · 1 client · 2 rounds · r"


def test_a_run_whose_job_ended_on_an_error_is_failed_not_running(tmp_path):
    from fedsheaf.ops.report_runs import load_run, run_row
    from fedsheaf.rundir.files import FAILURE_FILE

    path = make_decentralized(tmp_path, "run", epochs=4, finished=False)
    assert run_row(load_run(path))["status"] == "running"
    write_failure(path, 1, "agent 1: loss became nan in epoch 3, step 2")
    assert run_row(load_run(path))["status"] == "failed"
    for once in (True, False):  # following, it stops at once too: nothing more will come
        out = io.StringIO()
        assert watch(path, once=once, interval=0.01, out=out) == 1
        lines = out.getvalue().splitlines()
        assert lines[-1] == "failed on rank 1: agent 1: loss became nan in epoch 3, step 2"
        assert lines[-2].startswith("epoch 4/4")
    # a run resumed (once every rank has read its checkpoint) or started over forgets it
    from fedsheaf.rundir.lifecycle import settle_config
    from fedsheaf.rundir.resume import load_run_config

    settle_config(RunDir(path, extend=True), load_run_config(path / "config.yaml"))
    assert not (path / FAILURE_FILE).exists() and run_row(load_run(path))["status"] == "running"
    write_failure(path, 0, "again")
    RunDir(path, overwrite=True)
    assert not (path / FAILURE_FILE).exists()
    write_failure(tmp_path / "gone" / "x", 0, "a directory this rank does not see")
    assert not (tmp_path / "gone").exists()  # nothing created, nothing raised


def test_a_run_stopped_on_request_is_stopped_until_resumed(tmp_path):
    from fedsheaf.ops.report_runs import load_run, run_row
    from fedsheaf.ops.watch import STOPPED
    from fedsheaf.rundir.files import STOP_FILE
    from fedsheaf.rundir.lifecycle import leave_note, settle_config
    from fedsheaf.rundir.resume import load_run_config

    path = make_decentralized(tmp_path, "run", epochs=4, finished=False)
    leave_note(path, "epoch", 4)
    assert run_row(load_run(path))["status"] == "stopped"
    for once in (True, False):  # following, it stops at once too: nothing more until resumed
        out = io.StringIO()
        assert watch(path, once=once, interval=0.01, out=out) == STOPPED
        assert out.getvalue().splitlines()[-1] == (
            f"stopped on SIGUSR1 after epoch 4, its checkpoint written; a requeued job "
            f"continues it, or: fedsheaf run --resume {path}"
        )
    settle_config(RunDir(path, extend=True), load_run_config(path / "config.yaml"))
    assert not (path / STOP_FILE).exists() and run_row(load_run(path))["status"] == "running"
    leave_note(path, "round", 2)
    RunDir(path, overwrite=True)
    assert not (path / STOP_FILE).exists()


def test_until_finished_follows_a_stopped_run_through_its_requeued_resume(tmp_path):
    """A job stopped at its time limit and requeued: watch --until-finished waits for
    the resume (a job taking the run's lock) and follows it to the run's end."""
    from fedsheaf.rundir.lifecycle import leave_note
    from tests.unit.test_run_lock import _holder

    path = make_decentralized(tmp_path, "run", epochs=2, finished=False)
    longer = make_decentralized(tmp_path, "longer", epochs=3)
    leave_note(path, "epoch", 2)
    old = time.time() - 60  # written before the resume took the lock
    os.utime(path / "stopped.json", (old, old))
    queued = time.time() - 45 * 60  # the requeued job waited in the queue
    os.utime(path / "metrics.jsonl", (queued, queued))
    out = _Signalling("waiting for a requeued job")
    jobs = []

    def requeued_resume():
        assert out.event.wait(timeout=60)
        time.sleep(0.1)  # polls that find it still stopped: said once
        jobs.append(_holder(path))  # the requeued job takes the run's lock
        time.sleep(0.1)
        os.replace(longer / "config.yaml", path / "config.yaml")
        (path / "stopped.json").unlink()  # its settle_config clears the stop
        with open(path / "metrics.jsonl", "a") as fh:
            fh.write((longer / "metrics.jsonl").read_text().splitlines(keepends=True)[2])
        time.sleep(0.1)
        os.replace(longer / "summary.json", path / "summary.json")

    try:
        assert (
            watch_beside(requeued_resume, path, out, interval=0.02, stall=30, until_finished=True)
            == 0
        )
    finally:
        for job in jobs:
            job.communicate("", timeout=30)
    lines = out.getvalue().splitlines()
    waiting = [ln for ln in lines if "waiting for a requeued job" in ln]
    assert waiting == [
        "stopped on SIGUSR1 after epoch 2, its checkpoint written; waiting for a requeued "
        f"job (or: fedsheaf run --resume {path}) to continue it"
    ]
    assert lines.index(waiting[0]) + 1 == lines.index("resumed")
    assert not [ln for ln in lines if ln.startswith("no new record")]  # (counted from the lock)
    assert [ln.split()[1] for ln in lines if ln.startswith("epoch ")][-1] == "3/3"
    assert lines[-1].startswith("finished in")
    assert cli.main(["watch", str(path), "--until-finished", "--once"]) == 0


def test_a_job_killed_outright_is_told_from_a_running_one_by_the_runs_lock(tmp_path):
    """SIGKILL leaves no summary and no failed.json; the run's lock, which dies with its
    holder, says the job is gone (watch: exit 1; report: interrupted)."""
    from fedsheaf.ops.report_runs import load_run, run_row
    from tests.unit.test_run_lock import _holder

    path = make_decentralized(tmp_path, "run", epochs=4, seed=2, finished=False)
    job = _holder(path)  # a process holding the run's lock, as the job's rank 0 does
    try:
        assert _watch(path, once=True)[-1] == "running: 4 epochs so far"
        assert run_row(load_run(path))["status"] == "running"
        out = _Signalling("epoch 4/4")

        def kill():
            assert out.event.wait(timeout=60)
            time.sleep(0.1)  # polls that find the job running
            job.kill()  # SIGKILL: the kernel drops its lock

        assert watch_beside(kill, path, out, interval=0.02) == 1
    finally:
        job.kill()
        job.wait(timeout=30)
    resume = f"to continue it: fedsheaf run --resume {path}"
    assert out.getvalue().splitlines()[-1] == (
        "not running: 4 epochs so far; its job has ended without a word (killed outright: "
        f"SIGKILL, out of memory, a lost node?); {resume}"
    )
    said = io.StringIO()
    assert watch(path, once=True, out=said) == 1
    assert said.getvalue().splitlines()[-1] == (
        "not running: 4 epochs so far; no job runs it (its job ended without a word, or "
        f"has not started yet); {resume}"
    )
    assert run_row(load_run(path))["status"] == "interrupted"


def test_a_damaged_line_is_said_by_watch_and_report_not_skipped_silently(tmp_path, capsys):
    from fedsheaf.ops.report_runs import load_run

    path = make_decentralized(tmp_path, "run", epochs=4, seed=2, finished=False)
    lines = (path / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    lines[1] = lines[1][:20] + b"\xff\x00 garbage\n"  # epoch 2 cut short, then junk
    (path / "metrics.jsonl").write_bytes(b"".join(lines))
    out = _watch(path, once=True)
    assert out[1].startswith("epoch 1/4")
    assert out[2] == "metrics.jsonl line 2 is damaged: skipped"
    assert out[3].startswith("epoch 3/4") and out[-1] == "running: 3 epochs so far"
    capsys.readouterr()
    assert [r["epoch"] for r in load_run(path).records] == [1, 3, 4]
    assert capsys.readouterr().err == (
        f"report: warning: {path / 'metrics.jsonl'}: 1 damaged line (2) left out, so this "
        "run's totals leave out those records (resuming the run rewrites the file from its "
        "checkpoint)\n"
    )


def test_an_earlier_launchs_failed_json_is_stale_once_a_resume_holds_the_lock(tmp_path):
    """A resume clears failed.json only once every rank has read its checkpoint; until
    then, the lock it took (written as it took it) says that file is an earlier one's."""
    from tests.unit.test_run_lock import _holder

    path = make_decentralized(tmp_path, "run", epochs=4, seed=2, finished=False)
    (path / "failed.json").write_text('{"rank": 3, "error": "terminated by SIGTERM"}\n')
    old = time.time() - 60
    os.utime(path / "failed.json", (old, old))
    job = _holder(path)  # the resume, starting
    try:
        assert _watch(path, once=True)[-1] == "running: 4 epochs so far"
    finally:
        job.communicate("", timeout=30)
    out = io.StringIO()
    assert watch(path, once=True, out=out) == 1  # it ended without clearing it
    assert out.getvalue().splitlines()[-1] == "failed on rank 3: terminated by SIGTERM"
