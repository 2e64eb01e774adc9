"""Which directories fedsheaf writes into: a new or empty one, or its own (its mark,
``.fedsheaf-run.json``; from before the mark, its lock or a fedsheaf config beside a run's
files); ``output.overwrite`` deletes only what fedsheaf writes. ``fedsheaf check`` says
what the job says (the job's own refusals, from real ranks: tests/mpi/test_checkpoint_digests.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fedsheaf import __version__
from fedsheaf.cli import main as cli
from fedsheaf.config.sections import dump_config, load_config
from fedsheaf.rundir import checkpoint, run_lock
from fedsheaf.rundir.files import (
    MARKER,
    MARKER_FORMAT,
    RunDir,
    check_not_foreign,
    owned,
)
from fedsheaf.rundir.lifecycle import claim_run_dir, open_run_dir
from fedsheaf.util.errors import ConfigError
from tests.conftest import REPO

QUICK = str(REPO / "configs" / "quickstart.yaml")
NAME = "quickstart-sheaf_frl-seed0"
#: Another tool's config.yaml (a Lightning-style trainer config).
FOREIGN = "trainer:\n  max_epochs: 10\n  accelerator: gpu\nmodel:\n  lr: 0.001\n"


def _check(capsys, *argv: str) -> tuple[int, str]:
    """``fedsheaf check -n 4 ARGV``: its exit status and its last line."""
    code = cli.main(["check", "-n", "4", *argv])
    out, err = capsys.readouterr()
    return code, (err if code else out).strip().splitlines()[-1]


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _refused_alike(capsys, run: Path, *overrides: str) -> str:
    """The refusal of ``run`` by ``fedsheaf check`` and by the job's first rank (the same
    line), for a new run, an overwrite and a resume."""
    said = set()
    for extra in ([], ["output.overwrite=true"], ["checkpoint.resume=true"]):
        over = [f"output.dir={run.parent}", *overrides, *extra]
        code, line = _check(capsys, QUICK, *over)
        assert code == 2, line
        with pytest.raises(ConfigError) as refused:
            claim_run_dir(load_config(QUICK, over), run)
        assert line == f"fedsheaf: error: {refused.value}"
        said.add(line)
    assert len(said) == 1
    return said.pop()


def test_a_folder_holding_another_tools_config_is_refused_and_left_alone(capsys, tmp_path):
    run = tmp_path / "runs" / NAME
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(FOREIGN)
    line = _refused_alike(capsys, run)
    assert line == (
        f"fedsheaf: error: run directory {run} exists and is not a fedsheaf run (it holds "
        "config.yaml; its config.yaml is not a fedsheaf config); choose another output.name "
        "or output.dir"
    )
    assert _files(run) == {"config.yaml": FOREIGN.encode()}  # no lock, no mark: untouched
    # a fedsheaf config alone (copied there) is no run either: it would be replaced
    (run / "config.yaml").write_text(dump_config(load_config(QUICK)))
    with pytest.raises(ConfigError, match="a fedsheaf config but no run's files are beside it"):
        check_not_foreign(run)


def test_a_folder_of_another_tools_checkpoints_is_refused_even_with_overwrite(capsys, tmp_path):
    run = tmp_path / "runs" / NAME
    (run / "checkpoints").mkdir(parents=True)
    theirs = run / "checkpoints" / "lightning-epoch=99.ckpt"
    theirs.write_bytes(b"PK\x03\x04 somebody else's weights")
    line = _refused_alike(capsys, run)
    assert line == (
        f"fedsheaf: error: run directory {run} exists and is not a fedsheaf run (it holds "
        "checkpoints/); choose another output.name or output.dir"
    )
    cfg = load_config(QUICK, [f"output.dir={run.parent}", "output.overwrite=true"])
    with pytest.raises(ConfigError, match="is not a fedsheaf run"):
        open_run_dir(cfg, run)  # what the job opens its run directory with
    assert _files(run) == {"checkpoints/lightning-epoch=99.ckpt": theirs.read_bytes()}


def test_a_new_run_directory_is_marked_before_anything_else(tmp_path):
    run = RunDir(tmp_path / "new", lock=True)
    note = json.loads((run.path / MARKER).read_text())
    assert note["format"] == MARKER_FORMAT == 1 and note["fedsheaf"] == __version__
    assert "created" in note
    assert owned(run.path)
    created = (run.path / MARKER).read_bytes()
    RunDir(run.path, overwrite=True)  # a mark is never rewritten
    assert (run.path / MARKER).read_bytes() == created
    (run.path / "notes.txt").write_text("mine\n")  # a fedsheaf run's, with a note beside it
    check_not_foreign(run.path)
    # a mark from a newer fedsheaf: refused, not rewritten in this version's format
    (run.path / MARKER).write_text(json.dumps({"format": MARKER_FORMAT + 1}))
    with pytest.raises(ConfigError, match=r"written by a newer fedsheaf \(run-directory format 2"):
        check_not_foreign(run.path)


def test_run_directories_from_before_the_mark_are_still_fedsheafs(capsys, tmp_path):
    committed = REPO / "results" / "pair" / "sweep" / "runs" / "comfed-d16-lam0.1-seed0"
    old = tmp_path / "old"
    shutil.copytree(committed, old)  # config.yaml, metrics.jsonl, summary.json
    assert not (old / MARKER).exists() and owned(old)
    check_not_foreign(old)
    locked = tmp_path / "locked"  # a run whose job stopped right after taking its lock
    locked.mkdir()
    (locked / run_lock.LOCK_FILE).write_text("pid 1 on elsewhere\n")
    assert owned(locked)

    # an unfinished run of an earlier fedsheaf: no mark, no lock, no digests in its manifest
    over = [f"output.dir={tmp_path / 'runs'}", "train.epochs=3"]
    cfg = load_config(QUICK, over)
    run = tmp_path / "runs" / NAME
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(dump_config(cfg))
    (run / "metrics.jsonl").write_text('{"epoch": 1}\n{"epoch": 2}\n')
    for rank in range(4):
        checkpoint.save_rank(run, 2, rank, {})
    checkpoint.commit(run, 2, 4)
    manifest = run / "checkpoints" / checkpoint.MANIFEST
    legacy = json.loads(manifest.read_text())
    del legacy["files"]
    manifest.write_text(json.dumps(legacy))
    assert not (run / MARKER).exists() and not (run / run_lock.LOCK_FILE).exists()
    code, line = _check(capsys, "--resume", str(run))
    assert (code, line) == (0, f"fedsheaf check: would resume {run} after epoch 2")
    # resumed, it is marked as fedsheaf's
    resumed = load_config(QUICK, [*over, "checkpoint.resume=true"])
    assert claim_run_dir(resumed, run) is None
    open_run_dir(resumed, run)
    assert json.loads((run / MARKER).read_text())["format"] == MARKER_FORMAT
    assert (run / "metrics.jsonl").exists()  # (resumed, not replaced)


def test_overwrite_deletes_only_what_fedsheaf_wrote(tmp_path):
    over = [f"output.dir={tmp_path}", "output.overwrite=true"]
    cfg = load_config(QUICK, over)
    run = tmp_path / NAME
    RunDir(run).write_config(dump_config(cfg))
    (run / "metrics.jsonl").write_text('{"epoch": 1}\n')
    (run / "summary.json").write_text("{}")
    (run / "failed.json").write_text("{}")
    for epoch in (1, 2):
        for rank in range(4):
            checkpoint.save_rank(run, epoch, rank, {})
        checkpoint.commit(run, epoch, 4)
    (run / "checkpoints" / "epoch-0002" / ".rank-3.pt.0123456789abcdef.tmp").write_bytes(b"x")
    # somebody's files among the run's
    ours = {
        "notes.txt": b"mine\n",
        "checkpoints/best.ckpt": b"a copy I made",
        "checkpoints/epoch-0002/rank-1.pt.bak": b"another",
        "checkpoints/old/rank-0.pt": b"kept aside",
    }
    for name, data in ours.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(data)
    assert claim_run_dir(cfg, run) is None
    open_run_dir(cfg, run)
    left = _files(run)
    assert {k: v for k, v in left.items() if k in ours} == ours
    assert sorted(set(left) - set(ours)) == sorted([MARKER, run_lock.LOCK_FILE, "config.yaml"])
    assert not (run / "checkpoints" / "epoch-0001").exists()  # emptied: removed
