"""Local: every client trains its own model; nothing is shared."""

from __future__ import annotations

from fedsheaf.algorithms.federated.base import FedAvg


class Local(FedAvg):
    """FedAvg's schedule with nothing uploaded: sampled clients train alone."""

    name = "local"
    shared = "none"
