"""What the server does with the clients' uploads: the :class:`Aggregator` interface.

Each round the server hands its aggregator the shared vector the clients started from,
the sampled clients' uploaded vectors (in client-id order) and their training-sample
counts; the aggregator returns the new shared vector. One that keeps state across
rounds (a server optimiser's moments) saves it with :meth:`Aggregator.state_dict`; the
server's checkpoint holds it, and a resumed run continues bitwise.

A user's aggregator need not subclass :class:`Aggregator`: any object with
``aggregate(global_params, updates, counts, round_)`` does (``state_dict`` and
``load_state_dict`` are then optional: without them it is taken to hold no state).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from fedsheaf.algorithms.federated.protocol import mean64
from fedsheaf.util.errors import CheckpointError


class Aggregator:
    """The server's rule for the new shared parameters (stateless: plain FedAvg).

    Subclasses override :meth:`aggregate`, and :meth:`state_dict` /
    :meth:`load_state_dict` when they keep state across rounds.

    Parameters
    ----------
    weighted:
        Whether :meth:`mean` weights the uploads by sample count; ``None`` (the default)
        takes ``federated.weighted`` (set when the server builds the aggregator).
    """

    def __init__(self, weighted: bool | None = None) -> None:
        self.weighted = weighted

    def aggregate(
        self,
        global_params: np.ndarray,
        updates: Sequence[np.ndarray],
        counts: Sequence[int],
        round_: int,
    ) -> np.ndarray:
        """The new shared vector.

        Parameters
        ----------
        global_params:
            The flat float32 vector (P,) the clients of this round started from.
        updates:
            One flat float32 vector (P,) per sampled client, in client-id order: what the
            client uploaded after its local training (its parameters, not a difference).
        counts:
            Each client's number of training samples, in the same order.
        round_:
            The round, 1 for the first.

        Returns
        -------
        numpy.ndarray
            The new flat vector (P,); the server stores and broadcasts it as float32.
        """
        raise NotImplementedError

    def mean(self, updates: Sequence[np.ndarray], counts: Sequence[int]) -> np.ndarray:
        """The float64 mean of ``updates``, weighted by ``counts`` if :attr:`weighted`
        (summed in client order, as plain FedAvg sums)."""
        return mean64(np.asarray(updates), np.asarray(counts) if self.weighted else None)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps (numpy arrays, numbers, strings, lists, dicts)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        if state:
            raise CheckpointError(
                f"the checkpoint holds aggregator state {sorted(state)}, but "
                f"{type(self).__name__} keeps none"
            )


def to_checkpoint(value: Any) -> Any:
    """``value`` as a checkpoint may hold it (``torch.load(weights_only=True)``): numpy
    arrays as tensors (bitwise), numpy scalars as Python numbers, containers walked."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value, copy=True))
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {k: to_checkpoint(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_checkpoint(v) for v in value)
    return value


def from_checkpoint(value: Any) -> Any:
    """Undo :func:`to_checkpoint`: tensors come back as numpy arrays."""
    if isinstance(value, torch.Tensor):
        return value.numpy().copy()
    if isinstance(value, Mapping):
        return {k: from_checkpoint(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(from_checkpoint(v) for v in value)
    return value


def aggregator_state(aggregator: Any) -> dict[str, Any]:
    """``aggregator``'s state for a checkpoint ({} for one without ``state_dict``)."""
    method = getattr(aggregator, "state_dict", None)
    return to_checkpoint(dict(method())) if callable(method) else {}


def load_aggregator_state(aggregator: Any, state: Mapping[str, Any]) -> None:
    """Restore :func:`aggregator_state` into ``aggregator``."""
    method = getattr(aggregator, "load_state_dict", None)
    if callable(method):
        method(from_checkpoint(dict(state)))
    elif state:
        raise CheckpointError(
            f"the checkpoint holds aggregator state {sorted(state)}, but the aggregator "
            f"{type(aggregator).__name__} has no load_state_dict()"
        )
