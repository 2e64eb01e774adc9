"""One benchmark launch, run on every rank: ``python -m fedsheaf.ops.bench.worker SPEC OUT``.

``SPEC`` is a JSON file written by ``fedsheaf bench`` (see :mod:`fedsheaf.ops.bench.plan`):
the cases to run and their settings. Rank 0 writes ``{"spec", "environment",
"results": {case: result}, "memory"}`` to ``OUT`` (``memory``: every rank's peak, at the
end of all its cases, :func:`fedsheaf.util.memory.per_rank`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fedsheaf.ops.bench.clients import CASES as CLIENT_CASES
from fedsheaf.ops.bench.decentralized import CASES as DECENTRALIZED_CASES
from fedsheaf.ops.bench.pilot_cost import CASES as PILOT_CASES
from fedsheaf.ops.bench.placement import CASES as PLACEMENT_CASES
from fedsheaf.ops.bench.rank_tools import environment
from fedsheaf.runtime.world import exit_at_once, init_world, refuse_unusable_gpus
from fedsheaf.util.atomic import atomic_write_json

CASES = {**DECENTRALIZED_CASES, **PILOT_CASES, **CLIENT_CASES, **PLACEMENT_CASES}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        sys.stderr.write("usage: python -m fedsheaf.ops.bench.worker SPEC.json OUT.json\n")
        return 2
    spec: dict[str, Any] = json.loads(Path(args[0]).read_text())
    world = init_world(spec.get("device", "auto"))
    if spec.get("device", "auto") == "auto":  # not a CPU measurement labelled as a GPU node's
        world.agree(lambda: refuse_unusable_gpus() if world.device.type == "cpu" else None)
    env = environment(world)
    results = {}
    for case in spec["cases"]:
        world.log(f"fedsheaf bench: {spec['label']}: {case} on {world.size} ranks")
        results[case] = CASES[case](world, spec)
    peaks = world.peak_memory()
    if world.is_root and peaks is not None:
        out = {"spec": spec, "environment": env, "results": results, "memory": peaks}
        atomic_write_json(args[1], out)
    world.barrier()
    return 0


if __name__ == "__main__":
    exit_at_once(main())
