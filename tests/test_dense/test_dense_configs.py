"""Every real dense config parses and builds its full model (on the meta device: no memory, no
init), with the recipe the paper / its references state."""
import glob
import os.path as osp

import pytest
import torch
from dense_helpers import REPO
from mmengine import Config
from mmengine.registry import init_default_scope

from dinomamba_mm.checkpoints.model_zoo import PAPER_CHECKPOINTS

ADE_CONFIGS = sorted(glob.glob(osp.join(REPO, 'configs', 'ade20k', 'upernet_*.py')))
COCO_CONFIGS = sorted(glob.glob(osp.join(REPO, 'configs', 'coco', 'cascade-*.py')))
USER_CONFIG = osp.join(REPO, 'configs', 'dinovim_b_ade20k.py')
# backbone parameters in millions at 224 px: docs/paper.md section 3 (DinoVim T / S / B) and ViT-B/16
# (85.8M); LinearViT-B has ViT-B's parameters
PAPER_PARAMS_M = {'dinovim-tiny': 10.7, 'dinovim-small': 40.4, 'dinovim-base': 89.0,
                  'vit-base': 85.8, 'linearvit-base': 85.8}


def _expected_params_m(name: str, image_side: int, width: int) -> float:
    """The 224 px count plus the position embeddings of the larger patch grid."""
    return PAPER_PARAMS_M[name] + ((image_side // 16)**2 - 14**2) * width / 1e6


def _backbone_name(path: str) -> str:
    return osp.basename(path).split('_')[1].rsplit('-p16', 1)[0]


def _build_on_meta(cfg: Config, scope: str):
    init_default_scope(scope)
    registry = __import__(f'{scope}.registry', fromlist=['MODELS']).MODELS
    with torch.device('meta'):
        return registry.build(cfg.model)


def test_every_backbone_has_both_tasks():
    assert len(ADE_CONFIGS) == len(COCO_CONFIGS) == 5
    assert {_backbone_name(p) for p in ADE_CONFIGS} == set(PAPER_PARAMS_M)
    assert {_backbone_name(p) for p in COCO_CONFIGS} == set(PAPER_PARAMS_M)


@pytest.mark.parametrize('path', ADE_CONFIGS + [USER_CONFIG], ids=osp.basename)
def test_ade20k_config_builds_the_paper_recipe(path):
    cfg = Config.fromfile(path)
    assert cfg.default_scope == 'mmseg'
    assert 'dinomamba_mm' in cfg.custom_imports.imports
    name = 'dinovim-base' if path == USER_CONFIG else _backbone_name(path)
    model = _build_on_meta(cfg, 'mmseg')
    params = sum(p.numel() for p in model.backbone.parameters()) / 1e6
    width = cfg.model.neck.embed_dim
    assert params == pytest.approx(_expected_params_m(name, 512, width), rel=0.02)
    assert type(model.decode_head).__name__ == 'UPerHead'
    assert type(model.auxiliary_head).__name__ == 'FCNHead'
    assert model.decode_head.num_classes == 150
    # 512 crops, slide inference, 160k iterations of 16 images, AdamW with layer decay
    assert cfg.crop_size == (512, 512)
    assert cfg.model.test_cfg == dict(mode='slide', crop_size=(512, 512), stride=(341, 341))
    assert cfg.model.data_preprocessor.test_cfg == dict(size_divisor=16)
    assert cfg.train_cfg.max_iters == 160000 and cfg.train_dataloader.batch_size == 2
    assert cfg.optim_wrapper.optimizer.type == 'AdamW'
    assert cfg.optim_wrapper.constructor == 'dinomamba_mm.LayerDecayOptimWrapperConstructor'
    assert cfg.optim_wrapper.paramwise_cfg.layer_decay_rate == (
        0.92 if name.startswith('dinovim') else 0.65)
    _check_init(cfg, name)


@pytest.mark.parametrize('path', COCO_CONFIGS, ids=osp.basename)
def test_coco_config_builds_the_paper_recipe(path):
    cfg = Config.fromfile(path)
    assert cfg.default_scope == 'mmdet'
    name = _backbone_name(path)
    model = _build_on_meta(cfg, 'mmdet')
    params = sum(p.numel() for p in model.backbone.parameters()) / 1e6
    width = cfg.model.neck[0].embed_dim
    assert params == pytest.approx(_expected_params_m(name, 1024, width), rel=0.02)
    assert type(model).__name__ == 'CascadeRCNN' and model.roi_head.num_stages == 3
    assert model.roi_head.with_mask
    # pyramid strides 4, 8, 16, 32 (+ 64 from the FPN) for the anchors
    assert model.rpn_head.prior_generator.strides == [(s, s) for s in (4, 8, 16, 32, 64)]
    assert cfg.model.neck[0].rescales == [4, 2, 1, 0.5]
    assert cfg.image_size == (1024, 1024)
    assert cfg.train_cfg.max_iters == 184375
    assert cfg.optim_wrapper.paramwise_cfg.layer_decay_rate == (
        0.8 if name.startswith('dinovim') else 0.7)
    _check_init(cfg, name)


def _check_init(cfg: Config, name: str) -> None:
    init = cfg.model.backbone.init_cfg
    if name.startswith('dinovim'):
        assert init == dict(type='dinomamba_mm.PaperCheckpoint',
                            checkpoint=PAPER_CHECKPOINTS[name],
                            source='teacher')
        assert cfg.model.backbone.token_layout == 'paper'
    else:
        assert init.type == 'Pretrained' and init.prefix == 'teacher.backbone.'
        assert f'dino_{name}-p16' in init.checkpoint


VIT_CONFIGS = [p for p in ADE_CONFIGS + COCO_CONFIGS if _backbone_name(p) == 'vit-base']


@pytest.mark.parametrize('path', VIT_CONFIGS, ids=osp.basename)
def test_vit_teacher_weights_load_through_the_checked_loader(path, tmp_path):
    """mmpretrain's ViT is not ours: its ``Pretrained`` must still reach the checked loader
    (mmengine's own loads NaN and mismatched weights with a log line), and still be applied
    last (the loaded position embedding is not re-initialised)."""
    from mmengine.registry import DefaultScope

    from dinomamba_mm.checkpoints import CheckpointError
    from dinomamba_mm.registry import MODELS
    cfg = Config.fromfile(path)
    backbone = {k: v for k, v in cfg.model.backbone.items() if k != '_delete_'}
    backbone.update(arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32),
                    img_size=32, out_indices=(0, 1))
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        teacher = MODELS.build({k: v for k, v in backbone.items() if k != 'init_cfg'})
    weights = {f'teacher.backbone.{k}': v + 1 for k, v in teacher.state_dict().items()}

    def load(state_dict):
        file = tmp_path / 'teacher.pth'
        torch.save({'state_dict': state_dict}, file)
        with DefaultScope.overwrite_default_scope(cfg.default_scope):
            model = MODELS.build(dict(backbone, init_cfg=dict(backbone['init_cfg'],
                                                              checkpoint=str(file))))
            model.init_weights()
        return model

    loaded = load(weights)
    for key, value in loaded.state_dict().items():
        torch.testing.assert_close(value, weights[f'teacher.backbone.{key}'], rtol=0, atol=0)
    with pytest.raises(CheckpointError, match='NaN or Inf'):
        load({**weights, 'teacher.backbone.pos_embed': weights['teacher.backbone.pos_embed']
              * float('nan')})
    with pytest.raises(CheckpointError, match='another shape'):
        load({**weights, 'teacher.backbone.ln1.weight': torch.ones(8)})


@pytest.mark.parametrize('path', ADE_CONFIGS + COCO_CONFIGS, ids=osp.basename)
def test_dense_runs_resume_with_their_random_states(path):
    """As the linear probe (tests/test_runner/test_probe_resume.py): a seed fixed before the
    checkpoint is read, and the generators' states in every checkpoint."""
    cfg = Config.fromfile(path)
    assert cfg.randomness.seed is not None
    assert 'dinomamba_mm.RandomStateHook' in [h['type'] for h in cfg.custom_hooks]
