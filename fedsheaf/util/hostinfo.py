"""What this host offers local launches: CPUs, the cores behind them, its ``mpiexec``.

Open MPI 5 (through hwloc) gives a node one slot per *core*, not per hardware thread,
and refuses ``mpiexec -n N`` beyond the slots unless ``--oversubscribe``. On a laptop
with SMT (say 4 cores, 8 threads) ``mpiexec -n 8`` is refused although 8 CPUs are
online, so a launcher must compare the rank count with :func:`physical_cores`, not with
:func:`usable_cpus`.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from pathlib import Path

from fedsheaf.util.errors import ConfigError

SYSFS_CPUS = Path("/sys/devices/system/cpu")


def usable_cpu_ids() -> list[int]:
    """Logical CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def usable_cpus() -> int:
    """How many logical CPUs this process may run on (at least 1)."""
    return max(1, len(usable_cpu_ids()))


def physical_cores(cpus: list[int] | None = None, sysfs: Path = SYSFS_CPUS) -> int:
    """Distinct physical cores among ``cpus`` (default: :func:`usable_cpu_ids`).

    A core is a (package, core id) pair from Linux's
    ``<sysfs>/cpu<N>/topology/{physical_package_id,core_id}``. Where that topology
    cannot be read (not Linux, a container hiding ``/sys``), every CPU counts as a
    core: on an SMT machine that overcounts, and Open MPI may then refuse a launch
    that ``--oversubscribe`` (or ``mpiexec --use-hwthread-cpus``) would allow.
    """
    ids = usable_cpu_ids() if cpus is None else cpus
    cores = set()
    for cpu in ids:
        topology = sysfs / f"cpu{cpu}" / "topology"
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:
            return max(1, len(ids))
        cores.add((package, core))
    return max(1, len(cores))


MEMINFO = Path("/proc/meminfo")


def available_memory_bytes(meminfo: Path = MEMINFO) -> int | None:
    """The memory this machine can give new processes now, in bytes: Linux's
    ``MemAvailable`` (free memory plus what the page cache can give back), else
    ``os.sysconf``'s free pages; None where neither says."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def launcher_words(template: str) -> list[str]:
    """The shell words of a launcher template (``'srun -n {n}'``); ValueError unless it
    splits into words and one of them holds ``{n}``, the rank count."""
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise ValueError(f"cannot split {template!r} into words: {exc}") from None
    if not any("{n}" in w for w in words):
        raise ValueError(f"{template!r} has no {{n}} for the rank count, e.g. 'srun -n {{n}}'")
    return words


def launcher_template(text: str) -> str:
    """The argparse type of a ``--launcher`` option: ``text``, once :func:`launcher_words`
    accepts it."""
    try:
        launcher_words(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def threads_per_rank(masks: list[set[int]], mine: int) -> int:
    """Torch threads for local rank ``mine``, given every local rank's CPU affinity mask.

    Ranks that may all run on the same CPUs (no binding) share them: each takes its
    share, ``len(mask) // ranks``. Ranks bound to CPUs of their own (``srun`` with
    ``--cpus-per-task``, ``mpiexec --bind-to core``) each take all of theirs; dividing
    again would leave ``srun -n 4 -c 8`` with 2 threads per rank instead of 8. In
    general a rank's CPUs are divided among the local ranks whose masks overlap it.
    """
    own = masks[mine]
    sharing = sum(1 for mask in masks if mask & own)
    return max(1, len(own) // max(1, sharing))


def gpus_of_rank(local_rank: int, local_size: int, n_gpus: int) -> list[int]:
    """The GPU ids (of the ``n_gpus`` this node's ranks see) that node-local rank
    ``local_rank`` of ``local_size`` owns: every ``local_size``-th from its own, so the
    node's GPUs are dealt out among its ranks; where ranks outnumber GPUs, the one GPU it
    shares (``local_rank mod n_gpus``); none without GPUs. The first is the rank's device."""
    if n_gpus <= 0:
        return []
    if n_gpus < local_size:
        return [local_rank % n_gpus]
    return list(range(local_rank, n_gpus, local_size))


#: Open MPI's transports for a launch on this machine (``OMPI_MCA_btl``, where not set):
#: all but libfabric's ("ofi"), which looks for network hardware as each process starts
#: MPI (1.0 s a process with the pip wheel on this 2-core machine, 0.1 s without it) for
#: a network that ranks of one machine do not use: they talk over shared memory.
LOCAL_BTL = "^ofi"


def launch_flags(ranks: int) -> tuple[list[str], dict[str, str]]:
    """The ``mpiexec`` flags and environment a local launch of ``ranks`` ranks needs.

    ``--oversubscribe`` (and one torch thread per rank) beyond the physical cores, so
    Open MPI does not refuse the launch; Open MPI's run-as-root permission as root; its
    transports without libfabric's (:data:`LOCAL_BTL`) unless ``OMPI_MCA_btl`` is set.
    """
    flags: list[str] = []
    env: dict[str, str] = {}
    if "OMPI_MCA_btl" not in os.environ:
        env["OMPI_MCA_btl"] = LOCAL_BTL
    if ranks > physical_cores():
        flags.append("--oversubscribe")
        env["FEDSHEAF_THREADS"] = os.environ.get("FEDSHEAF_THREADS", "1")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return flags, env


def find_mpiexec() -> str | None:
    """$FEDSHEAF_MPIEXEC, else mpiexec beside this Python, else the first on PATH."""
    named = os.environ.get("FEDSHEAF_MPIEXEC")
    if named:
        return named
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


def local_launcher(ranks: int, missing_ok: bool = False) -> tuple[list[str], dict[str, str]]:
    """:func:`find_mpiexec`'s mpiexec with the flags a small machine needs.

    With ``missing_ok`` (a command line to show, not to run) a missing mpiexec is
    written as plain ``mpiexec``.
    """
    mpiexec = find_mpiexec()
    if mpiexec is None and missing_ok:
        mpiexec = "mpiexec"
    if mpiexec is None:
        raise ConfigError("no mpiexec found (run run/install.sh, or load your site MPI module)")
    if not (missing_ok or Path(mpiexec).is_file() or shutil.which(mpiexec)):
        raise ConfigError(f"FEDSHEAF_MPIEXEC={mpiexec} is not an executable")
    flags, extra = launch_flags(ranks)
    env = {**os.environ, **extra}
    return [mpiexec, *flags, "-n", "{n}"], env


#: What Open MPI's launcher prints when it sporadically fails to start a job on a healthy
#: machine (seen here about once in a few hundred launches). Such a launch ran nothing,
#: so the launchers that start jobs unattended (``fedsheaf bench``, ``fedsheaf sweep
#: --local``, the test suite) start it once more.
START_FAILURES = (
    "PMIx server's listener thread failed to start",
    "unable to reliably start one or more daemons",
)


def failed_to_start(output: str, started: str | None = None) -> bool:
    """Whether a launch's ``output`` shows mpiexec failing to start the job in one of the
    known transient ways (:data:`START_FAILURES`).

    With ``started`` (text that the program's ranks print first), output containing it
    means the ranks did start, and then it is never a start failure.
    """
    if started is not None and started in output:
        return False
    return any(msg in output for msg in START_FAILURES)


#: CUDA_VISIBLE_DEVICES values that name no device (compared in lower case).
NO_GPUS = ("", "-1", "none", "nodevfiles", "void")


def unusable_gpus(visible: str | None = None) -> str | None:
    """Why the GPUs this process was given cannot be used, or None.

    ``visible`` defaults to ``CUDA_VISIBLE_DEVICES`` (what SLURM sets for a job with
    GPUs). When it names devices but torch sees none (a CPU-only torch build, a driver
    older than torch's CUDA), a run asked for ``train.device=auto`` would otherwise train
    on the CPU while holding the GPUs.
    """
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible is None or visible.strip().lower() in NO_GPUS or torch.cuda.is_available():
        return None
    built = torch.version.cuda and f"CUDA {torch.version.cuda}"
    built = built or (getattr(torch.version, "hip", None) and f"ROCm {torch.version.hip}")
    if not built:
        why = f"this torch ({torch.__version__}) is a CPU-only build"
    else:
        why = (
            f"torch {torch.__version__} (built for {built}) finds no usable device (a "
            "driver older than that build?)"
        )
    return (
        f"this process was given GPUs (CUDA_VISIBLE_DEVICES={visible}) but cannot use them: "
        f"{why}; fix the environment, or pass train.device=cpu to train on the CPU anyway"
    )


def singleton_hint(n_ranks: int) -> str:
    """What to add to a rank-count error when srun started several tasks that MPI did not
    join into one job (each then is a job of one rank); empty otherwise."""
    tasks = os.environ.get("SLURM_STEP_NUM_TASKS", "").strip()
    if n_ranks != 1 or not tasks.isdigit() or int(tasks) <= 1:
        return ""
    plugin = os.environ.get("SLURM_MPI_TYPE") or "the site default"
    family = plugin.split("_")[0]  # pmix_v4 is a pmix
    others = " or ".join(f"--mpi={p}" for p in ("pmix", "pmi2") if p != family)
    return (
        f" (srun started {tasks} tasks, but MPI made each a job of its own: srun's --mpi "
        f"plugin, {plugin}, does not fit the MPI that mpi4py was built with; try "
        f"srun {others} (SRUN_MPI= for the slurm/ scripts; Open MPI 5 and later speak "
        "pmix only), or build mpi4py against the site MPI)"
    )


def lone_task(n_ranks: int) -> str | None:
    """The refusal of a job of one rank that srun started as one of several tasks which MPI
    did not join (:func:`singleton_hint`); None otherwise. One rank may hold every agent
    of a graph run, so each such task would otherwise run the whole run by itself."""
    hint = singleton_hint(n_ranks)
    if not hint:
        return None
    return f"MPI made this process a job of 1 rank{hint}: each task would run the whole run alone"


def pid_namespace() -> str:
    """This process's PID namespace (``""`` where ``/proc`` cannot say): processes of one
    host that share it name each other by the same pids."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def process_state(pid: int) -> str:
    """What has become of process ``pid`` of this host (and PID namespace): ``"gone"``
    (ended, or a zombie its parent has not reaped), ``"stopped"`` (SIGSTOP, a debugger)
    or ``"running"`` (also when that cannot be told)."""
    if not Path("/proc/self/stat").is_file():  # no /proc (macOS): whether it exists at all
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return "gone"
        except OSError:
            pass
        return "running"
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "gone"
    except OSError:
        return "running"
    fields = stat.rpartition(")")[2].split()  # (the command name may hold spaces)
    state = fields[0] if fields else ""
    return {"Z": "gone", "X": "gone", "x": "gone", "T": "stopped", "t": "stopped"}.get(
        state, "running"
    )
