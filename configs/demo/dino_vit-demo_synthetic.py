# The demo's DINO pretraining of a ViT (tools/demo.py), the softmax-attention counterpart of
# dino_dinovim-demo_synthetic.py: same recipe, data and schedule; a 4-block 96-wide mmpretrain
# VisionTransformer with 6 heads of 16 dims, so that D_QK (16) equals DinoVim's state size N
# as in the paper (64 = 64), which the rank comparison needs.
_base_ = './dino_dinovim-demo_synthetic.py'

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmpretrain.VisionTransformer',
        arch=dict(embed_dims=96, num_layers=4, num_heads=6, feedforward_channels=384),
        img_size=64,
        patch_size=8,
        out_type='cls_token',
        drop_path_rate=0.))
