"""Algorithms: one file each over a shared base."""

from fedsheaf.algorithms.base import DecentralizedAlgorithm
from fedsheaf.algorithms.noncoop import NonCooperative
from fedsheaf.algorithms.sheaf_frl import SheafFRL

DECENTRALIZED: dict[str, type[DecentralizedAlgorithm]] = {
    cls.name: cls for cls in (SheafFRL, NonCooperative)
}
