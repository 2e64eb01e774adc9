"""One job of ``fedsheaf run``, on every rank: read the config, claim the run directory,
pick devices, fetch data, then hand over to the driver of the run's family."""

from __future__ import annotations

import sys
from pathlib import Path

from fedsheaf.launch.decentralized import run_decentralized
from fedsheaf.launch.hub import run_hub
from fedsheaf.launch.server import run_server_based
from fedsheaf.rundir.lifecycle import (
    claim_run_dir,
)
from fedsheaf.rundir.preflight import (
    ignored_warning,
    run_config,
)
from fedsheaf.runtime import experiment, stop_request
from fedsheaf.runtime.world import (
    choose_device,
    init_world,
    leaving,
    refuse_unusable_gpus,
    watch_steps,
)
from fedsheaf.util.errors import FedsheafError


def main(config_path: str | None, overrides: list[str], resume_dir: str | None = None) -> int:
    """Entry point of ``fedsheaf run`` on every rank (``resume_dir``: ``--resume RUN_DIR``)."""
    world = init_world()
    cfg = world.agree(lambda: run_config(config_path, overrides, resume_dir))
    # again, now MPI is up
    stop_request.install(checkpoints=cfg.checkpoint.every > 0, announce=world.is_root)
    world.agree(lambda: watch_steps(cfg.train.step_timeout))  # (armed once training begins)
    warning = ignored_warning(cfg)
    if warning is not None:
        world.warn(warning)
    run_path = Path(cfg.output.dir) / cfg.run_name()
    claim = world.agree(lambda: claim_run_dir(cfg, run_path), root_only=True)
    note = world.bcast(claim)
    if note is not None:
        world.log(note)
        leaving()
        return 0
    if cfg.train.device != "auto":
        world.device = world.agree(lambda: choose_device(cfg.train.device, world.local_rank))
    else:  # a collective: every rank takes part, whichever device it found
        world.agree(lambda: refuse_unusable_gpus() if world.device.type == "cpu" else None)
    if cfg.data.download:  # rank 0 first, alone; then one rank per node (node-local roots)
        world.agree(lambda: experiment.fetch_data(cfg), root_only=True)
        if world.local_size < world.size:  # several nodes
            first_on_node = world.local_rank == 0 and not world.is_root
            world.agree(lambda: experiment.fetch_data(cfg) if first_on_node else None)
    try:
        if cfg.decentralized:
            run_decentralized(cfg, world)
        elif cfg.hub_based:  # FedProto, FedMuscle: agents on a graph plus a server rank
            run_hub(cfg, world)
        else:
            run_server_based(cfg, world)
    except FedsheafError as exc:
        # Raised mid-run on some ranks (e.g. a diverged loss) while the others wait in a
        # collective: the runtime's abort hook names this rank and ends the whole job.
        sys.excepthook(type(exc), exc, exc.__traceback__)
    except stop_request.StopRequested:  # on every rank at once, rank 0 has said so
        leaving()
        return stop_request.exit_status()  # (0 under a launcher: a planned stop, no crash)
    world.barrier()
    leaving()
    return 0
