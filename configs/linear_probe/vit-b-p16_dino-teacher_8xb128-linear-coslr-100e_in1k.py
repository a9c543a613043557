# Linear probe of DINO-pretrained ViT-B/16 (mmpretrain's VisionTransformer) with DINO's recipe
# for ViT-B: the final-normed class token of the last block concatenated with the mean of that
# block's patch tokens (DINO eval_linear: n_last_blocks=1, avgpool_patchtokens=True; DINO uses
# n=4 without pooling only for ViT-S).
_base_ = './dinovim-t-p16_dino-teacher_8xb128-linear-coslr-100e_in1k.py'

embed_dims = 768

model = dict(
    backbone=dict(
        checkpoint='work_dirs/dino_vit-base-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth',
        backbone=dict(
            _delete_=True,
            type='VisionTransformer',
            arch='base',
            img_size=224,
            patch_size=16,
            out_type='raw',
            out_indices=-1,
            final_norm=True,
            drop_path_rate=0.)),
    neck=dict(type='dinomamba_mm.LinearProbeNeck', in_type='raw',
              avgpool_patch_tokens=True),
    head=dict(in_channels=2 * embed_dims))
