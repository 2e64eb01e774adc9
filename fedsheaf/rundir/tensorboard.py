"""TensorBoard event files beside metrics.jsonl (``output.tensorboard=true``).

The rank that writes a run's ``metrics.jsonl`` also writes each record's numbers as
TensorBoard scalars under ``RUN_DIR/tb/`` (:data:`~fedsheaf.rundir.files.TENSORBOARD_DIR`),
at step = the record's epoch (decentralized and hub runs) or round (server-based runs).
``metrics.jsonl`` stays the source of truth (``fedsheaf report`` reads it); the event
files are a view of it for TensorBoard (``tensorboard --logdir RUN_DIR/tb``, or the
parent of many runs).

Tags (:func:`scalars`): ``loss``, ``accuracy/private``, ``accuracy/comm``,
``accuracy/comm_degree_weighted``, ``validation/...``, ``bytes/sent`` (training),
``bytes/eval_sent``, ``time/seconds``; per agent ``agents/private/<i>``,
``agents/comm/<i>``, ``agents/loss/<i>``. Server-based: ``accuracy/mean``,
``accuracy/pooled``, ``accuracy/min``, ``bytes/up``, ``bytes/down``, ``mse/test`` ...,
per client ``clients/accuracy/<c>``; a final fine-tuning round's numbers under
``after_fine_tuning/``. A custom-scalars layout groups each agent's (client's) curves
into one chart.

Resuming appends a new event file that starts with a purge at the first new step
(``SummaryWriter(purge_step=...)``): TensorBoard drops what an earlier launch wrote from
that step on (epochs trained after the checkpoint the run resumed from), so every step
is read once. A run that had no event files yet (``output.tensorboard`` turned on when
resuming) first gets the records it already has.

The ``tensorboard`` package is an optional extra (``pip install 'fedsheaf[tensorboard]'``);
:func:`require` refuses the option without it, before the job trains.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fedsheaf.rundir.files import EVENT_FILES, TENSORBOARD_DIR
from fedsheaf.util.errors import ConfigError

#: How to get the package (the one line :func:`require` says).
INSTALL = "pip install 'fedsheaf[tensorboard]' (or pip install tensorboard)"

#: Record key -> tag, for the numbers of a network (decentralized) or server record.
TAGS = {
    "loss": "loss",
    "seconds": "time/seconds",
    "train_seconds": "time/train_seconds",
    "bytes_sent": "bytes/sent",
    "eval_bytes_sent": "bytes/eval_sent",
    "server_bytes_sent": "bytes/server_up",
    "server_bytes_received": "bytes/server_down",
    "bytes_up": "bytes/up",
    "bytes_down": "bytes/down",
    "private_acc": "accuracy/private",
    "comm_acc": "accuracy/comm",
    "comm_acc_deg": "accuracy/comm_degree_weighted",
    "private_acc_val": "validation/private",
    "comm_acc_val": "validation/comm",
    "comm_acc_deg_val": "validation/comm_degree_weighted",
    "score_val": "validation/score",
    "acc": "accuracy/mean",
    "acc_pooled": "accuracy/pooled",
    "acc_min": "accuracy/min",
    "test_loss": "test_loss",
    "test_mse": "mse/test",
    "train_mse": "mse/train",
    "objective": "objective",
}

#: Per-agent record key -> tag prefix (``agents/private/3``).
AGENT_TAGS = {"private_acc": "agents/private", "comm_acc": "agents/comm", "loss": "agents/loss"}

#: Per-client list in a server record -> tag prefix (``clients/accuracy/3``).
CLIENT_TAGS = {"client_acc": "clients/accuracy", "client_mse": "clients/mse"}

#: Record keys that are no number to draw.
NOT_DRAWN = {"epoch", "round", "final", "selected", "agent", "dim", "degree"}

#: The custom-scalars layout: every agent's (client's) curve of one number in one chart.
LAYOUT = {
    "agents": {
        "private accuracy per agent": ["Multiline", [r"agents/private/\d+"]],
        "communication accuracy per agent": ["Multiline", [r"agents/comm/\d+"]],
        "training loss per agent": ["Multiline", [r"agents/loss/\d+"]],
    },
    "clients": {
        "accuracy per client": ["Multiline", [r"clients/accuracy/\d+"]],
        "test MSE per client": ["Multiline", [r"clients/mse/\d+"]],
    },
}


def available() -> bool:
    """Whether the ``tensorboard`` package can be imported."""
    try:
        return importlib.util.find_spec("tensorboard") is not None
    except (ImportError, ValueError):  # a broken install, or a module without a spec
        return False


def require(enabled: bool) -> None:
    """Refuse ``output.tensorboard=true`` where the ``tensorboard`` package is missing."""
    if enabled and not available():
        raise ConfigError(
            f"output.tensorboard=true needs the tensorboard package, which is not installed: "
            f"{INSTALL}; or set output.tensorboard=false"
        )


def _number(value: Any) -> float | None:
    """``value`` as a finite float (None: not a number, or NaN/inf, which no chart draws)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """Tag -> value of the numbers of one metrics record (see the module's docstring).

    Known keys get their :data:`TAGS` names, other top-level numbers (head-only FedAvg's
    Gram errors) ``extra/<key>``; per-agent records and per-client lists give one tag per
    agent (client). Values that are not finite numbers are left out.
    """
    out: dict[str, float] = {}
    for key, value in record.items():
        if key in NOT_DRAWN:
            continue
        if key == "agents" and isinstance(value, list):
            for agent in value:
                for field, prefix in AGENT_TAGS.items():
                    number = _number(agent.get(field))
                    if number is not None and "agent" in agent:
                        out[f"{prefix}/{agent['agent']}"] = number
        elif key in CLIENT_TAGS and isinstance(value, list):
            for client, item in enumerate(value):
                number = _number(item)
                if number is not None:
                    out[f"{CLIENT_TAGS[key]}/{client}"] = number
        else:
            number = _number(value)
            if number is not None:
                out[TAGS.get(key, f"extra/{key}")] = number
    if record.get("final"):  # after a final fine-tuning round: no round of training
        out = {f"after_fine_tuning/{tag}": v for tag, v in out.items()}
    return out


def event_files(log_dir: Path) -> list[Path]:
    """The TensorBoard event files in ``log_dir`` (sorted by name: by creation time)."""
    return sorted(log_dir.glob(EVENT_FILES)) if log_dir.is_dir() else []


class Board:
    """The event files of one run: :meth:`write` each metrics record as it is appended.

    Parameters
    ----------
    run_path:
        The run directory (events go to its ``tb/``).
    step_key:
        ``"epoch"`` or ``"round"``: the record key that is the step.
    first_step:
        The first step this launch records (1, or the checkpoint's step + 1 when resuming).
    history:
        The records the run already has (metrics.jsonl up to the checkpoint): written
        first where ``tb/`` holds no event files yet.
    """

    def __init__(
        self,
        run_path: Path,
        step_key: str,
        first_step: int,
        history: Iterable[dict[str, Any]] = (),
    ) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.path = run_path / TENSORBOARD_DIR
        self.step_key = step_key
        earlier = event_files(self.path)
        # (an earlier launch's steps from first_step on are purged: rewritten below)
        self.writer = SummaryWriter(str(self.path), purge_step=first_step if earlier else None)
        if not earlier:
            group = "agents" if step_key == "epoch" else "clients"
            self.writer.add_custom_scalars({group: LAYOUT[group]})
            for record in history:
                if isinstance(record.get(step_key), int) and record[step_key] < first_step:
                    self.write(record, flush=False)
            self.writer.flush()

    def write(self, record: dict[str, Any], flush: bool = True) -> None:
        """Add the scalars of ``record`` at its step (flushed: a killed job loses none)."""
        step = int(record[self.step_key])
        for tag, value in scalars(record).items():
            self.writer.add_scalar(tag, value, step)
        if flush:
            self.writer.flush()

    def close(self) -> None:
        self.writer.close()
