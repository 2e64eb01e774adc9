"""The shipped configs and graphs are presets: ``fedsheaf run quickstart`` (a name, not a
path) finds configs/quickstart.yaml among the presets, from any directory, and the paths
inside a preset (its graph) resolve against the preset, not the current directory. A
config given by path keeps resolving against the current directory.
``fedsheaf init DIR`` copies configs/, graphs/ and slurm/ into DIR for editing.

(tests/unit/test_wheel.py checks the same from a built wheel, installed elsewhere.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fedsheaf.config.bundled import find_preset, preset_names, preset_root
from fedsheaf.config.sections import load_config
from fedsheaf.ops.study import expand
from fedsheaf.util.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_a_checkout_finds_its_presets_in_the_repository_folders():
    assert preset_root() == REPO
    assert "quickstart" in preset_names() and "mnist15" in preset_names()


def test_a_preset_name_loads_from_any_directory_and_its_graph_follows_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config("quickstart", ["train.epochs=1"])
    assert cfg.name == "quickstart" and cfg.train.epochs == 1
    assert cfg.graph == str(REPO / "graphs" / "quick4.yaml")
    cfg = load_config("mnist15", ["data.root=mine"])
    assert cfg.graph == str(REPO / "graphs" / "mnist15.yaml")
    assert cfg.data.root == "mine"  # an override is the user's: as given
    assert load_config("mnist15").data.root == "data"  # the user's data, not the preset's
    # an override's graph is the user's too: it resolves against the current directory
    assert load_config("quickstart", ["graph=g.yaml"]).graph == "g.yaml"


def test_a_config_given_by_path_keeps_its_paths_as_written(monkeypatch):
    monkeypatch.chdir(REPO)
    assert load_config("configs/quickstart.yaml").graph == "graphs/quick4.yaml"
    assert find_preset("configs/quickstart.yaml") is None
    assert find_preset("quickstart.yaml") is None


def test_a_file_of_that_name_wins_over_a_preset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart").write_text((REPO / "configs" / "quickstart.yaml").read_text())
    assert find_preset("quickstart") is None
    assert load_config("quickstart").graph == "graphs/quick4.yaml"


def test_an_unknown_name_lists_the_presets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_config("quickstrat")
    message = str(err.value)
    assert "config file quickstrat does not exist" in message
    assert "did you mean 'quickstart'" in message and "fedsheaf init" in message
    assert "\n" not in message


def test_a_preset_study_runs_its_preset_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study = expand("study15_fashion_cpu", write=False)
    assert {r.config for r in study.runs} == {"mnist15"}  # `fedsheaf run mnist15 ...`
    assert study.output == Path("runs/study15_fashion_cpu")  # outputs: the current directory's
    pair = expand("pair_fashion_cpu", write=False)  # a preset axis writes its configs
    assert pair.preset is not None and Path(pair.preset[1]) == REPO / "configs" / "pair.yaml"


def test_a_study_of_ones_own_may_name_a_preset_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text(
        "study: mine\nconfig: quickstart\nseeds: [0]\n"
        "axis: {name: s, key: data.shift, values: [0.5]}\n"
        "methods: [{name: frl, set: {algorithm: sheaf_frl}}]\n"
    )
    study = expand("mine.yaml", write=False)
    assert [r.config for r in study.runs] == ["quickstart"]


def test_check_runs_a_preset_from_an_empty_directory(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fedsheaf", "check", "quickstart", "train.epochs=1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ok for 4 ranks" in proc.stdout


def _init(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedsheaf", "init", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_init_copies_the_presets_for_editing(tmp_path):
    proc = _init("proj", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proj = tmp_path / "proj"
    expected = {
        str(p.relative_to(REPO)): p.read_bytes()
        for name in ("configs", "graphs", "slurm")
        for p in (REPO / name).rglob("*")
        if p.is_file()
    }
    assert _files(proj) == expected
    for script in (REPO / "slurm").glob("*.sbatch"):  # executable scripts stay executable
        assert (proj / "slurm" / script.name).stat().st_mode & 0o111 == (
            script.stat().st_mode & 0o111
        )
    assert "cd proj" in proc.stdout and "configs/quickstart.yaml" in proc.stdout
    # the copies are the user's: their relative paths resolve in DIR
    ok = subprocess.run(
        [sys.executable, "-m", "fedsheaf", "check", "configs/quickstart.yaml"],
        cwd=proj,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ok.returncode == 0, ok.stderr


def test_init_refuses_a_folder_with_files_unless_forced_and_names_what_it_replaces(tmp_path):
    proj = tmp_path / "proj"
    (proj / "configs").mkdir(parents=True)
    mine = proj / "configs" / "quickstart.yaml"
    mine.write_text("name: mine\n")
    (proj / "notes.txt").write_text("keep\n")
    proc = _init(str(proj), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "is not empty" in proc.stderr
    assert "--force" in proc.stderr
    assert _files(proj) == {"configs/quickstart.yaml": b"name: mine\n", "notes.txt": b"keep\n"}

    proc = _init(str(proj), "--force", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "configs/quickstart.yaml" in proc.stderr  # said, not silent
    assert mine.read_bytes() == (REPO / "configs" / "quickstart.yaml").read_bytes()
    assert (proj / "notes.txt").read_text() == "keep\n"
    assert (proj / "graphs" / "quick4.yaml").is_file()


def test_init_refuses_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    proc = _init("afile", cwd=tmp_path)
    assert proc.returncode == 2 and "not a directory" in proc.stderr
