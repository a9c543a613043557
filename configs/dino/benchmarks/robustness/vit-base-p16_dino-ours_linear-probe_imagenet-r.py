# Robustness test (docs/paper.md section 5) on imagenet-r of the vit-b linear probe on the teacher
# of our DINO run (dino-ours):
#   python tools/test.py \
#       configs/dino/benchmarks/robustness/vit-base-p16_dino-ours_linear-probe_imagenet-r.py \
#       <probe checkpoint>
_base_ = [
    '../vit-base-p16_dino-ours_8xb128-linear-coslr-100e_in1k.py',
    '../../../_base_/datasets/imagenet-r.py',
]

test_dataloader = {{_base_.robustness_test_dataloader}}
test_evaluator = {{_base_.robustness_test_evaluator}}
