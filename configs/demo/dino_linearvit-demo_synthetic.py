# The demo's DINO pretraining of a LinearViT (tools/demo.py): dino_vit-demo_synthetic.py with
# linear attention (phi = elu + 1) in place of softmax attention.
_base_ = './dino_vit-demo_synthetic.py'

model = dict(backbone=dict(type='dinomamba_mm.LinearViT'))
