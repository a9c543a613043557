# Linear probe of LinearViT-B (ViT-B/16 with phi(Q) phi(K)^T attention), with
# the same feature as ViT-B (DINO's recipe for base models: last class token + mean patch token).
_base_ = [
    '../../_base_/models/linear-probe_dinovim-base.py',
    '../../_base_/datasets/imagenet_linear-probe_bs128.py',
    '../../_base_/schedules/sgd_coslr_100e_linear-probe.py',
]

model = dict(
    backbone=dict(
        checkpoint='work_dirs/dino_linearvit-base-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth',
        backbone=dict(
            _delete_=True,
            type='dinomamba_mm.LinearViT',
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
