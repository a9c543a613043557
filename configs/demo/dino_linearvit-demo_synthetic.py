# The demo's DINO pretraining of a LinearViT (tools/demo.py): dino_vit-demo_synthetic.py with
# linear attention in place of softmax attention: phi(Q) (phi(K)^T V), phi a softmax over each
# row's 16 features (dinomamba_mm/models/layers/linear_attention.py), as the paper's LinearViT.
_base_ = './dino_dinovim-demo_synthetic.py'

model = dict(
    backbone=dict(
        _delete_=True,
        type='dinomamba_mm.LinearViT',
        arch=dict(embed_dims=96, num_layers=4, num_heads=6, feedforward_channels=384),
        img_size=64,
        patch_size=8,
        out_type='cls_token',
        drop_path_rate=0.))
