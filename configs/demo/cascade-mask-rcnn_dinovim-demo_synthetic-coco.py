# CPU demo of the COCO recipe on the synthetic shapes (COCO layout; generate it first with
# `python tools/data/make_synthetic.py --out data/synthetic`): a 4-block DinoVim (width 64) from
# scratch, Cascade Mask R-CNN with the 4-level pyramid + FPN, BN instead of SyncBN, fp32
# OptimWrapper, fewer RPN proposals than on COCO, 20 iterations of 2 images, then box and mask AP
# on the 100 validation images (about 15 minutes on 2 busy cores):
#   python tools/train.py configs/demo/cascade-mask-rcnn_dinovim-demo_synthetic-coco.py
_base_ = [
    '../_base_/models/cascade_mask_rcnn_dinovim.py',
    '../_base_/datasets/synthetic_coco.py',
    '../_base_/schedules/schedule_coco_lsj_100e.py',
]
norm_cfg = dict(type='BN', requires_grad=True)
width = 64
num_classes = 7
max_iters = 20
model = dict(
    data_preprocessor=dict(batch_augments=None),
    backbone=dict(
        arch=dict(_delete_=True, embed_dims=width, num_layers=4, headdim=16,
                  d_state=16, chunk_size=64),
        img_size=(320, 320),
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.0,
        token_layout='interleaved'),
    neck=[
        dict(
            type='mmseg.Feature2Pyramid',
            embed_dim=width,
            rescales=[4, 2, 1, 0.5],
            norm_cfg=norm_cfg),
        dict(type='FPN', in_channels=[width] * 4, out_channels=256, num_outs=5),
    ],
    roi_head=dict(
        bbox_head=[
            dict(
                type='Shared2FCBBoxHead',
                in_channels=256,
                fc_out_channels=1024,
                roi_feat_size=7,
                num_classes=num_classes,
                bbox_coder=dict(
                    type='DeltaXYWHBBoxCoder',
                    target_means=[0., 0., 0., 0.],
                    target_stds=stds),
                reg_class_agnostic=True,
                loss_cls=dict(
                    type='CrossEntropyLoss', use_sigmoid=False,
                    loss_weight=1.0),
                loss_bbox=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1.0))
            for stds in ([0.1, 0.1, 0.2, 0.2], [0.05, 0.05, 0.1, 0.1],
                         [0.033, 0.033, 0.067, 0.067])
        ],
        mask_head=dict(num_classes=num_classes)),
    train_cfg=dict(rpn_proposal=dict(nms_pre=1000, max_per_img=300)),
    test_cfg=dict(rpn=dict(nms_pre=500, max_per_img=100), rcnn=dict(max_per_img=50)))
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=2e-4, betas=(0.9, 0.999), weight_decay=0.1),
    constructor='dinomamba_mm.LayerDecayOptimWrapperConstructor',
    paramwise_cfg=dict(
        layer_decay_rate=0.9,
        flat_decay_mult=0.0,
        custom_keys={
            '.pos_embed': dict(decay_mult=0.0),
            '.cls_token': dict(decay_mult=0.0),
        }))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=5),
    dict(type='MultiStepLR', begin=0, end=max_iters, by_epoch=False,
         milestones=[16], gamma=0.1),
]
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
default_hooks = dict(logger=dict(interval=5), checkpoint=dict(interval=max_iters))
auto_scale_lr = dict(base_batch_size=2)
