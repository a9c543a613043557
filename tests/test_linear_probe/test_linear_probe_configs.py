"""The linear-probe configs: feature layout per backbone, Runner runs on the synthetic set
(the demo probe; every ImageNet probe config with a tiny backbone), and the error for a
checkpoint without a teacher."""
import glob
import os.path as osp
import subprocess
import sys

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

import dinomamba_mm  # noqa: F401
from dinomamba_mm.models.backbones.frozen_backbone import FrozenBackbone  # noqa: F401

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
PROBE_DIR = osp.join(REPO, 'configs', 'dino', 'benchmarks')
DEMO_PROBE = osp.join(REPO, 'configs', 'demo', 'linear-probe_dinovim-demo_synthetic.py')

# (file prefix, backbone type, blocks read, width, pooled patch tokens)
EXPECTED = [
    ('dinovim-tiny', 'dinomamba_mm.DinoVim', 8, 256, False),
    ('dinovim-small', 'dinomamba_mm.DinoVim', 4, 512, False),
    ('dinovim-base', 'dinomamba_mm.DinoVim', 8, 768, False),
    ('dinomambareg-base', 'dinomamba_mm.DinoMambaReg', 8, 768, False),
    ('vit-base', 'VisionTransformer', 1, 768, True),
    ('linearvit-base', 'dinomamba_mm.LinearViT', 1, 768, True),
]


@pytest.mark.parametrize('prefix,backbone_type,blocks,width,pooled', EXPECTED)
def test_probe_config_feature_layout(prefix, backbone_type, blocks, width, pooled):
    (path, ) = glob.glob(osp.join(PROBE_DIR, f'{prefix}-p16_dino-ours_*in1k.py'))
    cfg = Config.fromfile(path)
    frozen = cfg.model.backbone
    assert frozen.type == 'dinomamba_mm.FrozenBackbone'
    assert frozen.backbone.type == backbone_type
    out_indices = frozen.backbone.out_indices
    out_indices = [out_indices] if isinstance(out_indices, int) else out_indices
    assert list(out_indices) == list(range(-blocks, 0))
    assert frozen.backbone.drop_path_rate == 0
    assert cfg.model.neck.get('avgpool_patch_tokens', False) is pooled
    assert cfg.model.head.in_channels == (blocks + int(pooled)) * width
    # DINO's linear-probe recipe
    assert cfg.optim_wrapper.optimizer.type == 'SGD'
    assert cfg.optim_wrapper.optimizer.momentum == 0.9
    lr_per_256 = cfg.optim_wrapper.optimizer.lr / cfg.auto_scale_lr.base_batch_size * 256
    assert lr_per_256 == pytest.approx(1e-3)
    assert cfg.train_cfg.max_epochs == 100


# the paper's eval commands (yangtiming/Dino-Mamba README.md and eval.sh): --wd 0.001 for
# vim_small, 0.01 for vim_base and mambar_base, none (eval_linear's default 0) for vim_tiny;
# LinearViT-B and ViT-B have no command there and keep DINO's eval_linear default
PAPER_WEIGHT_DECAY = {'dinovim-tiny': 0., 'dinovim-small': 1e-3, 'dinovim-base': 1e-2,
                      'dinomambareg-base': 1e-2, 'vit-base': 0., 'linearvit-base': 0.}


@pytest.mark.parametrize('path', sorted(glob.glob(osp.join(PROBE_DIR, '*_8xb128-linear-*.py'))),
                         ids=osp.basename)
def test_probe_weight_decay_is_the_papers(path):
    cfg = Config.fromfile(path)
    decay = PAPER_WEIGHT_DECAY[osp.basename(path).split('-p16')[0]]
    assert cfg.optim_wrapper.optimizer.weight_decay == decay
    assert 'paramwise_cfg' not in cfg.optim_wrapper  # eval_linear decays weight and bias alike


def test_dinovim_tiny_probe_builds_with_paper_sizes():
    cfg = Config.fromfile(glob.glob(osp.join(PROBE_DIR, 'dinovim-tiny-p16_dino-ours_*.py'))[0])
    init_default_scope('mmpretrain')
    from mmpretrain.registry import MODELS
    model = MODELS.build(cfg.model)
    num_params = sum(p.numel() for p in model.backbone.parameters())
    assert 10.5e6 < num_params < 10.9e6  # paper: DinoVim-T 10.7M
    assert not any(p.requires_grad for p in model.backbone.parameters())
    assert model.head.fc.in_features == 8 * 256


@pytest.fixture(scope='module')
def tiny_synthetic(tmp_path_factory):
    root = tmp_path_factory.mktemp('synthetic')
    subprocess.run([sys.executable, osp.join(REPO, 'tools/data/make_synthetic.py'),
                    '--out', str(root), '--seed', '1', '--num-train', '8', '--num-val', '4',
                    '--size', '48', '--layouts', 'cls'], check=True,
                   stdout=subprocess.DEVNULL)
    return str(root / 'cls')


def _tiny_probe_cfg(data_root, work_dir, checkpoint=None):
    cfg = Config.fromfile(DEMO_PROBE)
    cfg.work_dir = work_dir
    cfg.model.backbone.checkpoint = checkpoint
    for name in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        cfg[name].update(batch_size=4, num_workers=0, persistent_workers=False)
        cfg[name].dataset.data_root = data_root
    cfg.train_cfg.update(max_epochs=1, val_interval=1)
    cfg.param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True)]
    cfg.default_hooks.checkpoint.interval = 1
    cfg.default_hooks.logger.interval = 1
    return cfg


def test_runner_trains_head_only(tiny_synthetic, tmp_path):
    runner = Runner.from_cfg(_tiny_probe_cfg(tiny_synthetic, str(tmp_path)))
    model = runner.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    runner.train()
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    # the classifier, and the running statistics of the neck's standardising BatchNorm
    assert changed == {'head.fc.weight', 'head.fc.bias', 'neck.1.bn.running_mean',
                       'neck.1.bn.running_var', 'neck.1.bn.num_batches_tracked'}
    assert [name for name, _ in model.neck.named_parameters()] == []
    assert osp.isfile(osp.join(str(tmp_path), 'epoch_1.pth'))


def test_checkpoint_without_teacher_is_named_in_the_error(tmp_path):
    bad = tmp_path / 'not_dino.pth'
    torch.save(dict(state_dict={'head.fc.weight': torch.zeros(7, 4),
                                'data_preprocessor.mean': torch.zeros(3)}), bad)
    cfg = Config.fromfile(DEMO_PROBE)
    cfg.model.backbone.checkpoint = str(bad)
    init_default_scope('mmpretrain')
    from mmpretrain.registry import MODELS
    model = MODELS.build(cfg.model)
    with pytest.raises(ValueError) as info:
        model.init_weights()  # what the Runner calls before training
    message = str(info.value)
    assert str(bad) in message
    assert 'head.fc.weight' in message and 'data_preprocessor.mean' in message


@pytest.mark.parametrize('prefix,hf_path,img_size', [
    ('dinovim-tiny', 'Vim/Tiny', 224), ('dinovim-small', 'Vim/Small', 224),
    ('dinovim-base', 'Vim/Base', 224), ('dinomambareg-base', 'Mambar/Base', 112)])
def test_paper_teacher_configs(prefix, hf_path, img_size):
    """The paper's network: its token layout, and its table size (MambaR: 7x7, img_size=[112])."""
    (path, ) = glob.glob(osp.join(PROBE_DIR, f'{prefix}-p16_paper-teacher_8xb128-*.py'))
    cfg = Config.fromfile(path)
    assert cfg.model.backbone.checkpoint.endswith(f'/{hf_path}/checkpoint.pth')
    assert cfg.model.backbone.backbone.token_layout == 'paper'
    assert cfg.model.backbone.backbone.img_size == img_size


TINY_ARCH = {
    'dinomamba_mm.DinoVim': dict(embed_dims=16, num_layers=8, headdim=8, d_state=4),
    'dinomamba_mm.DinoMambaReg': dict(embed_dims=16, num_layers=8, headdim=8, d_state=4),
    'dinomamba_mm.LinearViT': dict(embed_dims=16, num_layers=2, num_heads=2,
                                   feedforward_channels=32),
    'VisionTransformer': dict(embed_dims=16, num_layers=2, num_heads=2,
                              feedforward_channels=32),
}


@pytest.mark.parametrize('prefix', [e[0] for e in EXPECTED])
def test_every_probe_config_trains_two_iterations(prefix, tiny_synthetic, tmp_path):
    """Each ImageNet probe config, unchanged but for a 16-wide backbone, the synthetic data and
    a teacher checkpoint of that backbone: 2 iterations, then validation; the frozen backbone
    still holds the checkpoint's teacher weights afterwards."""
    (path, ) = glob.glob(osp.join(PROBE_DIR, f'{prefix}-p16_dino-ours_*in1k.py'))
    cfg = Config.fromfile(path)
    inner = cfg.model.backbone.backbone
    inner.update(arch=TINY_ARCH[inner.type], img_size=32)
    if inner.type == 'dinomamba_mm.DinoMambaReg':
        inner.num_registers = 2  # the tiny 2 x 2 patch grid
    blocks = 1 if isinstance(inner.out_indices, int) else len(inner.out_indices)
    pooled = cfg.model.neck.get('avgpool_patch_tokens', False)
    cfg.model.head.in_channels = (blocks + int(pooled)) * 16

    init_default_scope('mmpretrain')
    from mmpretrain.registry import MODELS
    teacher = MODELS.build(inner).state_dict()
    checkpoint = str(tmp_path / 'dino.pth')
    torch.save(dict(state_dict={f'teacher.backbone.{k}': v + 0.01 for k, v in teacher.items()},
                    meta={}), checkpoint)
    cfg.model.backbone.checkpoint = checkpoint
    demo = _tiny_probe_cfg(tiny_synthetic, str(tmp_path / 'work'))  # data at 32 px, batch 4
    for key in ('train_dataloader', 'val_dataloader', 'test_dataloader', 'val_evaluator',
                'test_evaluator', 'train_cfg', 'param_scheduler', 'work_dir'):
        cfg[key] = demo[key]
    cfg.auto_scale_lr = dict(base_batch_size=4, enable=False)
    cfg.default_hooks.update(checkpoint=demo.default_hooks.checkpoint,
                             logger=demo.default_hooks.logger)

    runner = Runner.from_cfg(cfg)
    runner.train()
    assert runner.iter == 2  # 8 images, batch 4
    state = runner.model.state_dict()
    for key, value in teacher.items():
        torch.testing.assert_close(state[f'backbone.backbone.{key}'], value + 0.01, msg=key)
    assert runner.message_hub.get_scalar('val/accuracy/top1') is not None
