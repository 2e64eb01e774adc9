"""Operations tooling around runs: studies and sweeps, reports, watch, processes and the
benchmarks (``bench``)."""
