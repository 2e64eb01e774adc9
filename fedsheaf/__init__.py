"""fedsheaf: MPI-native federated representation learning (Sheaf-FRL, FedAvg family)."""

__version__ = "0.1.0"
