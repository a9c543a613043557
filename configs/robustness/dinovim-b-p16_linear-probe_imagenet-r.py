# Robustness test (docs/paper.md section 5) of the dinovim-b linear probe on imagenet-r:
#   python tools/test.py configs/robustness/dinovim-b-p16_linear-probe_imagenet-r.py <probe checkpoint>
_base_ = [
    '../linear_probe/dinovim-b-p16_dino-teacher_8xb128-linear-coslr-100e_in1k.py',
    './_base_/imagenet-r.py',
]

test_dataloader = {{_base_.robustness_test_dataloader}}
test_evaluator = {{_base_.robustness_test_evaluator}}
