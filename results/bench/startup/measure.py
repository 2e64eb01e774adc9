"""Time what a fedsheaf process spends starting up, one piece at a time, each in fresh
processes (a median of several): Open MPI's start with and without libfabric's transport
(``OMPI_MCA_btl=^ofi``, what the local launchers give), and the bundled digits read as
fedsheaf reads them against scikit-learn's ``load_digits`` (both after ``import torch``,
as in a run).

    .venv/bin/python results/bench/startup/measure.py [REPEATS [FOLDER]]

writes ``startup-<cores>cpu.{json,md}`` into FOLDER (default: beside this file). Run it on an idle machine, as root
with Open MPI's run-as-root variables set (run/mpirun.sh sets them).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MPIEXEC = str(Path(sys.executable).parent / "mpiexec")
PY = sys.executable
MPI_START = "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"
DIGITS_FEDSHEAF = "from fedsheaf.data.sources import load_digits; load_digits('.', 'train', False)"
#: (what fedsheaf did before: scikit-learn imported in a process that has torch)
DIGITS_SKLEARN = (
    "import fedsheaf.data.sources; from sklearn.datasets import load_digits; load_digits()"
)
#: (what, command line, extra environment)
CASES = [
    ("MPI start, one process, every transport", [PY, "-c", MPI_START], {}),
    ("MPI start, one process, OMPI_MCA_btl=^ofi", [PY, "-c", MPI_START], {"OMPI_MCA_btl": "^ofi"}),
    (
        "MPI start, mpiexec -n 2, every transport",
        [MPIEXEC, "--oversubscribe", "-n", "2", PY, "-c", MPI_START],
        {},
    ),
    (
        "MPI start, mpiexec -n 2, OMPI_MCA_btl=^ofi",
        [MPIEXEC, "--oversubscribe", "-n", "2", PY, "-c", MPI_START],
        {"OMPI_MCA_btl": "^ofi"},
    ),
    ("torch, then the digits read by fedsheaf (no scikit-learn)", [PY, "-c", DIGITS_FEDSHEAF], {}),
    ("torch, then the digits by scikit-learn's load_digits", [PY, "-c", DIGITS_SKLEARN], {}),
]


def _once(cmd: list[str], extra: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and the largest child's peak resident bytes of one run of ``cmd``."""
    env = {k: v for k, v in os.environ.items() if k != "OMPI_MCA_btl"}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env={**env, **extra}, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed")
    return seconds, usage.ru_maxrss * 1024


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    rows = []
    for what, cmd, extra in CASES:
        runs = [_once(cmd, extra) for _ in range(repeats)]
        rows.append(
            {
                "what": what,
                "seconds_median": round(statistics.median(s for s, _ in runs), 3),
                "seconds_min": round(min(s for s, _ in runs), 3),
                "peak_rss_mb_median": round(statistics.median(m for _, m in runs) / 1e6, 1),
            }
        )
        print(f"{what}: {rows[-1]['seconds_median']:.2f} s", flush=True)
    cores = os.cpu_count()
    meta = {"python": platform.python_version(), "cpus": cores, "repeats": repeats}
    stem = Path(sys.argv[2] if len(sys.argv) > 2 else HERE) / f"startup-{cores}cpu"
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    md = [
        f"# Start-up pieces ({cores} CPUs, median of {repeats} fresh processes)",
        "",
        "Made by `results/bench/startup/measure.py`. Peak RSS: the largest process's",
        "(for mpiexec, its largest child's or its own).",
        "",
        "| what | median s | min s | peak RSS MB |",
        "|---|---|---|---|",
    ]
    md += [
        f"| {r['what']} | {r['seconds_median']:.2f} | {r['seconds_min']:.2f} | "
        f"{r['peak_rss_mb_median']:.0f} |"
        for r in rows
    ]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
