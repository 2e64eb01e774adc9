"""Accuracy metrics, per agent and over the network (SPEC §2, Eq. 22)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


@torch.no_grad()
def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of rows whose arg-max equals the label (nan for an empty set)."""
    if labels.numel() == 0:
        return float("nan")
    return float((logits.argmax(dim=1) == labels).float().mean().item())


def harmonic(a: float, b: float) -> float:
    """Harmonic mean of two accuracies (0 when either is 0)."""
    return 0.0 if a <= 0 or b <= 0 else 2 * a * b / (a + b)


def _mean(values: Sequence[float]) -> float:
    vals = [v for v in values if v == v]
    return sum(vals) / len(vals) if vals else float("nan")


def network_summary(agents: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Network aggregates of per-agent records.

    Each record holds ``private_acc``, ``comm_acc`` (mean over its neighbours),
    their ``*_val`` counterparts and ``degree``. Returns the plain mean of
    private accuracy, the plain and degree-weighted means of communication
    accuracy (isolated agents have no communication accuracy and are skipped),
    and the validation score used for λ selection: the harmonic mean of
    validation private and communication accuracy.
    """
    out: dict[str, float] = {}
    for split in ("", "_val"):
        out[f"private_acc{split}"] = _mean([a[f"private_acc{split}"] for a in agents])
        linked = [a for a in agents if a["degree"] > 0]
        out[f"comm_acc{split}"] = _mean([a[f"comm_acc{split}"] for a in linked])
        total = sum(a["degree"] for a in linked)
        out[f"comm_acc_deg{split}"] = (
            sum(a["degree"] * a[f"comm_acc{split}"] for a in linked) / total
            if total
            else float("nan")
        )
    out["score_val"] = (
        harmonic(out["private_acc_val"], out["comm_acc_val"])
        if any(a["degree"] for a in agents)
        else out["private_acc_val"]
    )
    return out
