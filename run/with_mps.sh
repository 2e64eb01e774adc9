#!/usr/bin/env bash
# Run a command with an NVIDIA MPS daemon, so that MPI ranks sharing one GPU run their
# kernels concurrently instead of taking the GPU in time slices. For the 15 Table-2
# models on one H200 (one rank each, against one process training them in turn) this
# took the epoch speedup from 3.8x to 11.8x for non-cooperative ranks and from 1.15x to
# 3.53x for Sheaf-FRL ranks (results/bench/README.md, target 3). One node; start it
# once per node.
#
#   run/with_mps.sh mpiexec -n 15 fedsheaf run configs/mnist15.yaml train.device=cuda
#   run/with_mps.sh fedsheaf bench --size full --device cuda
#   MPS=true sbatch slurm/study15.sbatch        # the batch script wraps srun in this
#
# A private daemon (pipe and log folders under $TMPDIR) starts before the command and
# is stopped however the command ends; the command's exit status is kept. Without
# nvidia-cuda-mps-control on PATH, or when CUDA_MPS_PIPE_DIRECTORY already names a
# running daemon, the command runs as it is.
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: run/with_mps.sh COMMAND [ARG...]" >&2
  exit 2
fi
ctl=$(command -v nvidia-cuda-mps-control || true)
if [[ -z $ctl ]]; then
  echo "with_mps: nvidia-cuda-mps-control not found; running without MPS" >&2
  exec "$@"
fi
if [[ -n ${CUDA_MPS_PIPE_DIRECTORY:-} && -e $CUDA_MPS_PIPE_DIRECTORY/control ]]; then
  echo "with_mps: joining the MPS daemon at $CUDA_MPS_PIPE_DIRECTORY" >&2
  exec "$@"
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/fedsheaf-mps.XXXXXX")
export CUDA_MPS_PIPE_DIRECTORY=$dir/pipe CUDA_MPS_LOG_DIRECTORY=$dir/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
stop() {
  echo quit | "$ctl" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap stop EXIT
if ! "$ctl" -d; then
  echo "with_mps: the MPS daemon did not start (see $CUDA_MPS_LOG_DIRECTORY)" >&2
  exit 1
fi
echo "with_mps: MPS daemon started (pipe $CUDA_MPS_PIPE_DIRECTORY)" >&2
"$@"
