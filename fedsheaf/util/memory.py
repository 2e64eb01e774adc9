"""Peak memory of the ranks of a job: what to ask a scheduler for (``--mem-per-cpu``).

Each rank reads its own peak resident set (``getrusage``: the most RAM the process held
at any moment of its life, torch's libraries included: what a scheduler's per-task RSS
accounting sees), the part of its resident set that is mapped files at the end (on
Linux: ``RssFile`` — torch's and the other libraries' code, which the ranks of a node
share in the page cache, so a node holds it once) and, on a GPU, the most memory torch's
allocator handed out (``torch.cuda.max_memory_allocated``; the CUDA context and the
allocator's cache come on top). A run's summary and a benchmark launch record them per
rank, with the largest and the sum (:func:`per_rank`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import resource
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedsheaf.util.units import human_bytes

if TYPE_CHECKING:
    import torch

STATUS = Path("/proc/self/status")
STATM = Path("/proc/self/statm")
MAPS = Path("/proc/self/maps")

#: the malloc libraries :func:`malloc_library` names, by the file name they load from
MALLOC_LIBRARIES = {"libtcmalloc": "tcmalloc", "libjemalloc": "jemalloc", "libmimalloc": "mimalloc"}
#: gperftools' tcmalloc, the minimal build first (what ``LD_PRELOAD`` takes)
TCMALLOC_NAMES = ("tcmalloc_minimal", "tcmalloc")


def peak_rss_bytes() -> int:
    """The peak resident set size of this process so far, in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # Linux: kB


def file_rss_bytes() -> int | None:
    """The resident pages of this process that are mapped files (shared libraries), in
    bytes, now; None where the kernel does not say (not Linux)."""
    try:
        lines = STATUS.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("RssFile:"):
            return int(line.split()[1]) * 1024
    return None


def peak_memory(devices: list[torch.device]) -> dict[str, int]:
    """This rank's memory so far: ``{"rss": peak, "file": mapped files now}`` (``file``
    on Linux only), plus ``"cuda"`` (peak allocated; with several GPUs, the most on one)
    when the rank's ``devices`` are GPUs."""
    out = {"rss": peak_rss_bytes()}
    files = file_rss_bytes()
    if files is not None:
        out["file"] = files
    gpus = [d for d in devices if d.type == "cuda"]
    if gpus:
        import torch  # (only here: reading this module's other tools needs no torch)

        out["cuda"] = max(int(torch.cuda.max_memory_allocated(d)) for d in gpus)
    return out


#: glibc's mallopt parameter for the most malloc arenas (``M_ARENA_MAX``)
_M_ARENA_MAX = -8


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library this process runs on, where it is glibc's (None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    # (musl has neither)
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


@functools.cache
def malloc_library() -> str:
    """The malloc this process allocates with (fixed when it starts): ``tcmalloc``,
    ``jemalloc`` or ``mimalloc`` when one is loaded (``LD_PRELOAD``), else ``glibc``
    where the C library is glibc's, else ``unknown``."""
    try:
        maps = MAPS.read_text()
    except OSError:
        maps = ""
    for prefix, name in MALLOC_LIBRARIES.items():
        if f"/{prefix}" in maps:
            return name
    return "glibc" if _libc() is not None else "unknown"


def find_tcmalloc() -> str | None:
    """The file name of gperftools' tcmalloc as the dynamic loader finds it (e.g.
    ``libtcmalloc_minimal.so.4``: what ``LD_PRELOAD`` takes), None where it is not
    installed (Debian/Ubuntu: ``libtcmalloc-minimal4``)."""
    for name in TCMALLOC_NAMES:
        found = ctypes.util.find_library(name)
        if found:
            return found
    return None


def share_malloc_arena() -> bool:
    """Make the threads this process starts from now on allocate from one glibc malloc
    arena (``mallopt(M_ARENA_MAX, 1)``), unless ``MALLOC_ARENA_MAX`` is set.

    By default glibc gives each thread its own arena, which keeps the memory the thread
    freed: agents sharing a rank (one thread each, taking turns) would each keep their
    own peak of activations, where one arena lets the next agent reuse them. Returns
    whether the setting was made (False off glibc, under a preloaded malloc, or when the
    user chose).
    """
    libc = _libc()
    if "MALLOC_ARENA_MAX" in os.environ or libc is None or malloc_library() != "glibc":
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, 1))


def resident_bytes() -> int | None:
    """This process's resident set now, in bytes; None where the kernel does not say."""
    try:
        return int(STATM.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def release_freed_memory() -> bool:
    """Hand the memory this process freed but malloc still holds back to the OS: glibc's
    ``malloc_trim(0)`` (the free pages inside the heap too, not only at its top), or
    tcmalloc's ``MallocExtension_ReleaseFreeMemory`` where tcmalloc is preloaded. Returns
    whether a release ran and, for glibc, gave memory back (False elsewhere)."""
    libc = _libc()
    if libc is None:
        return False
    if malloc_library() == "tcmalloc":  # (preloaded: its symbols come first)
        libc.MallocExtension_ReleaseFreeMemory()
        return True
    return bool(libc.malloc_trim(0))


class FreedMemoryRelease:
    """Call between the turns of agents sharing a rank: releases the freed memory
    (:func:`release_freed_memory`) once the resident set has grown by more than ``slack``
    bytes since the last release.

    Agents that take turns on one rank allocate and free their activations in one
    malloc heap; the small objects each agent keeps between its turns split that heap,
    so it grows by holes that glibc does not give back (15 Table-2 agents on one rank:
    about 400 MB of them). Releasing them lowers the peak resident set; the pages the
    next agent touches again cost a page fault each, which is the time this takes.
    ``slack`` keeps the release from running after every turn of agents that allocate
    little.
    """

    def __init__(self, slack: int = 64 << 20) -> None:
        self.slack = slack
        self.releases = 0
        self._after: int | None = None  # the resident set after the last release

    def __call__(self) -> bool:
        now = resident_bytes()
        if now is None:
            return False
        if self._after is None:  # (the first call sets the baseline)
            self._after = now
            return False
        if now <= self._after + self.slack:
            return False
        release_freed_memory()
        self.releases += 1
        self._after = resident_bytes() or now
        return True


KEYS = {"rss": "peak_rss_bytes", "file": "file_rss_bytes", "cuda": "peak_cuda_bytes"}


def per_rank(peaks: list[dict[str, int]]) -> dict[str, Any]:
    """The record of a job's :func:`peak_memory` values, one per rank (in rank order).

    ``{"peak_rss_bytes": [...], "peak_rss_bytes_max": m, "peak_rss_bytes_total": t}``,
    and the same for ``file_rss_bytes`` and, where the ranks ran on GPUs,
    ``peak_cuda_bytes``.
    """
    out: dict[str, Any] = {}
    for kind, key in KEYS.items():
        values = [p[kind] for p in peaks if kind in p]
        if values:
            out.update({key: values, f"{key}_max": max(values), f"{key}_total": sum(values)})
    return out


def describe(memory: dict[str, Any] | None) -> str:
    """``peak memory 1.05 GB a rank (rank 2; 0.51 GB of it library files, which the
    ranks of a node share), 4.20 GB summed over 4 ranks``, and the GPU's; empty for a
    record without them (a run from before they were recorded)."""
    memory = memory or {}
    rss = memory.get(KEYS["rss"])
    if not rss:
        return ""
    top = max(rss)
    rank = rss.index(top)
    notes = [f"rank {rank}"] if len(rss) > 1 else []
    files = memory.get(KEYS["file"])
    if files and len(files) == len(rss):
        share = "which the ranks of a node share" if len(rss) > 1 else "shareable"
        notes.append(f"{human_bytes(files[rank])} of it library files, {share}")
    text = f"peak memory {human_bytes(top)} a rank"
    if notes:
        text += f" ({'; '.join(notes)})"
    if len(rss) > 1:
        text += f", {human_bytes(sum(rss))} summed over {len(rss)} ranks"
    cuda = memory.get(KEYS["cuda"])
    if cuda:
        text += f"; GPU memory allocated {human_bytes(max(cuda))} a rank at most"
    return text
