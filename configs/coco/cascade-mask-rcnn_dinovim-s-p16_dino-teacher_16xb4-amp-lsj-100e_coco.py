# Cascade Mask R-CNN on DinoVim-S (DINO teacher of the Dino-Mamba paper, Vim/Small, width 512);
# otherwise the DinoVim-B recipe (see cascade-mask-rcnn_dinovim-b-...py).
_base_ = './cascade-mask-rcnn_dinovim-b-p16_dino-teacher_16xb4-amp-lsj-100e_coco.py'
checkpoint = 'https://huggingface.co/Timing1/Dino-Mamba/resolve/main/Vim/Small/checkpoint.pth'
model = dict(
    backbone=dict(arch='small', init_cfg=dict(checkpoint=checkpoint)),
    neck=[
        dict(
            type='mmseg.Feature2Pyramid',
            embed_dim=512,
            rescales=[4, 2, 1, 0.5],
            norm_cfg=dict(type='SyncBN', requires_grad=True)),
        dict(type='FPN', in_channels=[512] * 4, out_channels=256, num_outs=5),
    ])
