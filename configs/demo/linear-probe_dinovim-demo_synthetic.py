# The demo's linear probe through the images (stock route: tools/train.py, tools/test.py,
# tools/deployment/pytorch2onnx.py): linear-probe_features-demo_synthetic.py (the same neck,
# head, optimiser and schedule) with the frozen DinoVim of dino_dinovim-demo_synthetic.py in the
# backbone's place, by default the DINO teacher shipped in checkpoints/demo (with
# model.backbone.checkpoint=None the same DinoVim at random init), reading the demo's 64 px
# scenes every epoch. tools/demo.py extracts the features once instead (the same numbers up to
# the float16 storage of the features, in a fraction of the time).
_base_ = './linear-probe_features-demo_synthetic.py'

image_size = 64
data_root = 'data/synthetic_demo/cls'

model = dict(
    data_preprocessor=dict(
        _delete_=True,
        type='ClsDataPreprocessor',
        num_classes=len(_base_.classes),
        mean=[123.675, 116.28, 103.53],
        std=[58.395, 57.12, 57.375],
        to_rgb=True),
    backbone=dict(
        _delete_=True,
        type='dinomamba_mm.FrozenBackbone',
        checkpoint='checkpoints/demo/dinovim.pth',
        backbone=dict(
            type='dinomamba_mm.DinoVim',
            arch=dict(embed_dims=_base_.embed_dims, num_layers=8, headdim=32, d_state=16,
                      chunk_size=128),
            img_size=image_size,
            patch_size=8,
            out_type='cls_token',
            out_indices=[-1],
            final_norm=True,
            token_layout='interleaved',  # as the demo DINO run (checked on load)
            drop_path_rate=0.)))

# the scenes as they are (64 px), as the features are extracted; RandomFlip can be added
pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile'),
    dict(type='ResizeEdge', scale=image_size, edge='short', backend='pillow',
         interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=image_size),
    dict(type='PackInputs'),
]
images = dict(type='ImageNet', data_root=data_root,
              metainfo=dict(classes=_base_.classes), pipeline=pipeline)
train_dataloader = dict(batch_size=50, num_workers=2, persistent_workers=True,
                        collate_fn=dict(type='pseudo_collate'),
                        dataset=dict(images, _delete_=True, split='train'))
val_dataloader = dict(batch_size=50, num_workers=2, persistent_workers=True,
                      collate_fn=dict(type='pseudo_collate'),
                      dataset=dict(images, _delete_=True, split='val'))
test_dataloader = val_dataloader
