#!/usr/bin/env bash
# Distributed testing with torchrun:
#   bash tools/dist_test.sh CONFIG CHECKPOINT NUM_PROCESSES [test.py options]
set -euo pipefail
CONFIG=${1:?usage: dist_test.sh CONFIG CHECKPOINT NUM_PROCESSES [options]}
CHECKPOINT=${2:?usage: dist_test.sh CONFIG CHECKPOINT NUM_PROCESSES [options]}
GPUS=${3:?usage: dist_test.sh CONFIG CHECKPOINT NUM_PROCESSES [options]}
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
    "$HERE/test.py" \
    "$CONFIG" \
    "$CHECKPOINT" \
    --launcher pytorch "${@:4}"
