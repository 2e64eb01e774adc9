#!/usr/bin/env bash
# Install (once) and run the whole test suite: lint, unit tests, MPI tests
# (real ranks via mpiexec at np = 1, 2 and 4+). Extra arguments go to pytest.
#   FEDSHEAF_TEST_WORKERS  pytest processes (pytest-xdist; default 2: the MPI tests' ranks
#                          wait on launches and each other, so two streams keep 2 cores
#                          busy); 0 runs everything in this process (pdb, -s)
set -euo pipefail
cd "$(dirname "$0")/.."
workers=${FEDSHEAF_TEST_WORKERS:-2}
case $workers in
  '' | *[!0-9]*) echo "fedsheaf: FEDSHEAF_TEST_WORKERS must be a whole number, got '$workers'" >&2; exit 2 ;;
esac
run/install.sh
export PATH="$PWD/.venv/bin:$PATH" FEDSHEAF_THREADS=${FEDSHEAF_THREADS:-1}
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
echo "== ruff"
.venv/bin/ruff check fedsheaf tests
echo "== mypy"
.venv/bin/mypy
echo "== pytest"
# whole modules to one worker: a module's shared fixture (one set of runs) is built once;
# handed out in file order (the long MPI modules first, the quick unit ones to even out
# the end), not by their number of tests (pytest-xdist >= 3.8 has the option)
order=$(.venv/bin/python -c 'import importlib.metadata as m
v = tuple(int(x) for x in m.version("pytest-xdist").split(".")[:2])
print("--no-loadscope-reorder" if v >= (3, 8) else "")')
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" --dist loadscope $order "$@"
