"""``fedsheaf check`` estimates a rank's peak memory from the config and warns when a node
cannot give it (issue "Hardening", 4); sizes beyond the data are capped, said once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedsheaf.cli import main as cli

QUICK = "configs/quickstart.yaml"
ESTIMATE = re.compile(
    r"^fedsheaf check: estimated peak memory per rank ~([\d.]+) (GB|MB) \(torch and libraries "
    r"980\.00 MB, model [\d.]+ [kMG]?B, activations [\d.]+ [kMG]?B, data [\d.]+ [kMG]?B"
    r"(, pilot window [\d.]+ [kMG]?B)?; agent \d, the rank that needs most\)$"
)


@pytest.fixture
def out_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    return tmp_path / "runs"


def check(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _gigabytes(line: str) -> float:
    match = ESTIMATE.match(line)
    assert match, line
    return float(match[1]) / (1 if match[2] == "GB" else 1000)


def _estimate(out: str) -> str:
    return next(ln for ln in out.splitlines() if "estimated peak memory per rank" in ln)


def test_check_prints_an_estimate_close_to_the_measured_peak(capsys, out_dir) -> None:
    code, out, err = check(capsys, QUICK, f"output.dir={out_dir}")
    assert code == 0, err
    # results/bench/README.md: the quickstart's ranks peak at 1.03 GB (within a factor 2)
    assert 1.03 / 2 < _gigabytes(_estimate(out)) < 1.03 * 2


def test_an_absurd_batch_is_capped_in_the_warning_and_the_estimate(capsys, out_dir) -> None:
    code, out, err = check(capsys, QUICK, f"output.dir={out_dir}", "train.batch_size=100000000")
    assert code == 0, err
    said = [ln for ln in err.splitlines() if "train.batch_size=100000000" in ln]
    assert len(said) == 1 and "each of their batches is capped at its training set" in said[0]
    assert re.search(r"\(agent 0: \d+, agent 1: \d+, agent 2: \d+, agent 3: \d+\)", said[0])
    assert _gigabytes(_estimate(out)) < 1.5  # a batch of ~320 digits rows, not 1e8


def test_a_model_too_wide_for_the_node_is_a_warning(capsys, out_dir) -> None:
    wide = "agents[0].encoder=[65536,16]"  # 3.3 GB of activations a step, few parameters
    code, out, err = check(capsys, QUICK, f"output.dir={out_dir}", wide, "--node-memory", "8GB")
    assert code == 0, err
    assert _gigabytes(_estimate(out)) > 2.0 and "agent 0, the rank that needs most" in out
    (said,) = [ln for ln in err.splitlines() if "estimated peak memory" in ln]
    assert said.startswith("fedsheaf: warning: estimated peak memory per rank ~")
    assert "exceeds 2.00 GB a rank (the node memory given, 8.00 GB, over 4 ranks, all" in said
    two_a_node = ["--node-memory", "64G", "--ranks-per-node", "2"]  # 32 GiB a rank: enough
    code, out, err = check(capsys, QUICK, f"output.dir={out_dir}", wide, *two_a_node)
    assert code == 0 and "estimated peak memory" not in err
    with pytest.raises(SystemExit) as stop:
        cli.main(["check", QUICK, "--node-memory", "lots"])
    assert stop.value.code == 2
    assert "expected a size such as 64GB or 512MiB, got 'lots'" in capsys.readouterr().err


def test_the_warning_states_what_it_assumed() -> None:
    from fedsheaf.rundir.footprint import TORCH_BASELINE, Footprint, memory_warning

    fp = Footprint(model=10**9, activations=2 * 10**9, data=0)
    assert fp.total == TORCH_BASELINE + 3 * 10**9
    assert memory_warning(fp, 4, 64 * 10**9, None, False) is None
    said = memory_warning(fp, 4, 12 * 10**9, None, False)
    assert said is not None and "exceeds 3.00 GB a rank (this machine's available memory" in said
    assert "12.00 GB, over 4 ranks, all on one node)" in said
    said = memory_warning(fp, 16, 12 * 10**9, 4, True)
    assert said is not None and "(the node memory given, 12.00 GB, over 4 ranks)" in said
    assert memory_warning(fp, 4, None, None, False) is None  # a machine that does not say


def test_available_memory_is_read_from_meminfo(tmp_path: Path) -> None:
    from fedsheaf.util.hostinfo import available_memory_bytes

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\nMemAvailable:    8000000 kB\n")
    assert available_memory_bytes(meminfo) == 8_000_000 * 1024
    fallback = available_memory_bytes(tmp_path / "missing")  # os.sysconf's free pages
    assert fallback is None or fallback > 0


def test_a_model_that_cannot_be_built_here_is_refused_before_building_it(capsys, out_dir):
    # 1.6e12 head parameters: counted on the meta device, never allocated (it used to try)
    code, out, err = check(capsys, QUICK, f"output.dir={out_dir}", "agents[0].head=[100000000000]")
    assert (code, out) == (2, "")
    assert err.startswith("fedsheaf: error: agents[0]: the model needs 32400.00 GB for its ")
    assert err.endswith("; narrow agents[0].encoder or agents[0].head\n") and err.count("\n") == 1
