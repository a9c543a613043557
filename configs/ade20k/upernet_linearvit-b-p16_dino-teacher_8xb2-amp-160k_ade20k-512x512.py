# UperNet on LinearViT-B/16 (ViT-B with phi(Q) phi(K)^T attention) pretrained with our DINO
# recipe (configs/dino/dino_linearvit-base-...): blocks 4, 6, 8, 12 as in BEiT / MAE, layer-wise
# lr decay 0.65 over the 12 blocks (their recipe); otherwise the DinoVim-B recipe.
# Paper: 29.2 mIoU.
# The teacher backbone (keys teacher.backbone.*) is loaded with mmengine's Pretrained initializer,
# which runs after ViT's own init_weights (a strict initializer given as init_cfg would run before
# it and have pos_embed and the FFN weights re-randomised); every backbone key is in the
# checkpoint, tests/test_dense checks the loaded values.
_base_ = './upernet_dinovim-b-p16_dino-teacher_8xb2-amp-160k_ade20k-512x512.py'
checkpoint = 'work_dirs/dino_linearvit-base-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='dinomamba_mm.LinearViT',
        arch='base',
        img_size=512,
        patch_size=16,
        out_type='featmap',
        out_indices=(3, 5, 7, 11),
        final_norm=True,
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint,
                      prefix='teacher.backbone.')))
optim_wrapper = dict(paramwise_cfg=dict(layer_decay_rate=0.65))
