#!/usr/bin/env bash
# Reproduces results/fedrep/: FedRep, FedAvg, FedAvg+FT and Local on FashionMNIST,
# 100 clients x 2 classes (configs/fedrep_fmnist_100c2.yaml), REDUCED for a 2-core
# machine: 20 rounds instead of 100; score = mean over the last 5 rounds (16-20) instead
# of the last 10; tau_phi = 1 body epoch and 1 local epoch for the baselines instead of 5
# (the CIFAR-10 100-client cell's schedule); evaluation every 5 rounds and in each of
# the last 5. Everything else (data, partition, model, optimiser, r = 0.1, head tau = 10,
# final head round of 10 epochs) is the protocol.
# Usage (from anywhere): results/fedrep/run.sh   [NP=3 ranks: server + 2 workers;
#   ALGS="fedrep fedavg_ft fedavg local" chooses the runs; the table is made from all
#   run directories present]
set -euo pipefail
cd "$(dirname "$0")/../.."
NP=${NP:-3}
PY=${PY:-.venv/bin/python}
MPIEXEC=${MPIEXEC:-$(dirname "$PY")/mpiexec}
export FEDSHEAF_THREADS=1 OMP_NUM_THREADS=1
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
REDUCED=(federated.rounds=20 federated.eval_last=5 federated.body_epochs=1
         federated.local_epochs=1 federated.eval_every=5 output.dir=results/fedrep/runs output.overwrite=true)
mkdir -p results/fedrep/logs
: > results/fedrep/logs/timing.txt
for alg in ${ALGS:-fedrep fedavg_ft fedavg local}; do
  start=$(date +%s)
  nice -n 10 "$MPIEXEC" --oversubscribe -n "$NP" "$PY" -m fedsheaf run \
    configs/fedrep_fmnist_100c2.yaml algorithm="$alg" output.name="$alg" "${REDUCED[@]}" \
    > "results/fedrep/logs/$alg.log" 2>&1
  echo "$alg: $(( $(date +%s) - start )) s wall (mpiexec -n $NP, including startup)" \
    | tee -a results/fedrep/logs/timing.txt
done
"$PY" results/fedrep/make_table.py results/fedrep/runs results/fedrep
