# The demo's scenes as a segmentation set (mmseg scope; tools/demo.py, docs/demo.md): the SAME
# 64 px images the DINO models train on (data/synthetic_demo/cls, written by
# tools/data/make_synthetic.py with the demo's options), read with their label maps
# (masks/<split>/<class>/<name>.png: 0 background, k the k-th shape class) in the order of
# meta/<split>_seg.txt (the classes take turns). No resize: the models see the scenes at the
# resolution they were trained at (8 x 8 patches of 8 px).
# Read by tools/analysis/binary_auc.py (test_dataloader: the class-token maps and their
# Binary-AUC) and by the demo's feature extraction (train / val: the probes' class tokens and the
# segmentation head's patch tokens).
default_scope = 'mmseg'
custom_imports = dict(imports=['dinomamba_mm'], allow_failed_imports=False)
data_root = 'data/synthetic_demo/cls'
classes = ('background', 'circle', 'cross', 'hexagon', 'ring', 'square', 'star', 'triangle')
palette = [[0, 0, 0], [220, 20, 60], [0, 128, 255], [255, 160, 0], [0, 170, 80],
           [150, 60, 200], [250, 230, 30], [120, 120, 120]]

pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile'),
    dict(type='dinomamba_mm.LoadSegAnnotations', num_classes=len(classes)),
    dict(type='PackSegInputs'),
]
scenes = dict(
    type='BaseSegDataset',
    data_root=data_root,
    img_suffix='.JPEG',
    seg_map_suffix='.png',
    reduce_zero_label=False,
    metainfo=dict(classes=classes, palette=palette),
    pipeline=pipeline)

train_dataloader = dict(
    batch_size=50,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(scenes, ann_file='meta/train_seg.txt',
                 data_prefix=dict(img_path='train', seg_map_path='masks/train')))
val_dataloader = dict(
    train_dataloader,
    dataset=dict(scenes, ann_file='meta/val_seg.txt',
                 data_prefix=dict(img_path='val', seg_map_path='masks/val')))
test_dataloader = val_dataloader
