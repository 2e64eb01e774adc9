"""Run under mpiexec: print the torch threads each rank ended up with."""

import torch

from fedsheaf.runtime.world import init_world

world = init_world()
print(f"rank {world.rank}: {torch.get_num_threads()} torch threads, world says {world.threads}")
