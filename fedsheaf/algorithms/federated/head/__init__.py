"""Head-only FedAvg (seed 002): private backbones, a shared linear head, the UFM
objective, alignment and moment correction, and the Gram tracking."""
