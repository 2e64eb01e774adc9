"""Guards around run directories: plain names, foreign directories, resume changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedsheaf.config.sections import dump_config, load_config
from fedsheaf.rundir import checkpoint
from fedsheaf.rundir.files import RunDir, check_not_foreign, mark
from fedsheaf.rundir.resume import check_resume, experiment_keys, resume_changes, resume_config
from fedsheaf.util.errors import ConfigError, relative_hint
from tests.conftest import REPO

QUICK = "configs/quickstart.yaml"


@pytest.mark.parametrize("name", ["../x", "/abs", "a/b", "..", "."])
def test_output_name_is_one_directory_name(name):
    with pytest.raises(ConfigError, match="must be a plain name"):
        load_config(QUICK, [f"output.name={name}"])
    assert load_config(QUICK, ["output.name=ok-name_1"]).run_name() == "ok-name_1"


def test_foreign_directories_are_refused(tmp_path):
    check_not_foreign(tmp_path / "new")  # absent: fine
    (tmp_path / "empty").mkdir()
    check_not_foreign(tmp_path / "empty")
    for marker in ("config.yaml", "metrics.jsonl", "summary.json", "checkpoints"):
        run = tmp_path / f"run-{marker}"
        run.mkdir()
        (run / marker).touch()
        (run / "notes.txt").touch()
        with pytest.raises(ConfigError, match="is not a fedsheaf run"):
            check_not_foreign(run)  # (tests/unit/test_run_dir_marker.py: what is a run's)
        mark(run)
        check_not_foreign(run)
    other = tmp_path / "other"
    other.mkdir()
    for k in range(7):
        (other / f"f{k}.txt").touch()
    with pytest.raises(ConfigError, match=r"holds f0.txt, f1.txt, f2.txt, f3.txt, f4.txt, \.\.\."):
        check_not_foreign(other)
    (tmp_path / "file").touch()
    with pytest.raises(ConfigError, match="is a file"):
        check_not_foreign(tmp_path / "file")


def test_run_dir_that_cannot_be_created(tmp_path):
    (tmp_path / "file").touch()
    with pytest.raises(ConfigError, match="cannot create run directory .*file/run"):
        RunDir(tmp_path / "file" / "run")


def _read_only_directory() -> Path | None:
    """An existing, empty directory that not even root can write into (sysfs)."""
    for d in sorted(Path("/sys/kernel").glob("*")):
        try:
            if not d.is_dir() or any(d.iterdir()):
                continue
        except OSError:
            continue
        try:
            (d / ".fedsheaf-probe").touch()
        except OSError:
            return d
        (d / ".fedsheaf-probe").unlink()
    return None


def test_run_dir_that_cannot_be_written_is_refused_before_training():
    ro = _read_only_directory()
    if ro is None:
        pytest.skip("no read-only empty directory under /sys/kernel here")
    with pytest.raises(ConfigError, match=f"cannot write into run directory {ro}: "):
        RunDir(ro)
    assert not any(ro.iterdir())


def test_resume_may_change_length_places_and_step_size_only(tmp_path):
    saved = load_config(QUICK)
    same = ["train.epochs=40", "checkpoint.every=2", "data.root=/elsewhere", "train.device=cpu"]
    same += ["train.lr=0.01", "agents[2].lr=0.001", "train.clip=0.5"]  # recovering a divergence
    assert resume_changes(saved, load_config(QUICK, same)) == []
    changed = load_config(QUICK, ["seed=3", "sheaf.lam=0.5", "agents[1].dropout=0.5"])
    assert resume_changes(saved, changed) == [
        "agents[1].dropout (0.1 -> 0.5)",
        "seed (0 -> 3)",
        "sheaf.lam (0.3 -> 0.5)",
    ]
    copy = tmp_path / "quick4.yaml"
    copy.write_text(open(saved.graph).read())  # the same graph file, found elsewhere
    assert resume_changes(saved, load_config(QUICK, [f"graph={copy}"])) == []
    copy.write_text(open(saved.graph).read() + "# edited\n")  # a comment: the same graph
    assert resume_changes(saved, load_config(QUICK, [f"graph={copy}"])) == []
    copy.write_text(open(saved.graph).read().replace("  - [0, 2]\n", ""))  # an edge less
    assert resume_changes(saved, load_config(QUICK, [f"graph={copy}"]))[0].startswith("graph (")
    assert "seed: 0" in dump_config(saved)


def test_a_config_yaml_edited_after_its_checkpoints_is_refused_on_resume(tmp_path):
    run = tmp_path / "run"
    written = load_config(QUICK, ["train.epochs=4"])
    RunDir(run).write_config(dump_config(written))
    checkpoint.commit(run, 2, 4, experiment=experiment_keys(written))
    resumed = load_config(QUICK, ["train.epochs=8", "checkpoint.every=2", "train.lr=0.01"])
    assert check_resume(run, resumed) is not None  # overrides a resume allows
    edited = (run / "config.yaml").read_text().replace("lam: 0.3", "lam: 0.9")
    (run / "config.yaml").write_text(edited)  # by hand, between two launches
    with pytest.raises(ConfigError, match=r"was it edited\?\): sheaf.lam \(0.3 -> 0.9\)"):
        check_resume(run, resume_config(run))
    checkpoint.commit(run, 2, 4)  # checkpoints that recorded nothing: nothing to compare
    assert check_resume(run, resume_config(run)).sheaf.lam == 0.9


def test_resumed_from_another_directory_a_relative_graph_path_points_at_the_copy(
    tmp_path, monkeypatch
):
    run = tmp_path / "run"
    cfg = load_config(QUICK)  # graph: graphs/quick4.yaml, relative to the checkout
    RunDir(run).write_config(dump_config(cfg))
    (run / "graph.yaml").write_text((REPO / cfg.graph).read_text())
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=f"add graph={run / 'graph.yaml'}$"):
        resume_config(run)
    assert resume_config(run, [f"graph={run / 'graph.yaml'}"]).graph == str(run / "graph.yaml")
    with pytest.raises(ConfigError) as err:  # the resume's own mistake, not the file's
        resume_config(run, ["train.epochs=0"])
    assert str(err.value).startswith("override 'train.epochs=0': config key 'train.epochs'")


def test_relative_hint():
    assert relative_hint("/abs/path") == ""
    assert relative_hint("graphs/x.yaml").startswith(" (relative to the current directory /")


def test_a_run_directory_is_never_made_inside_another_run(tmp_path):
    run = tmp_path / "quickstart-sheaf_frl-seed3"
    RunDir(run).write_config("name: x\n")
    check_not_foreign(run / "inner")  # a config.yaml alone is not a run (yet)
    (run / "metrics.jsonl").write_text("{}\n")
    for inner in (run / "quickstart-sheaf_frl-seed3", run / "checkpoints" / "r", run / "a" / "b"):
        with pytest.raises(ConfigError) as err:
            check_not_foreign(inner)
        assert str(err.value) == (
            f"run directory {inner} would lie inside the run directory {run}; "
            "choose an output.dir outside it"
        )
    check_not_foreign(tmp_path / "beside")
