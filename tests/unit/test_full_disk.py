"""A disk that fills up while a run writes, made real with a file-size limit
(RLIMIT_FSIZE: writes beyond it fail with EFBIG, as they do with ENOSPC on a full disk):
the error names the file and the reason, and no half-written file is left behind."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO

LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.RLIM_INFINITY))
"""


def _limited(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LIMITED + textwrap.dedent(code), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_checkpoint_that_does_not_fit_names_its_file_and_the_reason(tmp_path):
    target = tmp_path / "epoch-0002" / "rank-1.pt"
    proc = _limited(
        """
        import torch
        from fedsheaf.util.atomic import write_atomic
        from fedsheaf.util.errors import WriteError
        try:
            write_atomic(sys.argv[1], lambda fh: torch.save({"w": torch.zeros(100_000)}, fh))
        except WriteError as exc:
            print(exc)
        """,
        str(target),
        "65536",
    )
    assert proc.returncode == 0, proc.stderr
    # torch.save's own error is a C++ "unexpected pos ..."; the OS's reason is under it
    assert proc.stdout.strip() == f"cannot write {target}: File too large"
    assert list(target.parent.iterdir()) == []  # no temporary file, no half checkpoint


def test_a_metrics_record_that_does_not_fit_leaves_no_line_cut_short(tmp_path):
    proc = _limited(
        """
        from fedsheaf.rundir.files import RunDir
        from fedsheaf.util.errors import WriteError
        run = RunDir(sys.argv[1])
        run.append_metrics({"epoch": 1, "loss": 0.5})
        try:
            run.append_metrics({"epoch": 2, "agents": ["x" * 80] * 100})
        except WriteError as exc:
            print(exc)
        """,
        str(tmp_path / "run"),
        "4096",
    )
    assert proc.returncode == 0, proc.stderr
    metrics = tmp_path / "run" / "metrics.jsonl"
    assert proc.stdout.strip() == f"cannot write {metrics}: File too large"
    assert [json.loads(x) for x in metrics.read_text().splitlines()] == [{"epoch": 1, "loss": 0.5}]


def test_when_failed_json_cannot_be_written_one_rank_still_reports(tmp_path):
    """Nothing fits (limit 0): the first rank to lock the run's config.yaml reports, the
    next one, while the first lives, leaves it to that one."""
    (tmp_path / "config.yaml").write_text("name: x\n")
    code = """
        import time
        from fedsheaf.rundir.files import write_failure
        print(write_failure(__import__("pathlib").Path(sys.argv[1]), 0, "disk full",
                            since=time.time() - 1), flush=True)
        sys.stdin.read()  # lives until the test closes its stdin
        """
    argv = [sys.executable, "-c", LIMITED + textwrap.dedent(code), str(tmp_path), "0"]
    first = subprocess.Popen(
        argv, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "True"
        second = subprocess.run(argv, cwd=REPO, input="", capture_output=True, text=True)
        assert second.stdout.strip() == "False", second.stderr
    finally:
        first.communicate("", timeout=30)
    assert not (tmp_path / "failed.json").exists()
    third = subprocess.run(argv, cwd=REPO, input="", capture_output=True, text=True)
    assert third.stdout.strip() == "True"  # the first has ended: its lock went with it
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["config.yaml"]


def test_a_bug_in_what_is_written_stays_a_bug_not_a_write_error(tmp_path):
    import pytest

    from fedsheaf.util.atomic import write_atomic

    with pytest.raises(TypeError, match="not JSON serializable"):
        write_atomic(tmp_path / "x.json", lambda fh: fh.write(json.dumps(object()).encode()))
    assert list(tmp_path.iterdir()) == []


def test_a_rank_whose_failed_json_does_not_fit_leaves_it_to_the_one_whose_did(tmp_path):
    (tmp_path / "config.yaml").write_text("name: x\n")
    (tmp_path / "failed.json").write_text('{"rank": 1, "error": "disk full"}\n')  # it fitted
    code = """
        import time
        from pathlib import Path
        from fedsheaf.rundir.files import write_failure
        print(write_failure(Path(sys.argv[1]), 2, "disk full", since=time.time() - 60))
        """
    proc = _limited(code, str(tmp_path), "0")
    assert proc.stdout.strip() == "False", proc.stderr
