"""Run under mpiexec: rank 1 raises while the others wait in a collective."""

from fedsheaf.runtime.world import init_world
from fedsheaf.util.errors import DataError

world = init_world()
kind = __import__("sys").argv[1]
if world.rank == 1:
    if kind == "bug":
        raise RuntimeError("injected failure on rank 1")
    raise DataError("injected user error on rank 1")
world.barrier()  # would hang forever without the abort hook
