#!/usr/bin/env bash
# Set up (idempotently) the Python environment dinomamba_mm runs and is tested in.
#
#   bash tools/setup_env.sh [VENV_DIR]        (default: .venv; `make env` calls this)
#
# - Python 3.11 virtual environment in VENV_DIR (an existing one is reused as it is).
# - torch + torchvision: an importable pair already in the environment is kept; otherwise
#   torch 2.14.1 + torchvision 0.29.1 (mmpretrain imports torchvision at import time).
# - mmcv 2.1.0 with compiled ops, matching the installed torch: a wheel from $PIP_FIND_LINKS or
#   our own cache when one imports; otherwise built from the PyPI sdist (~15 min on 2 cores) with
#   `-std=c++20` (torch >= 2.14 headers need it) and cached under
#   ${DINOMAMBA_CACHE:-~/.cache/dinomamba_mm}/wheels/torch-<version>/ (keyed on torch: pip's own
#   wheel cache is not, see docs/faq.md).
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
MMCV_VERSION=2.1.0
MAMBA_SSM_VERSION=2.3.2.post1
TORCH_NEEDS_MB=6000
CACHE=${DINOMAMBA_CACHE:-$HOME/.cache/dinomamba_mm}
# torch 2.14.1 requires setuptools >= 77.0.3; mmengine's 'pkg::' configs need pkg_resources,
# which setuptools 81 removed. mmcv's sdist is built with setuptools < 70, as measured.
SETUPTOOLS='setuptools>=77.0.3,<81'
SETUPTOOLS_MMCV_BUILD='setuptools<70'

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
TORCH=$(torch_version)

# Everything installed from here on must leave torch and setuptools alone.
CONSTRAINTS=$(mktemp)
trap 'rm -f "$CONSTRAINTS"' EXIT
"$PY" - "$CONSTRAINTS" "$SETUPTOOLS" <<'EOF'
import sys
from importlib.metadata import version
with open(sys.argv[1], 'w') as f:
    f.write(f"torch=={version('torch')}\ntorchvision=={version('torchvision')}\n{sys.argv[2]}\n")
EOF

mmcv_ok() {
    "$PY" -c "import mmcv, sys; from mmcv.ops import nms, RoIAlign; \
sys.exit(mmcv.__version__ != '$MMCV_VERSION')" >/dev/null 2>&1
}

install_mmcv_wheel_from() {  # $1: a directory that may hold an mmcv wheel
    local dir=$1 wheel
    for wheel in "$dir"/mmcv-"$MMCV_VERSION"-*.whl; do
        [ -f "$wheel" ] || continue
        log "trying mmcv wheel $wheel"
        # first with its dependencies (mmengine, opencv, ...), then replacing a broken mmcv
        "${PIP[@]}" install -q --no-cache-dir "$wheel" -c "$CONSTRAINTS" \
            -c "$ROOT/requirements/runtime.txt"
        "${PIP[@]}" install -q --no-deps --no-cache-dir --force-reinstall "$wheel"
        if mmcv_ok; then return 0; fi
        log "  $wheel does not match torch $TORCH; uninstalling it"
        "${PIP[@]}" uninstall -q -y mmcv
    done
    return 1
}

build_mmcv() {
    local out=$1 work
    work=$(mktemp -d)
    log "building mmcv $MMCV_VERSION from its sdist for torch $TORCH (about 15 min on 2 cores)"
    "${PIP[@]}" download -q --no-deps --no-binary :all: --no-cache-dir \
        "mmcv==$MMCV_VERSION" -d "$work"
    tar -xzf "$work"/mmcv-"$MMCV_VERSION".tar.gz -C "$work"
    # torch >= 2.14 headers refuse C++17 ("C++20 or later compatible compiler is required").
    sed -i 's/-std=c++17/-std=c++20/g' "$work/mmcv-$MMCV_VERSION/setup.py"
    mkdir -p "$out"
    "${PIP[@]}" install -q "$SETUPTOOLS_MMCV_BUILD"
    (cd "$work/mmcv-$MMCV_VERSION" && MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-$(nproc)} \
        "${PIP[@]}" wheel -q --no-deps --no-build-isolation --no-cache-dir . -w "$out")
    "${PIP[@]}" install -q "$SETUPTOOLS"
    rm -rf "$work"
}

if mmcv_ok; then
    log "keeping the installed mmcv $MMCV_VERSION (ops import against torch $TORCH)"
else
    OWN_WHEELS="$CACHE/wheels/torch-$TORCH"
    found=1
    for dir in ${PIP_FIND_LINKS:-} "$OWN_WHEELS"; do
        dir=${dir#file://}
        [ -d "$dir" ] || continue
        if install_mmcv_wheel_from "$dir"; then found=0; break; fi
    done
    if [ "$found" != 0 ]; then
        build_mmcv "$OWN_WHEELS"
        install_mmcv_wheel_from "$OWN_WHEELS" || {
            log "the mmcv wheel built in $OWN_WHEELS does not import against torch $TORCH"
            exit 1
        }
    fi
fi

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
