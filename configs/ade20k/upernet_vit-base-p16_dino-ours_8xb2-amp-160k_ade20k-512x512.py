# UperNet on ViT-B/16 (mmpretrain's VisionTransformer) initialised from the teacher of our DINO run
# (dino-ours, configs/dino/dino_vit-base-...): blocks 4, 6, 8, 12 as in BEiT / MAE, layer-wise lr
# decay 0.65 over the 12 blocks (their recipe); otherwise the DinoVim-B recipe. Paper: 43.2 mIoU.
# The teacher backbone (keys teacher.backbone.*) is loaded with the Pretrained initializer of scope
# dinomamba_mm (the checked loader), which runs after ViT's own init_weights (a strict initializer given as init_cfg would run before
# it and have pos_embed and the FFN weights re-randomised); every backbone key is in the
# checkpoint, tests/test_dense checks the loaded values.
_base_ = [
    '../_base_/models/upernet_dinovim.py',
    '../_base_/datasets/ade20k.py',
    '../_base_/schedules/schedule_ade20k_160k.py',
]
checkpoint = 'work_dirs/dino_vit-base-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmpretrain.VisionTransformer',
        arch='base',
        img_size=512,
        patch_size=16,
        out_type='featmap',
        out_indices=(3, 5, 7, 11),
        final_norm=True,
        drop_path_rate=0.1,
        # _scope_: mmengine's own Pretrained loads NaN or mismatched weights with a log line
        init_cfg=dict(type='Pretrained', _scope_='dinomamba_mm', checkpoint=checkpoint,
                      prefix='teacher.backbone.')))
optim_wrapper = dict(paramwise_cfg=dict(layer_decay_rate=0.65))
