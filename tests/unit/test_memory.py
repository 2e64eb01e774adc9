"""Peak memory per rank (fedsheaf.util.memory): read from the kernel, recorded, described."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
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
    peak = memory.peak_memory([torch.device("cpu")])
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


def test_threads_share_one_malloc_arena_unless_the_user_chose() -> None:
    """share_malloc_arena (agents sharing a rank): mallopt(M_ARENA_MAX, 1) on glibc, left
    alone when MALLOC_ARENA_MAX is set; checked in child processes (it is process-wide).
    Four live threads take turns allocating and freeing 100 MB: in one arena each reuses
    the last one's memory; in arenas of their own the process keeps all four blocks
    resident."""
    script = (
        "import sys, threading, numpy as np\n"
        "from fedsheaf.util.memory import share_malloc_arena\n"
        "def rss():  # (now, not the peak: importing torch peaks higher than this)\n"
        "    return next(int(ln.split()[1]) * 1024 for ln in open('/proc/self/status')\n"
        "                if ln.startswith('VmRSS:'))\n"
        "made = share_malloc_arena() if sys.argv[1] == 'share' else False\n"
        "turns = [threading.Event() for _ in range(5)]\n"
        "def work(k):\n"
        "    turns[k].wait()\n"
        "    blocks = [np.ones(1 << 16) for _ in range(200)]  # 100 MB in 512 kB pieces\n"
        "    del blocks\n"
        "    turns[k + 1].set()\n"
        "    turns[4].wait()  # (alive until the last has run, as agents are)\n"
        "before = rss()\n"
        "threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]\n"
        "for t in threads: t.start()\n"
        "turns[0].set()\n"
        "for t in threads: t.join()\n"
        "print(made, rss() - before)\n"
    )

    def child(mode: str, **env: str) -> tuple[str, int]:
        out = subprocess.run(
            [sys.executable, "-c", script, mode],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, **env},
        )
        made, grown = out.stdout.split()
        return made, int(grown)

    made, shared = child("share")
    assert made == ("True" if sys.platform.startswith("linux") else "False")
    assert child("share", MALLOC_ARENA_MAX="4")[0] == "False"  # (the user's choice stands)
    if made == "True":
        _, apart = child("apart")
        # what the freed blocks leave resident: at most one block in one arena (measured
        # 0-70 MB), more in arenas of their own (measured 150-300 MB: some may share)
        assert shared < 120e6 and apart > 140e6, (shared, apart)


FRAGMENT = (
    "import numpy as np\n"
    "from fedsheaf.util import memory\n"
    "def fragment():  # 128 MB in 64 kB pieces, one in eight kept: holes glibc keeps\n"
    "    blocks = [np.ones(1 << 13) for _ in range(2048)]\n"
    "    return blocks[::8]\n"
)


def _child(script: str, **env: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", FRAGMENT + script],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    return out.stdout.split()


def test_releasing_freed_memory_hands_the_heap_holes_back_to_the_os() -> None:
    """release_freed_memory (train.release_memory): the pages of freed blocks that a kept
    block pins inside the heap stay resident until malloc_trim hands them back (in a
    child process: the heap is process-wide)."""
    if not sys.platform.startswith("linux"):
        assert memory.release_freed_memory() is False
        return
    kept_holes, released = map(
        int,
        _child(
            "before = memory.resident_bytes()\n"
            "kept = fragment()\n"
            "holes = memory.resident_bytes() - before\n"
            "memory.release_freed_memory()\n"
            "print(holes, holes - (memory.resident_bytes() - before))\n"
        ),
    )
    assert kept_holes > 100e6, kept_holes  # (7/8 of 128 MB freed, still resident)
    assert released > 80e6, (kept_holes, released)


def test_the_malloc_in_use_is_named_and_a_preloaded_tcmalloc_releases_its_free_memory() -> None:
    """malloc_library names glibc's malloc, or a preloaded one (``LD_PRELOAD``, checked
    in child processes); under tcmalloc, the arena setting is left alone (it has no
    arenas) and release_freed_memory hands the freed pages back through tcmalloc's own
    call, as malloc_trim does for glibc. The tcmalloc half needs gperftools' tcmalloc
    installed (Debian/Ubuntu: libtcmalloc-minimal4)."""
    if not sys.platform.startswith("linux"):
        assert memory.malloc_library() == "unknown" and memory.release_freed_memory() is False
        return
    script = (
        "print(memory.malloc_library(), memory.share_malloc_arena())\n"
        "before = memory.resident_bytes()\n"
        "kept = fragment()\n"
        "holes = memory.resident_bytes() - before\n"
        "print(memory.release_freed_memory(), holes, memory.resident_bytes() - before)\n"
    )
    assert _child(script)[:3] == ["glibc", "True", "True"]
    tcmalloc = memory.find_tcmalloc()
    if tcmalloc is None:
        pytest.skip("gperftools' tcmalloc is not installed here")
    assert "tcmalloc" in tcmalloc
    name, arena, released, holes, left = _child(script, LD_PRELOAD=tcmalloc)
    assert (name, arena, released) == ("tcmalloc", "False", "True")
    assert int(holes) > 100e6 and int(holes) - int(left) > 80e6, (holes, left)


def test_freed_memory_is_released_only_after_the_resident_set_grew_by_the_slack() -> None:
    """FreedMemoryRelease: the first call sets the baseline; later calls release only
    once the resident set grew by more than ``slack`` since the last release."""
    if not sys.platform.startswith("linux"):
        return
    got = _child(
        "release = memory.FreedMemoryRelease(slack=32 << 20)\n"
        "calls = [release(), release()]  # the baseline, then no growth\n"
        "before = memory.resident_bytes()\n"
        "kept = fragment()\n"
        "calls.append(release())  # grown by about 128 MB: released\n"
        "after = memory.resident_bytes()\n"
        "calls.append(release())  # nothing grew since\n"
        "print(*calls, release.releases, before - after > -48e6)\n"
    )
    assert got == ["False", "False", "True", "False", "1", "True"], got
