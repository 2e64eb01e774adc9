"""The paper's agent architectures (SPEC §3, Tables 2 and 3) as plain data.

Each :class:`AgentSpec` lists the CNN block widths of the encoder (the latent
dimension is the last width), the MLP widths of the head (after colouring), the
dropout rate and the agent's target classes. The graphs built from these tables
live in :func:`mnist15_graph` and :func:`table3_pair_graph`.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsheaf.graphs import Graph, class_overlap_graph, pair
from fedsheaf.util.errors import ConfigError


@dataclass(frozen=True)
class AgentSpec:
    """Architecture and task of one agent.

    Attributes
    ----------
    encoder:
        Output widths of the CNN blocks; the last one is the latent dimension d.
    head:
        Hidden widths of the head's MLP (the output layer maps to the logits).
    dropout:
        Dropout rate used in the head.
    classes:
        Target classes C_i of the agent (sorted).
    """

    encoder: tuple[int, ...]
    head: tuple[int, ...]
    dropout: float
    classes: tuple[int, ...]

    @property
    def dim(self) -> int:
        """Latent dimension d (last encoder width)."""
        return self.encoder[-1]


def _spec(encoder: str, head: str, dropout: float, classes: str) -> AgentSpec:
    def ints(text: str) -> tuple[int, ...]:
        return tuple(int(x) for x in text.split(","))

    return AgentSpec(ints(encoder), ints(head), dropout, ints(classes))


#: The 15 agents of SPEC Table 2 (MNIST, 100 epochs), indexed by agent id.
TABLE2: tuple[AgentSpec, ...] = (
    _spec("32,64,128", "256,128,64", 0.30, "4,5,6,7,8"),
    _spec("32,64,128,224", "120", 0.10, "0,1,2,3,4"),
    _spec("16,32,64", "128", 0.20, "0,1,2,3,4,5"),
    _spec("64,128,128", "256,128", 0.25, "4,5,6,7,8,9"),
    _spec("32,48,96,192", "192,96", 0.30, "0,1,2,7,8,9"),
    _spec("24,48,96", "96", 0.15, "2,3,4,5,6"),
    _spec("32,64,128,256", "256", 0.40, "1,2,3,4,5,6"),
    _spec("24,48,96,144", "64,32", 0.10, "3,4,5,6,7"),
    _spec("48,96,160", "160,80", 0.20, "0,2,4,6,8"),
    _spec("32,80", "100", 0.05, "5,6,7,8,9"),
    _spec("40,80,120", "120,60", 0.20, "1,2,3,4,5"),
    _spec("48,96,192,240", "256,128", 0.20, "0,1,2,8,9"),
    _spec("20,40,60,80", "80", 0.20, "3,4,5,6,7,8"),
    _spec("32,64,96", "192,96", 0.25, "1,4,6,8,9"),
    _spec("56,112,160", "128", 0.10, "0,1,2,3,7"),
)

# SPEC Table 3: d -> ((agent 0 encoder, head), (agent 1 encoder, head)).
_TABLE3: dict[int, tuple[tuple[str, str], tuple[str, str]]] = {
    16: (("4,8,16", "8,4"), ("8,16", "8")),
    32: (("8,16,32", "16,8"), ("16,32", "16")),
    64: (("16,32,64", "32,16"), ("32,64", "32")),
    128: (("32,64,128", "64,32"), ("64,128", "64")),
    256: (("64,128,256", "128,64"), ("128,256", "128")),
    512: (("64,128,256,512", "128,64"), ("64,256,512", "128,64")),
}

#: Latent dimensions available in Table 3.
TABLE3_DIMS: tuple[int, ...] = tuple(_TABLE3)


def table3(d: int) -> tuple[AgentSpec, AgentSpec]:
    """The two agents of SPEC Table 3 at latent dimension ``d``.

    Agent 0 targets classes 4..9 with dropout 0.3, agent 1 classes 0..5 with
    dropout 0.1. Raises :class:`ConfigError` if ``d`` is not in the table.
    """
    if isinstance(d, bool) or d not in _TABLE3:
        allowed = ", ".join(str(x) for x in TABLE3_DIMS)
        raise ConfigError(f"Table 3 has no latent dimension d={d!r}; choose one of {allowed}")
    (enc0, head0), (enc1, head1) = _TABLE3[d]
    return (
        _spec(enc0, head0, 0.3, "4,5,6,7,8,9"),
        _spec(enc1, head1, 0.1, "0,1,2,3,4,5"),
    )


def mnist15_graph(density: float = 0.4) -> Graph:
    """Class-overlap graph of the 15 Table-2 agents (SPEC §3, density 40%)."""
    return class_overlap_graph(
        [a.classes for a in TABLE2], [a.dim for a in TABLE2], density=density, name="mnist15"
    )


def table3_pair_graph(d: int) -> Graph:
    """The two Table-3 agents at latent dimension ``d``, joined by one edge."""
    agents = table3(d)
    return pair([a.dim for a in agents], classes=[a.classes for a in agents], name="pair")
