"""The configs carrying the paper's model names build the paper's network, and no probe or dense
config loads a teacher of another token layout.

The paper's network (its models_vim.py / models_mambar.py, main_dino_*.py): Vim with
token_layout='paper' and a 14x14 table (img_size 224); MambaR with a 7x7 table (img_size=[112]),
also resized with DINO's convention, i.e. token_layout='paper'.
"""
import glob
import os.path as osp
import sys

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from dinomamba_mm.checkpoints import model_layouts, model_zoo
from dinomamba_mm.engine.safeguards import BackboneLayoutHook
from dinomamba_mm.registry import MODELS

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, osp.join(ROOT, 'tests'))
from helpers.paper_files import paper_backbone, paper_dino_checkpoint, paper_linear_head  # noqa
from helpers.tiny_cls_data import write_tiny_cls_dataset  # noqa: E402
from helpers.tools import load_tool  # noqa: E402

DINO = osp.join(ROOT, 'configs', 'dino')
BENCH = osp.join(DINO, 'benchmarks')
TINY = dict(embed_dims=16, num_layers=8, headdim=8, d_state=4)
PAPER_NETWORKS = {  # name in configs/dino: (type, img_size)
    'dinovim-tiny': ('dinomamba_mm.DinoVim', 224), 'dinovim-small': ('dinomamba_mm.DinoVim', 224),
    'dinovim-base': ('dinomamba_mm.DinoVim', 224),
    'dinomambareg-base': ('dinomamba_mm.DinoMambaReg', 112)}


@pytest.mark.parametrize('name', sorted(PAPER_NETWORKS))
def test_dino_configs_named_after_the_papers_models_build_its_network(name):
    kind, img_size = PAPER_NETWORKS[name]
    backbone = Config.fromfile(osp.join(DINO, f'dino_{name}-p16_8xb64-amp-coslr-100e_in1k.py')
                               ).model.backbone
    assert (backbone.type, backbone.token_layout, backbone.img_size) == (kind, 'paper', img_size)
    variant = Config.fromfile(
        osp.join(DINO, f'dino_{name}-interleaved-p16_8xb64-amp-coslr-100e_in1k.py')).model.backbone
    assert (variant.type, variant.token_layout, variant.img_size) == (kind, 'interleaved', 224)


def _dinovim_configs():
    """Every probe / classifier / dense config whose backbone is a DinoVim / DinoMambaReg."""
    paths = glob.glob(osp.join(BENCH, '**', '*.py'), recursive=True)
    paths += glob.glob(osp.join(ROOT, 'configs', 'ade20k', '*dinovim*.py'))
    paths += glob.glob(osp.join(ROOT, 'configs', 'coco', '*dinovim*.py'))
    return sorted(p for p in paths
                  if any(name in osp.basename(p) for name in ('dinovim', 'dinomamba')))


@pytest.mark.parametrize('path', _dinovim_configs(), ids=osp.basename)
def test_no_probe_or_dense_config_loads_a_teacher_of_another_layout(path, tmp_path):
    """A DINO run of the other layout, recorded in its checkpoint meta, is refused by the config's
    loader (FrozenBackbone for probes, PaperCheckpoint for dense configs) naming both layouts;
    the run of the config's own layout loads."""
    cfg = Config.fromfile(path)
    assert cfg.default_hooks.backbone_layout.type == 'dinomamba_mm.BackboneLayoutHook'
    probe = cfg.model.backbone.type == 'dinomamba_mm.FrozenBackbone'
    backbone = cfg.model.backbone.backbone if probe else cfg.model.backbone
    assert backbone.token_layout == 'paper'
    settings = {k: v for k, v in backbone.items() if k not in ('init_cfg', 'type')}
    settings.update(arch=TINY, mixer_cfg=dict(segment_len=None), out_indices=-1)
    kind = MODELS.get(backbone.type)
    for layout in ('interleaved', 'paper'):
        teacher = kind(**dict(settings, token_layout=layout))
        checkpoint = str(tmp_path / f'{layout}.pth')
        state = {f'teacher.backbone.{k}': v for k, v in teacher.state_dict().items()}
        torch.save(dict(state_dict=state, meta=dict(backbone_layouts={
            'teacher.backbone': model_layouts(teacher)['']})), checkpoint)
        if probe:
            loader = MODELS.build(dict(type='dinomamba_mm.FrozenBackbone', checkpoint=checkpoint,
                                       backbone=dict(backbone, arch=TINY, out_indices=-1)))
        else:
            loader = kind(**settings, init_cfg=dict(
                type='dinomamba_mm.PaperCheckpoint', checkpoint=checkpoint,
                prefix='teacher.backbone.'))
        if layout == 'interleaved':
            with pytest.raises(ValueError, match="token_layout='interleaved'.*"
                               "token_layout='paper'"):
                loader.init_weights()
        else:
            loader.init_weights()


# the model names of the zoo and of the config files are the same; blocks read
CLASSIFIERS = {'dinovim-tiny': 8, 'dinovim-small': 4, 'dinovim-base': 8, 'dinomambareg-base': 8}


@pytest.mark.parametrize('prefix', sorted(CLASSIFIERS))
def test_classifier_configs_load_the_released_teacher_and_head(prefix):
    cfg = Config.fromfile(osp.join(BENCH, f'{prefix}-p16_paper-teacher_paper-linear-head_in1k.py'))
    assert cfg.model.type == 'dinomamba_mm.LinearProbeClassifier'
    assert cfg.load_from == model_zoo.PAPER_LINEAR_HEADS[prefix]
    assert cfg.model.backbone.checkpoint == model_zoo.PAPER_CHECKPOINTS[prefix]
    assert len(cfg.model.backbone.backbone.out_indices) == CLASSIFIERS[prefix]


def test_a_classifier_config_scores_a_released_format_head_with_tools_test(tmp_path):
    """The DinoMamba-Reg-B classifier config as documented (tools/test.py CONFIG HEAD), with a
    16-wide backbone, its teacher and head written in the paper's formats, and 8 small images."""
    cfg = Config.fromfile(
        osp.join(BENCH, 'dinomambareg-base-p16_paper-teacher_paper-linear-head_in1k.py'))
    teacher = paper_backbone(0, registers=12, patches=49, dim=16, depth=8, state=4, headdim=8)
    teacher_path = str(tmp_path / 'checkpoint.pth')
    torch.save(paper_dino_checkpoint(teacher), teacher_path)
    weight = torch.randn(1000, 8 * 16, generator=torch.Generator().manual_seed(0))
    head_path = str(tmp_path / 'checkpoint.pth.tar')
    torch.save(paper_linear_head(weight, torch.zeros(1000)), head_path)
    data = write_tiny_cls_dataset(str(tmp_path / 'data'), num_images=8, size=64)
    cfg.model.backbone.checkpoint = teacher_path
    cfg.model.backbone.backbone.arch = TINY
    cfg.model.head.in_channels = 8 * 16
    cfg.test_dataloader = dict(
        batch_size=4, num_workers=0, dataset=dict(
            type='CustomDataset', data_root=data, ann_file='ann.txt', data_prefix='',
            pipeline=[dict(type='LoadImageFromFile'), dict(type='PackInputs')]),
        sampler=dict(type='DefaultSampler', shuffle=False))
    cfg.test_evaluator = dict(type='Accuracy', topk=(1, ))
    config = str(tmp_path / 'classifier.py')
    cfg.dump(config)
    metrics = load_tool('tools/test.py').main([config, head_path, '--work-dir',
                                               str(tmp_path / 'work')])
    init_default_scope('mmpretrain')
    from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS
    probe = MMPRETRAIN_MODELS.build(cfg.model)
    probe.init_weights()  # the teacher; the oracle applies the head by hand
    hits = 0
    from mmpretrain.datasets import CustomDataset
    dataset = CustomDataset(data_root=data, ann_file='ann.txt', data_prefix='',
                            pipeline=[dict(type='LoadImageFromFile'), dict(type='PackInputs')])
    for item in dataset:
        image = probe.data_preprocessor(dict(inputs=[item['inputs']],
                                             data_samples=[item['data_samples']]))['inputs']
        with torch.no_grad():
            feature = torch.cat(probe.backbone(image), dim=1)
        hits += int((feature @ weight.T).argmax() == item['data_samples'].gt_label)
    assert metrics['accuracy/top1'] == pytest.approx(100. * hits / 8)


def test_layout_hook_records_what_the_runner_saves():
    """The hook the configs set writes the record the loaders above check."""
    cfg = Config.fromfile(osp.join(DINO, 'dino_dinomambareg-base-p16_8xb64-amp-coslr-100e_in1k.py'))
    backbone = dict(cfg.model.backbone, arch=TINY)
    model = torch.nn.ModuleDict(dict(backbone=MODELS.build(backbone)))
    checkpoint = dict(meta={})
    BackboneLayoutHook().before_save_checkpoint(type('R', (), dict(model=model))(), checkpoint)
    assert checkpoint['meta']['backbone_layouts'] == {'backbone': dict(
        type='DinoMambaReg', token_layout='paper', pos_embed_grid=[7, 7])}
