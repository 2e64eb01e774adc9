"""Peak memory per rank (fedsheaf.util.memory): read from the kernel, recorded, described."""

from __future__ import annotations

import subprocess
import sys

import torch

from fedsheaf.util import memory


def test_the_peak_resident_set_grows_with_what_the_process_holds() -> None:
    """A child process that fills 200 MB peaks at least that much above what it held
    just before (its resident set then, not its earlier peak: importing torch peaks
    higher than it settles)."""
    script = (
        "import torch\n"
        "from fedsheaf.util.memory import peak_rss_bytes\n"
        "held = next(int(ln.split()[1]) * 1024 for ln in open('/proc/self/status')\n"
        "            if ln.startswith('VmRSS:'))\n"
        "block = torch.ones(50_000_000)  # 200 MB, touched\n"
        "del block\n"
        "print(held, peak_rss_bytes())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    held, peak = map(int, out.stdout.split())
    assert held > 10e6 and peak - held >= 190e6


def test_a_cpu_rank_records_its_peak_and_its_library_files() -> None:
    peak = memory.peak_memory(torch.device("cpu"))
    assert set(peak) == {"rss", "file"}  # (Linux)
    # torch's shared libraries are mapped: hundreds of MB, within the peak
    assert 50e6 < peak["file"] < peak["rss"] <= memory.peak_rss_bytes()


def test_per_rank_records_keep_rank_order_with_the_largest_and_the_sum() -> None:
    cpu = memory.per_rank([{"rss": 300}, {"rss": 500}, {"rss": 200}])
    assert cpu == {
        "peak_rss_bytes": [300, 500, 200],
        "peak_rss_bytes_max": 500,
        "peak_rss_bytes_total": 1000,
    }
    gpu = memory.per_rank([{"rss": 10, "file": 4, "cuda": 7}, {"rss": 20, "file": 5, "cuda": 9}])
    assert gpu["peak_cuda_bytes"] == [7, 9] and gpu["peak_cuda_bytes_total"] == 16
    assert gpu["file_rss_bytes"] == [4, 5] and gpu["file_rss_bytes_max"] == 5


def test_described_in_the_units_of_the_tables() -> None:
    three = memory.per_rank(
        [{"rss": 300_000_000, "file": 100_000_000}, {"rss": 512_000_000, "file": 120_000_000}]
        + [{"rss": 200_000_000, "file": 90_000_000}]
    )
    assert memory.describe(three) == (
        "peak memory 512.00 MB a rank (rank 1; 120.00 MB of it library files, which the "
        "ranks of a node share), 1.01 GB summed over 3 ranks"
    )
    one = memory.per_rank([{"rss": 400_000_000, "cuda": 2_500_000_000}])
    assert memory.describe(one) == (
        "peak memory 400.00 MB a rank; GPU memory allocated 2.50 GB a rank at most"
    )
    assert memory.describe(None) == "" and memory.describe({}) == ""  # runs from before
