#!/usr/bin/env bash
# Reproduces results/head_fedavg/ (SPEC §4-5, seed 002), reduced for a shared 2-core CPU:
#  (a) the fixed UFM instance of SPEC §5 with `fedsheaf ufm` (exact selection, proximal
#      rho = 1e-3, moment correction gamma = 1), 18 rounds each;
#  (b) head-only FedAvg on diabetes3 (configs/head_fedavg_diabetes3.yaml: 3 clients,
#      MLP backbones 8-128-128-6, head 6 -> 3, lam_H = lam_W = 0.01, E = 6000 full-batch
#      Adam steps per round with cosine lr 1e-2 -> 1e-5, 6 rounds) with ordinary,
#      proximal (rho = 1e-3) and aligned training, each without and with the moment
#      correction (gamma = 1). The paper: ResMLP/ResNet-18, E = 4000 epochs of minibatches,
#      AdamW 1e-3 -> 1e-5, 8 rounds.
#  (c) with CONFIG=configs/head_fedavg_geo.yaml OUT=results/head_fedavg/geo UFM=0: the
#      same six runs on the geo view of FashionMNIST (conv backbones, 3 clients).
# Usage (from anywhere): results/head_fedavg/run.sh   [NP=4: server + 3 worker ranks;
#   RUNS="ordinary proximal" chooses the DNN runs; tables are made from all runs present]
set -euo pipefail
cd "$(dirname "$0")/../.."
NP=${NP:-4}
PY=${PY:-.venv/bin/python}
MPIEXEC=${MPIEXEC:-$(dirname "$PY")/mpiexec}
CONFIG=${CONFIG:-configs/head_fedavg_diabetes3.yaml}
OUT=${OUT:-results/head_fedavg}
export FEDSHEAF_THREADS=1 OMP_NUM_THREADS=1
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
mkdir -p "$OUT/logs"
if [ "${UFM:-1}" = 1 ]; then
  mkdir -p "$OUT/ufm"
  for spec in "exact:--mode exact" "proximal:--mode proximal --rho 1e-3" "gamma1:--mode exact --gamma 1.0"; do
    name=${spec%%:*}
    # shellcheck disable=SC2086
    nice -n 10 "$PY" -m fedsheaf ufm ${spec#*:} --out "$OUT/ufm/$name" > "$OUT/ufm/$name.txt"
  done
fi
declare -A OPTS=(
  [ordinary]="head.rho=0.0"
  [proximal]="head.rho=1.0e-3"
  [aligned]="head.align=true"
  [ordinary_corr]="head.rho=0.0 head.moment_gamma=1.0"
  [proximal_corr]="head.rho=1.0e-3 head.moment_gamma=1.0"
  [aligned_corr]="head.align=true head.moment_gamma=1.0"
)
for run in ${RUNS:-ordinary proximal aligned ordinary_corr proximal_corr aligned_corr}; do
  start=$(date +%s)
  # shellcheck disable=SC2086
  nice -n 10 "$MPIEXEC" --oversubscribe -n "$NP" "$PY" -m fedsheaf run \
    "$CONFIG" ${OPTS[$run]} checkpoint.every=0 output.dir=$OUT/runs output.name="$run" \
    output.overwrite=true > "$OUT/logs/$run.log" 2>&1
  echo "$run: $(( $(date +%s) - start )) s wall (mpiexec -n $NP, including startup)" \
    | tee -a "$OUT/logs/timing.txt"
done
"$PY" results/head_fedavg/make_results.py "$OUT"
