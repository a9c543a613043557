#!/usr/bin/env bash
# Distributed training with torchrun: bash tools/dist_train.sh CONFIG NUM_PROCESSES [train.py options]
# NNODES / NODE_RANK / MASTER_ADDR / PORT select a multi-node run. Without CUDA it uses gloo on CPU.
# SIGTERM to torchrun reaches every process: each saves at the end of the iteration and exits 75 (tools/train.py --resume continues).
# A process that stops answering fails the run after env_cfg.dist_cfg.timeout seconds (600 in configs/_base_/schedules/*.py).
set -euo pipefail
CONFIG=${1:?usage: dist_train.sh CONFIG NUM_PROCESSES [options]}
GPUS=${2:?usage: dist_train.sh CONFIG NUM_PROCESSES [options]}
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
HERE=$(cd "$(dirname "$0")" && pwd)

PYTHONPATH="$HERE/..${PYTHONPATH:+:$PYTHONPATH}" \
python -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    "$HERE/train.py" \
    "$CONFIG" \
    --launcher pytorch "${@:3}"
