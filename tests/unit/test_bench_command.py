"""``fedsheaf bench`` as a command: choosing launches and keeping to a time budget.

The launches here are stand-ins started through ``--launcher`` (a real process group
that sleeps), so the command's own bookkeeping is exercised without MPI or training.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from fedsheaf.bench.command import select
from fedsheaf.bench.plan import plan
from fedsheaf.errors import ConfigError
from tests.conftest import REPO


def bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedsheaf", "bench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_only_keeps_the_named_launches_in_plan_order():
    launches = plan("full", ["overhead", "speedup"])
    assert [la.label for la in launches] == ["table2", "pair"]
    assert [la.label for la in select(launches, "pair")] == ["pair"]
    assert [la.label for la in select(launches, " pair,table2 ")] == ["table2", "pair"]
    assert select(launches, None) == launches
    with pytest.raises(ConfigError, match=r"no launch \['scaling'\].*planned: table2, pair"):
        select(launches, "pair,scaling")


def test_only_on_the_command_line():
    out = bench("overhead", "--size", "full", "--only", "pair", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert [line.split(":")[0] for line in out.stdout.splitlines()] == ["pair"]
    bad = bench("overhead", "--only", "nope", "--dry-run")
    assert bad.returncode != 0
    assert "--only: no launch ['nope']" in bad.stderr
    assert "Traceback" not in bad.stderr
    bad = bench("overhead", "--budget", "0", "--dry-run")
    assert bad.returncode != 0 and "--budget must be a positive number" in bad.stderr


def test_budget_stops_the_running_launch_skips_the_rest_and_writes_the_summary(tmp_path):
    sleeper = "bash -c 'sleep 60' {n}"  # argv after the template: python -m worker ...
    start = time.perf_counter()
    out = bench(
        "overhead",
        "bytes",
        "--launcher",
        sleeper,
        "--budget",
        "3",
        "--out",
        str(tmp_path),
        "--tag",
        "cut",
    )
    elapsed = time.perf_counter() - start
    assert out.returncode == 1, out.stdout + out.stderr
    assert elapsed < 40, "the sleeping launch was not stopped at the budget"
    doc = json.loads((tmp_path / "cut.json").read_text())
    first, *rest = doc["launches"]
    assert first["returncode"] == 124 and 2.0 < first["seconds"] < 30
    assert rest and all(r["skipped"] == "--budget spent" for r in rest)
    assert doc["results"] == {}
    assert any("stopped or skipped for time" in n for n in doc["meta"]["notes"])
    md = (tmp_path / "cut.md").read_text()
    assert f"{first['label']}: stopped at its time limit" in md
    assert f"{rest[0]['label']}: skipped (--budget spent)" in md
    assert "skipped, --budget spent" in out.stdout
