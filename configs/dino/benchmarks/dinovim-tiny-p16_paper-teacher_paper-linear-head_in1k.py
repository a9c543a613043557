# DinoVim-T evaluated as the paper's README does (eval_linear --evaluate): the released DINO
# teacher (Vim/Tiny/checkpoint.pth, frozen) and the released linear head trained on the class
# tokens of its last 8 blocks (Vim/Tiny/checkpoint.pth.tar, DINO's LinearClassifier format),
# on ImageNet-1k val; paper: 73.7 % top-1. No training:
#   python tools/test.py CONFIG HEAD
# with HEAD = load_from below, or the file `mim download dinomamba_mm --config <this name>` got;
# or mmpretrain.get_model(CONFIG, pretrained=True). LinearProbeClassifier puts the head's two
# tensors into head.fc and takes the backbone from the teacher (models/classifiers/).
_base_ = './dinovim-tiny-p16_paper-teacher_8xb128-linear-coslr-100e_in1k.py'

model = dict(type='dinomamba_mm.LinearProbeClassifier')
load_from = ('https://huggingface.co/TimingYang/Dino-Mamba/resolve/main/Vim/Tiny/'
             'checkpoint.pth.tar')
