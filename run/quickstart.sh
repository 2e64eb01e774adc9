#!/usr/bin/env bash
# Install (once) and run the main job: 4 Sheaf-FRL agents with heterogeneous
# latent sizes on scikit-learn's bundled digits. Extra key=value arguments are
# passed on as config overrides, e.g. run/quickstart.sh seed=3 train.epochs=5
set -euo pipefail
cd "$(dirname "$0")/.."
run/install.sh
exec run/mpirun.sh 4 .venv/bin/fedsheaf run configs/quickstart.yaml output.overwrite=true "$@"
