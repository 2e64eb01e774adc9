"""Non-cooperative baseline (SPEC §3): independent training, post-hoc alignment.

Training is the base loop with no regulariser. For communication accuracy each
agent fits ZCA whitening on its training latents, the neighbours exchange their
whitened pilot latents (all of them, at every evaluation: evaluation traffic that
Sheaf-FRL, which keeps the maps it trained, does not have), and every edge gets the
same closed-form map as Sheaf-FRL; a receiver colours transported latents back with
its own ZCA.
"""

from __future__ import annotations

import torch

from fedsheaf.algorithms.base import DecentralizedAlgorithm
from fedsheaf.sheaf.maps import stiefel_map
from fedsheaf.sheaf.zca import ZCA, zca_fit


class NonCooperative(DecentralizedAlgorithm):
    name = "noncoop"
    zca: ZCA
    maps: dict[int, torch.Tensor]

    def prepare_transport(self) -> None:
        a = self.agent
        self.zca = zca_fit(self.latents(a.data.x_train))
        own = self.to_edge_space(self.latents(a.data.x_pilot)).T  # d_i × n_pilots
        shapes = [(a.graph.dims[j], own.shape[1]) for j in self.nbr.neighbours]
        received = self.nbr.exchange(own, shapes=shapes, device=a.device)
        self.maps = {
            j: stiefel_map(own, a_j) if self.is_head[j] else stiefel_map(a_j, own)
            for j, a_j in zip(self.nbr.neighbours, received, strict=True)
        }

    def to_edge_space(self, z: torch.Tensor) -> torch.Tensor:
        return self.zca.whiten(z)

    def from_edge_space(self, z: torch.Tensor) -> torch.Tensor:
        return self.zca.colour(z)

    def edge_map(self, j: int) -> torch.Tensor:
        return self.maps[j]
