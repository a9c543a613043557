"""A user's config that inherits ours through ``_base_ = 'dinomamba_mm::...'`` builds and trains.

mmengine stamps ``_scope_='dinomamba_mm'`` on the objects of such a base and builds them, and
everything they build, in our scope; the classes of mmpretrain / mmseg / mmdet they name must
still be found (dinomamba_mm.registry). One child per config family, written to a temporary
directory that is also the working directory, shrunk to tiny models and a synthetic dataset:
the Runner builds its model, datasets, evaluators and hooks and trains one iteration.
"""
import ast
import glob
import os
import os.path as osp
import re
import subprocess
import sys

import pytest
import torch
from mmengine.config import Config
from mmengine.runner import Runner

import dinomamba_mm  # noqa: F401  (before parsing, as our tools do: mmengine learns dinomamba_mm::)

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, osp.join(ROOT, 'tests'))
from helpers.tools import load_tool  # noqa: E402

TINY_ARCH = "dict(_delete_=True, embed_dims=32, num_layers=4, headdim=16, d_state=8, " \
            "chunk_size=64)"
NO_WORKERS = 'num_workers=0, persistent_workers=False'

DINO = f'''
_base_ = 'dinomamba_mm::dino/dino_dinovim-tiny-p16_8xb64-amp-coslr-100e_in1k.py'
model = dict(
    backbone=dict(arch={TINY_ARCH}, img_size=32, patch_size=8, drop_path_rate=0.),
    neck=dict(in_channels=32, out_channels=64, hidden_channels=64, bottleneck_channels=16),
    head=dict(out_channels=64))
train_dataloader = dict(
    batch_size=2, {NO_WORKERS}, pin_memory=False,
    dataset=dict(data_root='{{data}}/cls', pipeline=[
        dict(type='LoadImageFromFile'),
        dict(type='dinomamba_mm.DINOMultiCrop', num_global_crops=2, num_local_crops=2,
             global_crop_size=32, local_crop_size=16, color_jitter=dict(hue=0.1)),
        dict(type='PackInputs'),
    ]))
optim_wrapper = dict(_delete_=True, type='OptimWrapper',
                     optimizer=dict(type='AdamW', lr=5e-4, weight_decay=0.04),
                     paramwise_cfg=dict(bias_decay_mult=0., flat_decay_mult=0.))
train_cfg = dict(max_epochs=1)
'''

LINEAR_PROBE = f'''
_base_ = 'dinomamba_mm::dino/benchmarks/dinovim-tiny-p16_dino-ours_8xb128-linear-coslr-100e_in1k.py'
model = dict(
    backbone=dict(checkpoint=None, backbone=dict(arch={TINY_ARCH}, img_size=32, patch_size=8,
                                                 out_indices=[-2, -1])),
    head=dict(num_classes=7, in_channels=2 * 32, topk=(1, )))
data_preprocessor = dict(num_classes=7)
classes = ('circle', 'cross', 'hexagon', 'ring', 'square', 'star', 'triangle')
pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
train_dataloader = dict(batch_size=2, {NO_WORKERS}, dataset=dict(
    data_root='{{data}}/cls', metainfo=dict(classes=classes), pipeline=pipeline))
val_dataloader = dict(batch_size=1, {NO_WORKERS}, dataset=dict(
    data_root='{{data}}/cls', metainfo=dict(classes=classes), pipeline=pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(topk=(1, ))
test_evaluator = val_evaluator
train_cfg = dict(max_epochs=1)
'''

ADE20K = f'''
_base_ = ('dinomamba_mm::ade20k/'
          'upernet_dinovim-tiny-p16_paper-teacher_8xb2-amp-160k_ade20k-512x512.py')
norm = dict(type='BN', requires_grad=True)
crop = (64, 64)
model = dict(
    data_preprocessor=dict(size=crop),
    backbone=dict(arch={TINY_ARCH}, img_size=crop, out_indices=(0, 1, 2, 3), init_cfg=None,
                  mixer_cfg=dict(segment_len=None)),
    neck=dict(embed_dim=32, norm_cfg=norm),
    decode_head=dict(in_channels=[32] * 4, channels=16, num_classes=7, norm_cfg=norm),
    auxiliary_head=dict(in_channels=32, channels=16, num_classes=7, norm_cfg=norm),
    test_cfg=dict(crop_size=crop, stride=(48, 48)))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='RandomCrop', crop_size=crop),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(batch_size=2, {NO_WORKERS}, dataset=dict(
    data_root='{{data}}/ade', pipeline=train_pipeline))
val_dataloader = dict({NO_WORKERS}, dataset=dict(data_root='{{data}}/ade',
                                                 pipeline=test_pipeline))
test_dataloader = val_dataloader
optim_wrapper = dict(_delete_=True, type='OptimWrapper',
                     optimizer=dict(type='AdamW', lr=1e-4, weight_decay=0.05),
                     constructor='dinomamba_mm.LayerDecayOptimWrapperConstructor',
                     paramwise_cfg=dict(layer_decay_rate=0.9, flat_decay_mult=0.))
train_cfg = dict(max_iters=1, val_interval=1)
default_hooks = dict(checkpoint=dict(interval=1, save_best=None))
'''

COCO = f'''
_base_ = ('dinomamba_mm::coco/'
          'cascade-mask-rcnn_dinovim-tiny-p16_paper-teacher_16xb4-amp-lsj-100e_coco.py')
size = (96, 96)
model = dict(
    data_preprocessor=dict(batch_augments=None),
    backbone=dict(arch={TINY_ARCH}, img_size=size, out_indices=(0, 1, 2, 3), init_cfg=None,
                  mixer_cfg=dict(segment_len=None)),
    neck=[
        dict(type='mmseg.Feature2Pyramid', embed_dim=32, rescales=[4, 2, 1, 0.5],
             norm_cfg=dict(type='BN', requires_grad=True)),
        dict(type='FPN', in_channels=[32] * 4, out_channels=32, num_outs=5),
    ],
    rpn_head=dict(in_channels=32, feat_channels=32),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=32),
        bbox_head=[dict(type='Shared2FCBBoxHead', in_channels=32, fc_out_channels=32,
                        num_classes=7)] * 3,
        mask_roi_extractor=dict(out_channels=32),
        mask_head=dict(in_channels=32, conv_out_channels=32, num_classes=7)),
    train_cfg=dict(rpn_proposal=dict(nms_pre=100, max_per_img=50)),
    test_cfg=dict(rpn=dict(nms_pre=100, max_per_img=20), rcnn=dict(max_per_img=10)))
classes = ('circle', 'cross', 'hexagon', 'ring', 'square', 'star', 'triangle')
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=size, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs', meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                                          'scale_factor')),
]
train_dataloader = dict(batch_size=2, {NO_WORKERS}, dataset=dict(
    data_root='{{data}}/coco/', metainfo=dict(classes=classes), pipeline=train_pipeline))
val_dataloader = dict({NO_WORKERS}, dataset=dict(
    data_root='{{data}}/coco/', metainfo=dict(classes=classes), pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file='{{data}}/coco/annotations/instances_val2017.json')
test_evaluator = val_evaluator
optim_wrapper = dict(_delete_=True, type='OptimWrapper',
                     optimizer=dict(type='AdamW', lr=1e-4, weight_decay=0.1),
                     constructor='dinomamba_mm.LayerDecayOptimWrapperConstructor',
                     paramwise_cfg=dict(layer_decay_rate=0.8, flat_decay_mult=0.))
train_cfg = dict(max_iters=1, val_interval=1)
default_hooks = dict(checkpoint=dict(interval=1))
'''

DEMO_DINO = f'''
_base_ = 'dinomamba_mm::demo/dino_dinovim-demo_synthetic.py'
model = dict(backbone=dict(arch={TINY_ARCH}), neck=dict(in_channels=32))
train_dataloader = dict(batch_size=2, {NO_WORKERS}, dataset=dict(data_root='{{data}}/cls'))
train_cfg = dict(max_epochs=1)
'''

DEMO_LINEAR_PROBE = f'''
_base_ = 'dinomamba_mm::demo/linear-probe_dinovim-demo_synthetic.py'
model = dict(backbone=dict(checkpoint=None, backbone=dict(arch={TINY_ARCH})),
             neck=[dict(type='dinomamba_mm.LinearProbeNeck', in_type='cls_token'),
                   dict(type='ClsBatchNormNeck', input_features=32)],
             head=dict(in_channels=32))
train_dataloader = dict(batch_size=2, {NO_WORKERS}, dataset=dict(data_root='{{data}}/cls'))
val_dataloader = dict(batch_size=1, {NO_WORKERS}, dataset=dict(data_root='{{data}}/cls'))
test_dataloader = val_dataloader
train_cfg = dict(max_epochs=1)
'''

CHILDREN = {
    'dino': DINO,
    'linear_probe': LINEAR_PROBE,
    'ade20k': ADE20K,
    'coco': COCO,
    'demo_dino': DEMO_DINO,
    'demo_linear_probe': DEMO_LINEAR_PROBE,
}


def foreign_types_in_our_scope(cfg: Config) -> list:
    """Types, not ours, that mmengine will build in scope dinomamba_mm: those of the dicts it
    stamped ``_scope_='dinomamba_mm'`` and of everything nested in them."""
    found = []

    def walk(node, in_our_scope: bool) -> None:
        if isinstance(node, dict):
            in_our_scope = in_our_scope or node.get('_scope_') == 'dinomamba_mm'
            kind = node.get('type')
            if in_our_scope and isinstance(kind, str) and not kind.startswith('dinomamba_mm.'):
                found.append(kind)
            for value in node.values():
                walk(value, in_our_scope)
        elif isinstance(node, (list, tuple)):
            for value in node:
                walk(value, in_our_scope)

    walk(cfg.to_dict(), False)
    return found


@pytest.fixture(scope='module')
def synthetic_data(tmp_path_factory) -> str:
    """2 train / 1 val images of each layout: classification 32 px, ADE 64 px, COCO 96 px."""
    root = str(tmp_path_factory.mktemp('inheritance_data'))
    load_tool('tools/data/make_synthetic.py').make_synthetic(
        root, seed=3, num_train=2, num_val=1, size=32, seg_size=64, det_size=96)
    return root


@pytest.mark.parametrize('family', list(CHILDREN))
def test_child_of_a_dinomamba_config_builds_and_trains(family, synthetic_data, mim_links,
                                                       tmp_path, monkeypatch, one_thread):
    monkeypatch.chdir(tmp_path)  # nothing found relative to the checkout
    child = tmp_path / f'my_{family}.py'
    child.write_text(CHILDREN[family].replace('{data}', synthetic_data))
    cfg = Config.fromfile(str(child))
    assert foreign_types_in_our_scope(cfg), 'nothing of the child is built in our scope'
    train_tool = load_tool('tools/train.py')  # our path: what tools/train.py makes of it
    cfg = train_tool.merge_args(cfg, train_tool.parse_args(
        [str(child), '--work-dir', str(tmp_path / 'work')]))
    cfg.log_level = 'WARNING'
    runner = Runner.from_cfg(cfg)
    runner.train()
    assert runner.iter >= 1
    losses = runner.message_hub.get_scalar('train/loss').current()
    assert torch.isfinite(torch.tensor(losses))


def test_our_train_tool_takes_a_dinomamba_base(synthetic_data, mim_links, tmp_path):
    """The README's way for a stock-less process: tools/train.py imports dinomamba_mm before
    it parses the config, from any working directory; its log holds no false warning."""
    child = tmp_path / 'my_probe.py'
    child.write_text(CHILDREN['demo_linear_probe'].replace('{data}', synthetic_data))
    work_dir = tmp_path / 'work'
    proc = subprocess.run(
        [sys.executable, osp.join(ROOT, 'tools', 'train.py'), str(child), '--work-dir',
         str(work_dir)], cwd=str(tmp_path), capture_output=True, text=True, timeout=600,
        env=dict(os.environ, OMP_NUM_THREADS='1'))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (work_dir / 'epoch_1.pth').is_file()
    # mmengine looks, in a registry of a scope in its package map that has no locations, for
    # <scope>.utils.register_all_modules: every registry of ours has locations
    log = proc.stdout + proc.stderr
    assert 'is not installed and its modules will not be registered' not in log
    assert 'pkg_resources is deprecated' not in log


def base_depth(path: str) -> int:
    """Levels of ``_base_`` under the config at ``path``; a base from another package
    (``'pkg::...'``) counts as one level, whatever it inherits in turn."""
    tree = ast.parse(open(path).read())
    bases = next((ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.Assign)
                  and any(getattr(target, 'id', None) == '_base_' for target in node.targets)),
                 [])
    bases = [bases] if isinstance(bases, str) else bases
    return max((1 if '::' in base else
                1 + base_depth(osp.normpath(osp.join(osp.dirname(path), base)))
                for base in bases), default=0)


CONFIGS = sorted(glob.glob(osp.join(ROOT, 'configs', '**', '*.py'), recursive=True))


def test_no_config_inherits_more_than_three_levels():
    depths = {osp.relpath(path, ROOT): base_depth(path) for path in CONFIGS}
    assert len(depths) > 60 and max(depths.values()) == 3
    assert not {path: depth for path, depth in depths.items() if depth > 3}


def test_each_backbone_size_has_one_spelling_in_file_names():
    """mmpretrain's spelling (``vit-base-p16``), not ``dinovim-b`` beside ``dinovim-base``."""
    names = [osp.basename(path) for path in CONFIGS]
    short = [name for name in names if re.search(r'(?<![a-z0-9])[a-z]+-[tsb]-p16', name)]
    assert not short
    assert any('dinovim-tiny' in name for name in names)
