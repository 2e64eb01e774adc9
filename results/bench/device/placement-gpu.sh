#!/usr/bin/env bash
# Issue 29 on one GPU: the 15 Table-2 agents (FashionMNIST) in 1, 3, 5 and 15 processes
# sharing the GPU (fedsheaf bench placement, launches placement15-r*; and R = 1 with
# sheaf.recompute_pilots), first without and then with an MPS daemon
# (run/with_mps.sh). One short call of the lent GPU node
# (about 6 min with the defaults); everything worth keeping lands under $OUT (console,
# the two results files, a tarball of the launch logs), to be committed under
# results/bench/ (placement-cuda.*, placement-cuda-mps.*).
#
#   bash results/bench/device/placement-gpu.sh                  # the GPU node, as device.sh
#   DEVICE=cpu SETUP=none DATA=../shared/data STEPS=1 ONLY=placement15-r1,placement15-r3 \
#     BUDGET=200 OUT=/tmp/rehearsal RESULTS=/tmp/rehearsal/bench \
#     bash results/bench/device/placement-gpu.sh               # CPU rehearsal, tree untouched
#
# Settings (environment): DEVICE cuda|cpu; SETUP wheels (install the Open MPI and mpi4py
# wheels carried in $WHL into /tmp/mpi and unpack .dev/data/*.gz into $DATA, as
# device.sh did) or none (this Python as it is); DATA the torchvision root holding
# FashionMNIST; STEPS steps per epoch; BUDGET seconds per pass (fedsheaf bench --budget);
# ONLY the launches to run; RESULTS fedsheaf bench's --out (default results/bench).
set -u
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI 5 counts cores, not hardware threads: never refuse for lack of slots
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
T0=$(date +%s)
el() { echo "=== [+$(($(date +%s) - T0))s] $*"; }
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}
SETUP=${SETUP:-wheels}
WHL=${WHL:-.dev/whl}
DATA=${DATA:-/tmp/data}
STEPS=${STEPS:-16}
BUDGET=${BUDGET:-150}
ONLY=${ONLY:-placement15-r1,placement15-r3,placement15-r5,placement15-r15,placement15-r1-recompute}
OUT=${OUT:-/tmp/placement-gpu-out}
RESULTS=${RESULTS:-results/bench}
mkdir -p "$OUT"

el "setup ($SETUP; device $DEVICE)"
if [[ $SETUP == wheels ]]; then
  if compgen -G "$WHL/*.whl" >/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --ignore-installed \
      --prefix /tmp/mpi "$WHL"/*.whl 2>&1 | grep -v WARNING
    SITE=$(ls -d /tmp/mpi/lib/python3*/site-packages)
    export PATH=/tmp/mpi/bin:$PATH PYTHONPATH=$PWD:$SITE FEDSHEAF_MPIEXEC=/tmp/mpi/bin/mpiexec
  else
    echo "no wheels in $WHL: using $PY's mpi4py and the mpiexec on PATH as they are"
    export PYTHONPATH=$PWD
  fi
  mkdir -p "$DATA/FashionMNIST/raw"
  for f in .dev/data/*.gz; do
    [[ -f $f ]] && gunzip -c "$f" >"$DATA/FashionMNIST/raw/$(basename "$f" .gz)"
  done
fi
if [[ $DEVICE == cuda ]]; then
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
fi
echo "nproc $(nproc)"
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"

# the same launches twice: the ranks' CUDA contexts taking the GPU in time slices, then
# an MPS daemon letting their kernels run concurrently (without nvidia-cuda-mps-control,
# as on a CPU rehearsal, with_mps.sh runs the command as it is)
for pass in plain mps; do
  tag=placement-$DEVICE
  wrap=()
  if [[ $pass == mps ]]; then
    tag=$tag-mps
    wrap=(run/with_mps.sh)
  fi
  el "bench $tag"
  timeout $((BUDGET + 60)) ${wrap[@]+"${wrap[@]}"} $PY -m fedsheaf bench placement \
    --only "$ONLY" --device "$DEVICE" --data-root "$DATA" --repeats 3 \
    --set "train.steps_per_epoch=$STEPS" --tag "$tag" --budget "$BUDGET" --out "$RESULTS"
  echo "exit $?"
  cp "$RESULTS/$tag.md" "$RESULTS/$tag.json" "$OUT/" 2>/dev/null
  tar czf "$OUT/logs-$tag.tgz" "$RESULTS/logs/$tag" 2>/dev/null
done
el done
