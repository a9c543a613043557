#!/usr/bin/env bash
# Training under Slurm:
#   [GPUS=8] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS=...] \
#   bash tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [train.py options]
# srun sends SIGUSR1 to the tasks SIGNAL_TIME (120) seconds before the time limit
# (--signal=USR1@SIGNAL_TIME); slurm sends SIGTERM on preemption or scancel, GraceTime seconds
# before SIGKILL. On either, tools/train.py saves iter_N.pth at the end of the iteration and
# exits with status 75 (srun: the highest status of the tasks); nothing past that iteration is
# lost if SIGNAL_TIME / GraceTime exceed one iteration plus one save. Run it again with --resume
# to continue exactly (--resume with nothing to resume trains from scratch, so it can be given
# from the first run on). To have slurm requeue a preempted job, submit this script in a batch
# job with requeueing on, e.g. sbatch --requeue --wrap "bash tools/slurm_train.sh ... --resume"
# (or #SBATCH --requeue): the requeued job runs the same command, which resumes.
set -euo pipefail
PARTITION=${1:?usage: slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [options]}
JOB_NAME=${2:?usage: slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [options]}
CONFIG=${3:?usage: slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [options]}
WORK_DIR=${4:?usage: slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [options]}
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
SRUN_ARGS=${SRUN_ARGS:-""}
SIGNAL_TIME=${SIGNAL_TIME:-120}
HERE=$(cd "$(dirname "$0")" && pwd)

PYTHONPATH="$HERE/..${PYTHONPATH:+:$PYTHONPATH}" \
srun -p "$PARTITION" \
    --job-name="$JOB_NAME" \
    --gres=gpu:"$GPUS_PER_NODE" \
    --ntasks="$GPUS" \
    --ntasks-per-node="$GPUS_PER_NODE" \
    --cpus-per-task="$CPUS_PER_TASK" \
    --kill-on-bad-exit=1 \
    --signal=USR1@"$SIGNAL_TIME" \
    $SRUN_ARGS \
    python -u "$HERE/train.py" "$CONFIG" --work-dir="$WORK_DIR" --launcher="slurm" "${@:5}"
