#!/usr/bin/env bash
# Set up (idempotently) the Python environment dinomamba_mm runs and is tested in.
#
#   bash tools/setup_env.sh [VENV_DIR]        (default: .venv; `make env` calls this)
#
# - Python 3.11 virtual environment in VENV_DIR (an existing one is reused as it is).
# - torch + torchvision: an importable pair already in the environment is kept; otherwise
#   torch 2.14.1 + torchvision 0.29.1 (mmpretrain imports torchvision at import time).
# - mmcv 2.1.0 with compiled ops, matching the installed torch: `python -m
#   dinomamba_mm.install_mmcv` (dinomamba_mm/install_mmcv.py: a wheel from $PIP_FIND_LINKS or
#   its cache ${DINOMAMBA_CACHE:-~/.cache/dinomamba_mm}/wheels/torch-<version>/, else the PyPI
#   sdist built into that cache, ~10 min on 2 cores).
# - the OpenMMLab stack pinned in requirements/runtime.txt, the test tools (requirements/tests.txt
#   and mamba-ssm's Python files, an oracle of the Triton tests), and this package (editable).
# A stamp keyed on this script, the requirement files, setup.py and the torch version makes a
# second run a no-op.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${1:-${VENV:-$ROOT/.venv}}
case "$VENV" in /*) ;; *) VENV="$PWD/$VENV" ;; esac  # the mmcv build runs in another directory
PY_FOR_VENV=${PYTHON_FOR_VENV:-python3.11}
TORCH_VERSION=2.14.1
TORCHVISION_VERSION=0.29.1
MAMBA_SSM_VERSION=2.3.2.post1
TORCH_NEEDS_MB=6000
# torch 2.14.1 requires setuptools >= 77.0.3; mmengine's 'pkg::' configs need pkg_resources,
# which setuptools 81 removed.
SETUPTOOLS='setuptools>=77.0.3,<81'

log() { printf '[setup_env] %s\n' "$*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
    command -v "$PY_FOR_VENV" >/dev/null 2>&1 || PY_FOR_VENV=python3
    version=$("$PY_FOR_VENV" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if [ "$version" != "3.11" ]; then
        log "Python 3.11 is required to create $VENV, found $PY_FOR_VENV = $version"
        log "(set PYTHON_FOR_VENV=/path/to/python3.11)"
        exit 1
    fi
    log "creating virtual environment $VENV"
    "$PY_FOR_VENV" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)

torch_version() { "$PY" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null; }

stamp_key() {
    cat "$ROOT/tools/setup_env.sh" "$ROOT/setup.py" "$ROOT"/requirements/*.txt \
        | sha256sum | cut -c1-16
}
STAMP="$VENV/.dinomamba_mm-env-$(stamp_key)-torch$(torch_version || echo none)"
if [ -f "$STAMP" ] && "$PY" -c 'import dinomamba_mm, mmcv.ops' >/dev/null 2>&1; then
    log "environment $VENV is up to date"
    exit 0
fi

log "build tools: $SETUPTOOLS, wheel"
"${PIP[@]}" install -q "$SETUPTOOLS" wheel

if "$PY" -c 'import torch, torchvision' >/dev/null 2>&1; then
    log "keeping the installed torch $(torch_version) / torchvision pair"
else
    # The pair is a CUDA build: about 5.6 GB in the venv (measured). Without the room pip
    # fails half-way with a bare "[Errno 28] No space left on device".
    free_mb=$(df -Pm "$VENV" | awk 'NR == 2 {print $4}')
    if [ "$free_mb" -lt "$TORCH_NEEDS_MB" ]; then
        log "installing torch $TORCH_VERSION + torchvision $TORCHVISION_VERSION needs about" \
            "$TORCH_NEEDS_MB MB in $VENV; its filesystem has $free_mb MB free"
        exit 1
    fi
    log "installing torch $TORCH_VERSION + torchvision $TORCHVISION_VERSION"
    "${PIP[@]}" install -q --no-cache-dir "torch==$TORCH_VERSION" \
        "torchvision==$TORCHVISION_VERSION" "$SETUPTOOLS"
fi

# Everything installed from here on must leave torch and setuptools alone.
CONSTRAINTS=$(mktemp)
trap 'rm -f "$CONSTRAINTS"' EXIT
"$PY" - "$CONSTRAINTS" "$SETUPTOOLS" <<'EOF'
import sys
from importlib.metadata import version
with open(sys.argv[1], 'w') as f:
    f.write(f"torch=={version('torch')}\ntorchvision=={version('torchvision')}\n{sys.argv[2]}\n")
EOF

# mmcv: the package's own installer (a cached wheel, else the sdist build), also what a wheel
# user runs; the first run of a fresh venv has no mmengine yet, which the package tolerates.
PYTHONPATH="$ROOT" "$PY" -m dinomamba_mm.install_mmcv -c "$ROOT/requirements/runtime.txt"

log "installing the OpenMMLab stack and test tools (requirements/)"
"${PIP[@]}" install -q -r "$ROOT/requirements/runtime.txt" -r "$ROOT/requirements/tests.txt" \
    -c "$CONSTRAINTS"
# openmim for the `mim download` tests, without its dependencies: opendatalab -> openxlab pins
# setuptools~=60.2.0 (torch needs >= 77.0.3); what it imports is in requirements/tests.txt
"${PIP[@]}" install -q --no-deps "openmim==0.3.9"
# mamba_ssm's Triton ops, an oracle of tests/test_ops/test_ssd_triton_vs_mamba_ssm.py: its Python
# files only (SKIP_CUDA_BUILD; FORCE_BUILD stops its setup.py downloading a prebuilt CUDA wheel).
MAMBA_FORCE_BUILD=TRUE MAMBA_SKIP_CUDA_BUILD=TRUE "${PIP[@]}" install -q --no-deps \
    --no-build-isolation "mamba-ssm==$MAMBA_SSM_VERSION"
log "installing dinomamba_mm (editable)"
"${PIP[@]}" install -q --no-deps --no-build-isolation -e "$ROOT"

"$PY" - <<'EOF'
import mmcv, mmdet, mmengine, mmpretrain, mmseg, torch, torchvision
from mmcv.ops import nms, RoIAlign  # noqa: F401 (compiled ops must import)
import dinomamba_mm
print(f'[setup_env] ok: torch {torch.__version__}, torchvision {torchvision.__version__}, '
      f'mmengine {mmengine.__version__}, mmcv {mmcv.__version__}, mmpretrain '
      f'{mmpretrain.__version__}, mmseg {mmseg.__version__}, mmdet {mmdet.__version__}, '
      f'dinomamba_mm {dinomamba_mm.__version__}')
EOF
rm -f "$VENV"/.dinomamba_mm-env-*
STAMP="$VENV/.dinomamba_mm-env-$(stamp_key)-torch$(torch_version)"
touch "$STAMP"
