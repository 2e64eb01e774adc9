#!/usr/bin/env bash
# Local launcher: run/mpirun.sh N COMMAND... runs COMMAND on N MPI ranks with the
# flags a laptop or CI box needs: --oversubscribe and one torch thread per rank
# when N exceeds the physical cores (Open MPI's slots: hardware threads do not
# count), Open MPI's run-as-root permission when root, and Open MPI's transports
# without libfabric's (OMPI_MCA_btl=^ofi unless set: it probes for network hardware,
# 1 s a rank, that ranks of one machine do not use; fedsheaf.util.hostinfo.LOCAL_BTL).
#   run/mpirun.sh 4 fedsheaf run configs/quickstart.yaml seed=3
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -lt 2 ]; then
  echo "usage: run/mpirun.sh N COMMAND [ARGS...]" >&2; exit 2
fi
n=$1; shift
case "$n" in ''|*[!0-9]*|0|0*)
  echo "run/mpirun.sh: N must be a positive integer written without leading zeros, got '$n'" >&2
  exit 2;;
esac
PATH="$here/.venv/bin:$PATH"
mpiexec=${FEDSHEAF_MPIEXEC:-${MPIEXEC:-$(command -v mpiexec || true)}}
if [ -z "$mpiexec" ]; then
  echo "run/mpirun.sh: no mpiexec found (run run/install.sh, or load your site MPI module)" >&2
  exit 2
fi
flags=()
py="$here/.venv/bin/python"; [ -x "$py" ] || py=python3
cores=$("$py" -c 'from fedsheaf.util.hostinfo import physical_cores; print(physical_cores())' 2>/dev/null \
  || nproc 2>/dev/null || echo 1)
if [ "$n" -gt "$cores" ]; then
  flags+=(--oversubscribe)
  export FEDSHEAF_THREADS=${FEDSHEAF_THREADS:-1}
fi
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_btl=${OMPI_MCA_btl-^ofi}
exec "$mpiexec" ${flags[@]+"${flags[@]}"} -n "$n" "$@"
