# CPU demo of the ADE20K recipe on the synthetic shapes (ADE20K layout; generate it first with
# `python tools/data/make_synthetic.py --out data/synthetic`): a 4-block DinoVim (width 64) from
# scratch, UperNet + FCN head, BN instead of SyncBN, fp32 OptimWrapper, 200 iterations of 4
# images, then mIoU on the 100 validation images with slide inference:
#   python tools/train.py configs/demo/upernet_dinovim-demo_synthetic-ade.py
_base_ = [
    '../_base_/models/upernet_dinovim.py',
    '../_base_/datasets/synthetic_ade.py',
    '../_base_/schedules/schedule_ade20k_160k.py',
]
norm_cfg = dict(type='BN', requires_grad=True)
crop_size = (256, 256)
width = 64
max_iters = 200
model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(
        arch=dict(_delete_=True, embed_dims=width, num_layers=4, headdim=16,
                  d_state=16, chunk_size=64),
        img_size=crop_size,
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.0,
        token_layout='interleaved'),
    neck=dict(embed_dim=width, norm_cfg=norm_cfg),
    decode_head=dict(
        in_channels=[width] * 4, channels=64, num_classes=7, norm_cfg=norm_cfg),
    auxiliary_head=dict(
        in_channels=width, channels=32, num_classes=7, norm_cfg=norm_cfg),
    test_cfg=dict(mode='slide', crop_size=crop_size, stride=(171, 171)))
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-3, betas=(0.9, 0.999), weight_decay=0.05),
    constructor='dinomamba_mm.LayerDecayOptimWrapperConstructor',
    paramwise_cfg=dict(
        layer_decay_rate=0.9,
        flat_decay_mult=0.0,
        custom_keys={
            '.pos_embed': dict(decay_mult=0.0),
            '.cls_token': dict(decay_mult=0.0),
        }))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=False, begin=0, end=20),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=20, end=max_iters,
         by_epoch=False),
]
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
default_hooks = dict(
    logger=dict(interval=10),
    checkpoint=dict(interval=max_iters, save_best=None))
train_dataloader = dict(batch_size=4)
env_cfg = dict(cudnn_benchmark=False)
auto_scale_lr = dict(base_batch_size=4)
