"""Theory toolkit (numpy/scipy; no torch, no MPI): Bures–Wasserstein geometry, the
federated UFM of head-only FedAvg (seed 002) and the FedRep linear model (seed 003).

Modules: ``psd`` (matrix functions), ``bures`` (BW distance, transport, barycenter),
``ufm`` (instance, φ, gap decomposition, profiled objective, moment correction),
``local`` (client solvers), ``simulate`` (federation simulator), ``instances`` (YAML
configs, random instances), ``fedrep_linear`` (FedRep vs FedAvg on y = wᵀB*ᵀx),
``plots`` and ``command`` (CLI glue for ``fedsheaf ufm`` / ``fedsheaf fedrep-linear``).
"""
