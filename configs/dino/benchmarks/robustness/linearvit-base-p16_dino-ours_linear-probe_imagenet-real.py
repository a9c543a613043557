# Robustness test (docs/paper.md section 5) on imagenet-real of the linearvit-b linear probe on
# the teacher of our DINO run (dino-ours):
#   python tools/test.py \
#       configs/dino/benchmarks/robustness/linearvit-base-p16_dino-ours_linear-probe_imagenet-real.py \
#       <probe checkpoint>
_base_ = [
    '../linearvit-base-p16_dino-ours_8xb128-linear-coslr-100e_in1k.py',
    '../../../_base_/datasets/imagenet-real.py',
]

test_dataloader = {{_base_.robustness_test_dataloader}}
test_evaluator = {{_base_.robustness_test_evaluator}}
