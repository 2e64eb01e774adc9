#!/usr/bin/env bash
# Install (once) and run the whole test suite: lint, unit tests, MPI tests
# (real ranks via mpiexec at np = 1, 2 and 4+). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
run/install.sh
export PATH="$PWD/.venv/bin:$PATH" FEDSHEAF_THREADS=${FEDSHEAF_THREADS:-1}
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
echo "== ruff"
.venv/bin/ruff check fedsheaf tests
echo "== pytest"
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
