"""fedsheaf.run in a script launched under mpiexec: every rank gets the same summary (the
one summary.json holds), a script may run twice, and a bad override is a ConfigError on
every rank that the script catches and carries on after."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_mpi

SCRIPT = """\
import json, sys
import fedsheaf
from mpi4py import MPI

out = sys.argv[1]
rank = MPI.COMM_WORLD.Get_rank()
for seed in (0, 1):
    s = fedsheaf.run("configs/quickstart.yaml", seed=seed, **{"train.epochs": 1, "output.dir": out})
    numbers = [s.name, s.algorithm, s.seed, str(s.run_dir), s.n_agents, s.private, s.comm,
               s.comm_degree_weighted, s.bytes_total, s.raw["agents"]]
    print("RESULT", rank, seed, json.dumps(numbers), flush=True)
try:
    fedsheaf.run("configs/quickstart.yaml", train={"epochs": -1}, output={"dir": out})
except fedsheaf.ConfigError as exc:
    print("ERROR", rank, exc, flush=True)
print("DONE", rank, flush=True)
"""


def test_run_twice_and_a_refused_run_in_one_script(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    out = tmp_path / "runs"
    proc = run_mpi(4, [str(script), str(out)], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    results: dict[int, dict[int, list[object]]] = {}
    for line in lines:
        if line.startswith("RESULT "):
            _, rank_text, seed_text, numbers = line.split(" ", 3)
            results.setdefault(int(seed_text), {})[int(rank_text)] = json.loads(numbers)
    assert sorted(results) == [0, 1], proc.stdout
    for seed, by_rank in results.items():
        assert sorted(by_rank) == [0, 1, 2, 3], proc.stdout
        first = by_rank[0]
        assert all(numbers == first for numbers in by_rank.values())  # every rank agrees
        run_dir = out / f"quickstart-sheaf_frl-seed{seed}"
        written = json.loads((run_dir / "summary.json").read_text())
        assert first == [
            "quickstart",
            "sheaf_frl",
            seed,
            str(run_dir),
            4,
            written["private_acc"],
            written["comm_acc"],
            written["comm_acc_deg"],
            written["bytes_sent_total"],
            written["agents"],
        ]
    assert results[0][0][5] != results[1][0][5]  # two runs, not one twice
    errors = sorted(line for line in lines if line.startswith("ERROR "))
    assert len(errors) == 4, proc.stdout + proc.stderr
    assert all("'train.epochs' must be >= 1" in e for e in errors)
    assert len({e.split(" ", 2)[2] for e in errors}) == 1  # the same words on every rank
    assert sorted(line for line in lines if line.startswith("DONE ")) == [
        f"DONE {r}" for r in range(4)
    ]
    assert "Traceback" not in proc.stderr
