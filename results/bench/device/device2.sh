#!/usr/bin/env bash
# One lease of the lent GPU node (H200, 16 cores): MPI wheels, data, GPU tests, benches.
# Everything worth keeping lands under $OUT (console log + one tarball per stage).
set -u
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI 5 counts cores, not hardware threads: never refuse for lack of slots
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
T0=$(date +%s)
el() { echo "=== [+$(( $(date +%s) - T0 ))s] $*"; }
PY=${PY:-python3}
GPU_BUDGET=${GPU_BUDGET:-220}
CPU_BUDGET=${CPU_BUDGET:-150}
STAGES=${STAGES:-"tests gpu cpu"}
WHL=${WHL:-.dev/whl}
CPU_EXTRA=${CPU_EXTRA:-}

el "setup (second lease: MPS + pair)"
if [ -x "$(dirname "$(command -v $PY)")/mpiexec" ]; then
  echo "image has mpiexec beside $PY; using the carried Open MPI anyway"
fi
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --ignore-installed --prefix /tmp/mpi "$WHL"/*.whl 2>&1 | grep -v WARNING
SITE=$(ls -d /tmp/mpi/lib/python3*/site-packages)
export PATH=/tmp/mpi/bin:$PATH PYTHONPATH=$PWD:$SITE FEDSHEAF_MPIEXEC=/tmp/mpi/bin/mpiexec
mkdir -p /tmp/data/FashionMNIST/raw
for f in .dev/data/*.gz; do gunzip -c "$f" >/tmp/data/FashionMNIST/raw/"$(basename "$f" .gz)"; done
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.sm,utilization.gpu --format=csv
echo "nproc $(nproc); $(grep -c ^processor /proc/cpuinfo) logical; $(lscpu 2>/dev/null | grep -E 'Model name|Thread|Core' | tr -s ' ' | tr '\n' ';')"
$PY -c "import sys, torch, torchvision, mpi4py, numpy; print(sys.version.split()[0], 'torch', torch.__version__, 'tv', torchvision.__version__, 'np', numpy.__version__, 'mpi4py', mpi4py.__file__, 'cuda', torch.cuda.is_available())"
timeout 60 mpiexec -n 4 $PY -c "from mpi4py import MPI; c = MPI.COMM_WORLD; print('mpi', c.rank, c.size, MPI.Get_library_version()[:24])"

MPSCTL=$(command -v nvidia-cuda-mps-control || true)
for d in /usr/local/nvidia/bin /usr/local/cuda/bin /usr/bin; do
  [ -z "$MPSCTL" ] && [ -x $d/nvidia-cuda-mps-control ] && MPSCTL=$d/nvidia-cuda-mps-control
done
echo "mps control: ${MPSCTL:-none}"
if [ -n "$MPSCTL" ]; then
  el mps-table2
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  $MPSCTL -d; sleep 1; ls $CUDA_MPS_PIPE_DIRECTORY
  timeout 175 $PY -m fedsheaf bench overhead speedup --size full --device cuda --only table2 \
    --repeats 3 --data-root /tmp/data --tag full-cuda-mps --budget 150
  echo get_server_list | $MPSCTL
  tail -4 $CUDA_MPS_LOG_DIRECTORY/control.log
  echo quit | $MPSCTL; sleep 1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  tar czf "$OUT/bench-mps.tgz" results/bench/full-cuda-mps.* results/bench/logs/full-cuda-mps
  cp results/bench/full-cuda-mps.md "$OUT/" 2>/dev/null
fi
el pair
timeout 100 $PY -m fedsheaf bench overhead --size full --device cuda --only pair --repeats 3 \
  --data-root /tmp/data --tag full-cuda-pair --budget 80
tar czf "$OUT/bench-pair.tgz" results/bench/full-cuda-pair.* results/bench/logs/full-cuda-pair
cp results/bench/full-cuda-pair.md "$OUT/" 2>/dev/null
el done
