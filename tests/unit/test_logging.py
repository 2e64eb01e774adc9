"""One way to talk to people (fedsheaf.util.log): progress on stdout, warnings and errors on
stderr, rank 0 only, -q and -v; a command's result whatever -q."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys

import pytest

from fedsheaf.cli.main import options_first
from fedsheaf.util.log import CHOSEN, RANK_VARIABLES, configure, get_logger
from tests.conftest import REPO

logger = get_logger("fedsheaf.tests.logging")


@pytest.fixture(autouse=True)
def _defaults():
    """Each test starts, and leaves the process, at the defaults of rank 0."""
    configure(0, rank=0)
    yield
    configure(0, rank=0)


def fedsheaf(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}
    return subprocess.run(
        [sys.executable, "-m", "fedsheaf", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**clean, **env},
        timeout=120,
    )


def python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**clean, **env},
        timeout=60,
    )


def test_progress_goes_to_stdout_and_warnings_to_stderr_as_they_are(capsys):
    logger.info("fedsheaf: epoch 1")
    logger.debug("fedsheaf: details")  # only with -v
    logger.warning("fedsheaf: warning: careful")
    logger.error("fedsheaf: error: broken")
    out, err = capsys.readouterr()
    assert out == "fedsheaf: epoch 1\n"
    assert err == "fedsheaf: warning: careful\nfedsheaf: error: broken\n"


def test_the_handlers_follow_sys_stdout_and_stderr():
    """A redirection made after the handlers were installed still gets the lines (as it
    would a print): pytest's capture and contextlib.redirect_stdout rely on it."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        logger.info("a line")
        logger.warning("a warning")
    assert (out.getvalue(), err.getvalue()) == ("a line\n", "a warning\n")


def test_every_line_is_flushed_at_once():
    class Stream(io.StringIO):
        flushed: list[str] = []

        def flush(self) -> None:
            self.flushed.append(self.getvalue())

    stream = Stream()
    with contextlib.redirect_stdout(stream):
        logger.info("one")
        logger.info("two")
    assert Stream.flushed == ["one\n", "one\ntwo\n"]


def test_quiet_says_only_warnings_and_errors_and_verbose_says_details_too(capsys):
    configure(-1, rank=0)
    logger.info("progress")
    logger.warning("a warning")
    assert capsys.readouterr() == ("", "a warning\n")
    configure(1, rank=0)
    logger.debug("a detail")
    logger.info("progress")
    assert capsys.readouterr() == ("a detail\nprogress\n", "")


def test_other_ranks_say_only_warnings_and_what_they_were_chosen_to_say(capsys):
    configure(1, rank=3)  # -v does not open the other ranks' mouths
    logger.debug("a detail")
    logger.info("progress")
    logger.warning("a warning")
    logger.info("the agents' progress", extra=CHOSEN)  # a hub run's agents' rank 0
    assert capsys.readouterr() == ("the agents' progress\n", "a warning\n")
    configure(-1, rank=3)
    logger.info("the agents' progress", extra=CHOSEN)
    assert capsys.readouterr() == ("", "")


def test_a_module_run_as_main_logs_under_fedsheaf():
    assert get_logger("__main__").name == "fedsheaf.__main__"
    assert get_logger("fedsheaf.ops.sweep").name == "fedsheaf.ops.sweep"
    assert get_logger("fedsheaf").name == "fedsheaf"


def test_a_reader_gone_raises_as_a_print_would(capsys):
    """BrokenPipeError reaches the caller (fedsheaf's main says nothing then), instead of
    logging's "--- Logging error ---" and a traceback on stderr."""

    class Gone(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    with contextlib.redirect_stdout(Gone()), pytest.raises(BrokenPipeError):
        logger.info("a line")
    assert "Logging error" not in capsys.readouterr().err


def test_a_library_user_gets_rank_0s_lines_and_other_ranks_only_warnings():
    code = (
        "import logging; from fedsheaf.util.log import CHOSEN, get_logger; "
        "log = get_logger('fedsheaf.x'); log.info('progress'); log.debug('detail'); "
        "log.warning('careful'); log.info('chosen', extra=CHOSEN); "
        "logging.basicConfig(); log.info('once')"  # a root handler of its own: no repeat
    )
    root = python(code)
    assert (root.stdout, root.stderr) == ("progress\nchosen\nonce\n", "careful\n")
    for name in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"):
        other = python(code, **{name: "1"})
        assert (other.stdout, other.stderr) == ("chosen\n", "careful\n"), name


@pytest.mark.parametrize(
    "argv",
    [
        ["-q", "keys", "train.lr"],
        ["--quiet", "keys", "train.lr"],
        ["keys", "train.lr", "-q"],
        ["-v", "keys", "train.lr"],
    ],
)
def test_quiet_never_hides_the_result_asked_for(argv):
    proc = fedsheaf(*argv)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.splitlines()[-2].startswith("train.lr  float  0.01")
    plain = fedsheaf("keys", "train.lr").stdout
    if "-v" in argv:  # a detail first: the version and command line
        assert proc.stdout.startswith("fedsheaf ") and proc.stdout.endswith(plain)
    else:
        assert proc.stdout == plain


def test_check_says_its_verdict_on_stdout_and_warnings_on_stderr(tmp_path):
    base = ["configs/quickstart.yaml", "train.batch_size=100000", f"output.dir={tmp_path}"]
    for argv in (["check", *base], ["-q", "check", *base], ["check", base[0], "-q", *base[1:]]):
        proc = fedsheaf(*argv)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()  # the verdict, nothing else
        assert all(ln.startswith("fedsheaf check: ") for ln in lines), argv
        ok, action = lines[0], lines[-1]
        assert any(ln.startswith("fedsheaf check: the job will ask for: 4 tasks") for ln in lines)
        assert ok.startswith("fedsheaf check: ok for 4 ranks: sheaf_frl 'quickstart'"), argv
        assert action == f"fedsheaf check: would write a new run in {tmp_path}/" + (
            "quickstart-sheaf_frl-seed0"
        )
        assert proc.stderr.startswith("fedsheaf: warning: train.batch_size=100000 exceeds"), argv
        assert proc.stderr.count("\n") == 1


def test_an_error_is_one_line_on_stderr_whatever_the_verbosity():
    for argv in (["keys", "nosuch"], ["-q", "keys", "nosuch"], ["-v", "keys", "nosuch"]):
        proc = fedsheaf(*argv)
        assert proc.returncode == 2
        said = "fedsheaf: error: no config key starts with 'nosuch'; sections: "
        assert proc.stderr.startswith(said), proc.stderr
        assert proc.stderr.count("\n") == 1, proc.stderr
        assert "-v" in argv or proc.stdout == ""


def test_run_and_check_take_quiet_and_verbose_among_their_overrides():
    assert options_first(["check", "c.yaml", "-q", "a=1"]) == ["check", "-q", "c.yaml", "a=1"]
    assert options_first(["run", "c.yaml", "a=1", "-vv", "--resume", "D"]) == [
        "run", "-vv", "--resume", "D", "c.yaml", "a=1",
    ]  # fmt: skip
