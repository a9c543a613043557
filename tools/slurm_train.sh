#!/usr/bin/env bash
# Training under Slurm:
#   [GPUS=8] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS=...] \
#   bash tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [train.py options]
set -euo pipefail
PARTITION=${1:?usage: slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [options]}
JOB_NAME=${2:?usage: slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [options]}
CONFIG=${3:?usage: slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [options]}
WORK_DIR=${4:?usage: slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [options]}
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
SRUN_ARGS=${SRUN_ARGS:-""}
HERE=$(cd "$(dirname "$0")" && pwd)

PYTHONPATH="$HERE/..${PYTHONPATH:+:$PYTHONPATH}" \
srun -p "$PARTITION" \
    --job-name="$JOB_NAME" \
    --gres=gpu:"$GPUS_PER_NODE" \
    --ntasks="$GPUS" \
    --ntasks-per-node="$GPUS_PER_NODE" \
    --cpus-per-task="$CPUS_PER_TASK" \
    --kill-on-bad-exit=1 \
    $SRUN_ARGS \
    python -u "$HERE/train.py" "$CONFIG" --work-dir="$WORK_DIR" --launcher="slurm" "${@:5}"
