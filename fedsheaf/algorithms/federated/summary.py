"""Round records -> the run's score, summary and final table (no MPI, no I/O)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedsheaf.algorithms.federated.schedule import Algorithm


def round_record(evals: np.ndarray, n_clients: int) -> dict[str, Any]:
    """Accuracy fields of one evaluation from rows ``(client, correct, total, loss_sum)``.

    ``acc`` is the mean over clients of their local test accuracy (the FedRep
    score's per-round value); ``acc_pooled`` weighs clients by test-set size.
    """
    rows = evals[np.argsort(evals[:, 0], kind="stable")]
    if rows.shape[0] != n_clients or np.any(rows[:, 0] != np.arange(n_clients)):
        raise RuntimeError("evaluation rows do not cover every client exactly once")
    per_client = rows[:, 1] / np.maximum(rows[:, 2], 1)
    total = rows[:, 2].sum()
    return {
        "acc": float(per_client.mean()),
        "acc_pooled": float(rows[:, 1].sum() / total),
        "acc_min": float(per_client.min()),
        "test_loss": float(rows[:, 3].sum() / total),
        "client_acc": [round(float(a), 4) for a in per_client],
    }


def summarize(
    history: list[dict[str, Any]], algorithm: Algorithm, eval_last: int
) -> dict[str, Any]:
    """Score and headline numbers of a finished run.

    ``acc_last`` is the mean of ``acc`` over the evaluated rounds among the last
    ``eval_last`` training rounds (the final round excluded); ``final_acc`` is
    the accuracy after the final round, if the algorithm has one. ``score`` is
    ``final_acc`` for algorithms defined by their final round (FedAvg+FT) and
    ``acc_last`` otherwise.
    """
    main = [r for r in history if not r.get("final")]
    final = next((r for r in history if r.get("final")), None)
    n_rounds = len(main)
    first = max(1, n_rounds - eval_last + 1)
    window = [r for r in main if r["round"] >= first and "acc" in r]
    acc_last = float(np.mean([r["acc"] for r in window])) if window else float("nan")
    final_acc = final["acc"] if final is not None else None
    last_eval = final if final is not None else (window[-1] if window else None)
    use_final = algorithm.score_after_final and final_acc is not None
    return {
        "score": final_acc if use_final else acc_last,
        "score_is": "final_acc" if use_final else f"mean acc over rounds {first}-{n_rounds}",
        "acc_last": acc_last,
        "score_rounds": [first, n_rounds],
        "final_acc": final_acc,
        "client_acc": last_eval["client_acc"] if last_eval else [],
        "rounds": n_rounds,
    }


def result_table(summary: dict[str, Any]) -> str:
    """Plain-text block printed at the end of a run."""
    accs = np.asarray(summary["client_acc"], dtype=float)
    final = summary["final_acc"]
    lo, hi = summary["score_rounds"]
    window = f"mean local test accuracy, rounds {lo}-{hi}"
    scored_final = summary["score_is"] == "final_acc"
    rows = [
        f"algorithm   {summary['algorithm']}  ({summary['n_clients']} clients, "
        f"{summary['rounds']} rounds)",
        f"acc         {summary['acc_last']:.4f}  ({window})" if scored_final else "",
        f"final acc   {final:.4f}  (after the final round)" if final is not None else "",
        f"score       {summary['score']:.4f}  ({'final acc' if scored_final else window})",
    ]
    if accs.size:
        q = np.quantile(accs, [0.0, 0.5, 1.0])
        rows.append(f"clients     min {q[0]:.3f}  median {q[1]:.3f}  max {q[2]:.3f}")
    return "\n".join(r for r in rows if r)
