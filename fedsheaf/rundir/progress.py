"""Rank 0's side of a run: gather per-agent records, log progress, write metrics."""

from __future__ import annotations

from typing import Any

from fedsheaf.algorithms.metrics import network_summary
from fedsheaf.rundir.files import RunDir
from fedsheaf.rundir.tensorboard import Board
from fedsheaf.util.units import decimals, human_bytes


class Recorder:
    """Gathers every rank's epoch record; rank 0 prints a line and appends metrics.jsonl
    (and, with ``output.tensorboard``, writes it to its :attr:`board` too).

    Parameters
    ----------
    world:
        The runtime world (``gather``, ``is_root``, ``log``).
    run_dir:
        Where rank 0 writes (None on other ranks).
    epochs:
        Total epochs, for the progress line.
    """

    def __init__(self, world: Any, run_dir: RunDir | None, epochs: int) -> None:
        self.world, self.run_dir, self.epochs = world, run_dir, epochs
        self.last: dict[str, Any] | None = None
        self.history: list[dict[str, Any]] = []
        #: TensorBoard's copy of the records (rank 0, ``output.tensorboard=true``)
        self.board: Board | None = None

    def close(self) -> None:
        """Close the TensorBoard writer, if there is one (its events are on disk)."""
        if self.board is not None:
            self.board.close()
            self.board = None

    def restore(self, history: list[dict[str, Any]]) -> None:
        """Continue after a checkpoint whose metrics so far were ``history``."""
        self.history = list(history)
        self.last = next((r for r in reversed(self.history) if "private_acc" in r), None)

    def epoch(self, record: dict[str, Any]) -> None:
        """Take this rank's one agent's record of the epoch (see :meth:`rank_epoch`)."""
        self.rank_epoch([record])

    def rank_epoch(self, mine: list[dict[str, Any]], mpi_bytes: int | None = None) -> None:
        """Take the epoch records of this rank's agents (and the bytes the rank sent through
        MPI in the epoch); rank 0 gathers every rank's and writes the epoch's line, agents
        in id order (whatever ranks held them)."""
        gathered = self.world.gather((mine, mpi_bytes))
        if not self.world.is_root:
            return
        records = sorted((r for rank, _ in gathered for r in rank), key=lambda r: r.get("agent", 0))
        record = records[0]
        line: dict[str, Any] = {
            "epoch": record["epoch"],
            "loss": sum(r["loss"] for r in records) / len(records),
            "seconds": max(r["seconds"] for r in records),
            "bytes_sent": sum(r["bytes_sent"] for r in records),
        }
        for key in ("server_bytes_sent", "server_bytes_received"):  # centralized baselines
            if key in records[0]:
                line[key] = sum(r[key] for r in records)
        if all(sent is not None for _, sent in gathered):  # (depends on the placement)
            line["mpi_bytes_sent"] = sum(sent for _, sent in gathered)
        evaluated = "private_acc" in records[0]
        if evaluated:
            line.update(network_summary(records))
            line["eval_bytes_sent"] = sum(r["eval_bytes_sent"] for r in records)
        line["agents"] = records
        if self.run_dir is not None:
            self.run_dir.append_metrics(line)
        if self.board is not None:
            self.board.write(line)
        self.history.append(line)
        msg = (
            f"epoch {line['epoch']:>3}/{self.epochs}  loss {line['loss']:.4f}  "
            f"{line['seconds']:.1f}s  {sent(line)}"
        )
        if "server_bytes_sent" in line:
            up = human_bytes(line["server_bytes_sent"], compact=True)
            down = human_bytes(line["server_bytes_received"], compact=True)
            msg += f" (server: up {up}, down {down})"
        if evaluated:
            self.last = line
            msg += "  " + accuracies(line)
        self.world.log(msg)


def sent(line: dict[str, Any]) -> str:
    """``sent 1.2 kB``: what the agents sent in an epoch; in an evaluated epoch also what
    the evaluation sent apart (``sent 0.0 kB training + 53.29 MB evaluation``: test
    latents along the edges, and for noncoop the pilot features its maps are fitted on)."""
    text = f"sent {human_bytes(line['bytes_sent'], compact=True)}"
    if "eval_bytes_sent" in line:
        text += f" training + {human_bytes(line['eval_bytes_sent'], compact=True)} evaluation"
    return text


def accuracies(line: dict[str, Any]) -> str:
    """``private 0.912  comm 0.847 (degree-weighted 0.850)``: the accuracies of a network
    record, in words where no agent has a neighbour (communication accuracy is undefined
    then: NaN in the record)."""
    private = f"private {line['private_acc']:.3f}"
    comm = line["comm_acc"]
    if not isinstance(comm, int | float) or comm != comm:  # NaN (None once written)
        return f"{private}  comm – (no agent has a neighbour)"
    return f"{private}  comm {comm:.3f} (degree-weighted {line['comm_acc_deg']:.3f})"


def agent_table(records: list[dict[str, Any]]) -> str:
    """Plain-text table of per-agent private and communication accuracy."""
    rows = ["agent    d  deg  private    comm", "-----  ---  ---  -------  ------"]
    for r in sorted(records, key=lambda r: r["agent"]):
        rows.append(
            f"{r['agent']:>5}  {r['dim']:>3}  {r['degree']:>3}  {r['private_acc']:>7.3f}"
            f"  {decimals(r['comm_acc']):>6}"
        )
    return "\n".join(rows)
