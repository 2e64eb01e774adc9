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

el setup
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

if [[ $STAGES == *tests* ]]; then
  el gpu-tests
  timeout 90 $PY -m pytest -q -p no:cacheprovider -x tests/gpu tests/mpi/test_runtime.py 2>&1 | tail -25
fi

if [[ $STAGES == *gpu* ]]; then
  el bench-gpu
  timeout $((GPU_BUDGET + 30)) $PY -m fedsheaf bench overhead bytes speedup pilot_cost --size full \
    --device cuda --repeats 5 --data-root /tmp/data --tag full-cuda --budget "$GPU_BUDGET"
  tar czf "$OUT/bench-gpu.tgz" results/bench/full-cuda.* results/bench/logs/full-cuda 2>&1
  cp results/bench/full-cuda.md "$OUT/" 2>/dev/null
fi

if [[ $STAGES == *cpu* ]]; then
  el bench-cpu-scaling
  timeout $((CPU_BUDGET / 2 + 30)) $PY -m fedsheaf bench scaling --size full --device cpu \
    --repeats 5 --data-root /tmp/data --tag full-cpu16 --budget $((CPU_BUDGET / 2)) $CPU_EXTRA
  el bench-cpu-clients
  timeout $((CPU_BUDGET / 2 + 30)) $PY -m fedsheaf bench clients --size small --device cpu \
    --only fedrep-4w,fedrep-4w-static --data-root /tmp/data --tag clients-cpu16 \
    --budget $((CPU_BUDGET / 2))
  tar czf "$OUT/bench-cpu.tgz" results/bench/full-cpu16.* results/bench/clients-cpu16.* \
    results/bench/logs/full-cpu16 results/bench/logs/clients-cpu16 2>&1
  cp results/bench/full-cpu16.md results/bench/clients-cpu16.md "$OUT/" 2>/dev/null
fi
el done
