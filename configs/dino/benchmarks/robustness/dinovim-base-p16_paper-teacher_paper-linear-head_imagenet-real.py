# Robustness test (docs/paper.md section 5) on imagenet-real of the paper's DinoVim-B as
# released: its DINO teacher (frozen) and the linear head trained on it
# (Vim/Base/checkpoint.pth.tar, read by LinearProbeClassifier as in
# dinovim-base-p16_paper-teacher_paper-linear-head_in1k.py). No training:
#   python tools/test.py \
#       configs/dino/benchmarks/robustness/dinovim-base-p16_paper-teacher_paper-linear-head_imagenet-real.py \
#       https://huggingface.co/TimingYang/Dino-Mamba/resolve/main/Vim/Base/checkpoint.pth.tar
_base_ = [
    '../dinovim-base-p16_paper-teacher_8xb128-linear-coslr-100e_in1k.py',
    '../../../_base_/datasets/imagenet-real.py',
]

model = dict(type='dinomamba_mm.LinearProbeClassifier')
load_from = ('https://huggingface.co/TimingYang/Dino-Mamba/resolve/main/Vim/Base/'
             'checkpoint.pth.tar')
test_dataloader = {{_base_.robustness_test_dataloader}}
test_evaluator = {{_base_.robustness_test_evaluator}}
