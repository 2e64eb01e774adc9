#!/usr/bin/env bash
# Run the benchmark suite (results/bench/README.md explains the targets and numbers).
# Extra arguments go to `fedsheaf bench` (see `fedsheaf bench --help`):
#   run/bench.sh                                   # every case, small size: 2 CPU cores, ~8 min
#   run/bench.sh overhead bytes --repeats 7        # some cases
#   run/bench.sh --size full --device cuda         # GPU variant: the paper's sizes on one GPU
#   run/bench.sh scaling --size full --device cpu --ranks 1,2,4,8,16   # 16-core node
#   run/bench.sh --launcher 'srun -n {n}' --size full --device cuda    # under SLURM
# Results: results/bench/<size>-<device>.{json,md}, logs in results/bench/logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
run/install.sh
export PATH="$PWD/.venv/bin:$PATH"
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
exec fedsheaf bench "$@"
