"""The committed results are what their committed run files say: regenerating each study's
tables from its run directories (as its README tells) gives the committed text, byte for
byte. A change to the report code that alters them must regenerate them too."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, mpi_env

RESULTS = REPO / "results"
TEXT_OUTPUTS = ("comparison.csv", "comparison.md", "runs.csv", "runs_table.csv", "runs_table.md")


def _python(*args: str | Path, cwd: Path = REPO) -> None:
    proc = subprocess.run(
        [sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


#: Written where the study searched a grid.
GRID_OUTPUTS = ("grid.csv", "grid.md")


@pytest.mark.parametrize("study", ["study15", "pair", "pilot_budget"])
def test_a_decentralized_study_report_regenerates_from_its_sweep(tmp_path, study):
    sweep = RESULTS / study / "sweep"
    planned = sorted(p.name for p in (sweep / "runs").iterdir())
    assert planned and all((sweep / "runs" / n / "summary.json").is_file() for n in planned)
    _python("-m", "fedsheaf", "report", sweep, "--out", tmp_path)
    for name in TEXT_OUTPUTS:
        assert (tmp_path / name).read_bytes() == (RESULTS / study / name).read_bytes(), name
    for name in GRID_OUTPUTS:
        assert (tmp_path / name).exists() == (RESULTS / study / name).exists(), name
        if (tmp_path / name).exists():
            assert (tmp_path / name).read_bytes() == (RESULTS / study / name).read_bytes()


def test_the_fedrep_table_regenerates_from_its_runs(tmp_path):
    _python(RESULTS / "fedrep" / "make_table.py", RESULTS / "fedrep" / "runs", tmp_path)
    for name in ("table.csv", "table.md"):
        assert (tmp_path / name).read_bytes() == (RESULTS / "fedrep" / name).read_bytes(), name


def test_the_fedrep_table_refuses_two_runs_of_one_algorithm(tmp_path):
    runs = tmp_path / "runs"
    for name in ("fedrep", "fedavg_ft"):
        shutil.copytree(RESULTS / "fedrep" / "runs" / name, runs / name)
    shutil.copytree(RESULTS / "fedrep" / "runs" / "fedrep", runs / "fedrep-seed1")
    proc = subprocess.run(
        [sys.executable, RESULTS / "fedrep" / "make_table.py", runs, tmp_path / "out"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and not (tmp_path / "out" / "table.md").exists()
    assert "two fedrep runs" in proc.stderr and "fedsheaf report" in proc.stderr


def test_the_head_fedavg_tables_regenerate_from_their_runs(tmp_path):
    copy = tmp_path / "head_fedavg"
    shutil.copytree(RESULTS / "head_fedavg", copy)
    tables = ("table.md", "ufm_table.md", "geo/table.md")
    for name in tables:
        (copy / name).unlink()
    _python(RESULTS / "head_fedavg" / "make_results.py", copy)
    _python(RESULTS / "head_fedavg" / "make_results.py", copy / "geo")
    for name in tables:
        assert (copy / name).read_bytes() == (RESULTS / "head_fedavg" / name).read_bytes(), name


def test_the_startup_measurement_runs_and_writes_its_table(tmp_path):
    """results/bench/startup/measure.py (its numbers are committed beside it) still runs:
    one repeat of each piece, into a folder of the test's."""
    script = REPO / "results" / "bench" / "startup" / "measure.py"
    proc = subprocess.run(
        [sys.executable, str(script), "1", str(tmp_path)],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (md,) = tmp_path.glob("startup-*cpu.md")
    rows = [line for line in md.read_text().splitlines() if line.startswith("| MPI start")]
    assert len(rows) == 4 and "OMPI_MCA_btl=^ofi" in rows[1]
    (record,) = tmp_path.glob("startup-*cpu.json")
    assert len(json.loads(record.read_text())["rows"]) == 6
