"""What the pilot pass alone costs: the floor under target 1 (one rank, no MPI traffic).

For each agent's architecture, on rank 0 and its device, three training steps are
timed in isolation (alternating, repeated, medians):

* ``plain`` — cross-entropy on a private batch (the non-cooperative step);
* ``separate`` — the same plus the pilot batch through the encoder in its own call and
  a penalty on it (Sheaf-FRL's step as implemented, minus exchange and maps);
* ``batched`` — private and pilot batches through the encoder in *one* call, split
  afterwards (what a fused implementation would do; BatchNorm and whitening then see
  batch statistics of the union, so it is a different algorithm — measured, not used).

``separate / plain`` is the epoch-time ratio Sheaf-FRL cannot beat while it encodes K
pilots per step; ``batched / plain`` shows whether fusing the two calls would help on
this device (it does when small batches leave the device idle, not when it is busy).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from fedsheaf.algorithms.base import build_optimizer
from fedsheaf.ops.bench.decentralized import load
from fedsheaf.ops.bench.formulas import alternate, ratio
from fedsheaf.ops.bench.rank_tools import idle_barrier, sync
from fedsheaf.runtime import experiment
from fedsheaf.runtime.world import World
from fedsheaf.util.seeding import torch_generator

STEPS = ("plain", "separate", "batched")


def step_functions(
    model: Any, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, p: torch.Tensor
) -> dict[str, Callable[[], None]]:
    """The three steps on fixed tensors (private ``x, y``, pilots ``p``)."""
    target = torch.zeros(model.latent_dim, len(p), device=p.device)
    lam = 0.1 / model.latent_dim

    def finish(loss: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def plain() -> None:
        finish(F.cross_entropy(model(x), y))

    def separate() -> None:
        loss = F.cross_entropy(model(x), y)
        a = model.encode(p).T
        finish(loss + lam / (2 * len(p)) * (a - target).pow(2).sum())

    def batched() -> None:
        z = model.encode(torch.cat([x, p]))
        loss = F.cross_entropy(model.decode(z[: len(x)]), y)
        a = z[len(x) :].T
        finish(loss + lam / (2 * len(p)) * (a - target).pow(2).sum())

    return {"plain": plain, "separate": separate, "batched": batched}


def time_steps(
    steps: dict[str, Callable[[], None]], device: torch.device, repeats: int, inner: int
) -> dict[str, float]:
    """Median seconds per step of each function (``inner`` steps per sample)."""
    for fn in steps.values():  # warm-up
        for _ in range(2):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in steps}
    for order in alternate(list(steps), repeats):
        for name in order:
            sync(device)
            start = time.perf_counter()
            for _ in range(inner):
                steps[name]()
            sync(device)
            samples[name].append((time.perf_counter() - start) / inner)
    return {k: statistics.median(v) for k, v in samples.items()}


def pilot_cost(world: World, spec: dict[str, Any]) -> dict[str, Any] | None:
    cfg = load(world, spec, "algorithm=sheaf_frl")
    ds, _ = world.agree(lambda: experiment.load_and_partition(cfg))
    if not world.is_root:
        idle_barrier(world.comm)
        return None
    b, k, device = cfg.train.batch_size, cfg.sheaf.pilot_batch, world.device
    gen = torch_generator(cfg.seed, "pilot-cost-batch")
    idx = torch.randperm(len(ds.y), generator=gen)[: b + k]
    x, y, p = ds.take(idx[:b]).to(device), ds.y[idx[:b]].to(device), ds.take(idx[b:]).to(device)
    agents = spec.get("pilot_agents") or list(range(len(cfg.agents)))
    rows = []
    for i in agents:
        model = experiment.agent_model(cfg, ds, i, device)
        model.train()
        optimizer = build_optimizer(cfg.train, model.parameters())
        med = time_steps(
            step_functions(model, optimizer, x, y, p),
            device,
            spec.get("pilot_repeats", 5),
            spec.get("pilot_inner", 3),
        )
        rows.append(
            {
                "agent": i,
                "dim": cfg.agents[i].dim,
                "seconds": med,
                "separate_over_plain": ratio(med["separate"], med["plain"]),
                "batched_over_plain": ratio(med["batched"], med["plain"]),
            }
        )
    idle_barrier(world.comm)
    slowest = {key: max(r["seconds"][key] for r in rows) for key in STEPS}
    return {
        "label": spec["label"],
        "config": spec["config"],
        "batch_size": b,
        "pilot_batch": k,
        "threads": torch.get_num_threads(),
        "agents": rows,
        # the network's step is paced by its slowest agent
        "slowest_agent": slowest,
        "floor_ratio": ratio(slowest["separate"], slowest["plain"]),
        "batched_ratio": ratio(slowest["batched"], slowest["plain"]),
    }


CASES = {"pilot_cost": pilot_cost}
