# Linear probe of ViT-B/16 (mmpretrain's VisionTransformer) pretrained with our DINO config
# (configs/dino/dino_vit-base-...), with DINO's recipe for ViT-B: the final-normed class token of
# the last block concatenated with the mean of that block's patch tokens (DINO eval_linear:
# n_last_blocks=1, avgpool_patchtokens=True; DINO uses n=4 without pooling only for ViT-S).
_base_ = [
    '../../_base_/models/linear-probe_dinovim-base.py',
    '../../_base_/datasets/imagenet_linear-probe_bs128.py',
    '../../_base_/schedules/sgd_coslr_100e_linear-probe.py',
]

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
    head=dict(in_channels=2 * 768))  # class token + mean patch token
