"""The paper's MambaR (DinoMamba-Reg) position embedding through every documented load path.

The paper's MambaR keeps a 7x7 table (``img_size=[112]``) and, every forward, interpolates it
from 7x7 straight to the input's patch grid: bicubic, ``scale_factor = (grid + 0.1) / 7`` (DINO's
convention), the table unchanged when the grid has its 49 patches and the input is square. The
oracle below re-derives that interpolation independently: Keys' cubic kernel (a = -0.75) sampled
at source coordinate ``(i + 0.5) / scale - 0.5`` with the taps clamped to the border, in float64,
as separable row / column weight matrices. The expected features are those of the same network
whose table already is the oracle's table at the input grid (so nothing is resampled), and every
load path of the released file must give them to 1e-4 relative in fp32.
"""
import math
import os.path as osp
import sys

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from dinomamba_mm.checkpoints import model_zoo, paper_to_ours
from dinomamba_mm.models.backbones import DinoMambaReg, FrozenBackbone
from dinomamba_mm.registry import MODELS

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
sys.path.insert(0, osp.join(ROOT, 'tests'))
from helpers.paper_files import paper_backbone, paper_dino_checkpoint  # noqa: E402
from helpers.tools import load_tool  # noqa: E402

ARCH = dict(embed_dims=32, num_layers=8, headdim=8, d_state=8)
REGISTERS, TABLE = 12, 7
SIZES = [(224, 224), (256, 320), (112, 112)]
#: the paper's MambaR as a probe backbone: what the paper-teacher probe config builds
PAPER_MAMBAR = dict(type='dinomamba_mm.DinoMambaReg', arch=ARCH, num_registers=REGISTERS,
                    img_size=112, token_layout='paper', out_type='cls_token',
                    out_source='mixer', out_indices=list(range(-8, 0)), drop_path_rate=0.)


def keys_cubic(x: float, a: float = -0.75) -> float:
    x = abs(x)
    if x <= 1:
        return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
    if x < 2:
        return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a
    return 0.


def resample_weights(n_in: int, n_out: int, scale: float) -> np.ndarray:
    """(n_out, n_in): output i = sum_j w[i, j] * input j, bicubic at a given scale factor."""
    weights = np.zeros((n_out, n_in))
    for i in range(n_out):
        src = (i + 0.5) / scale - 0.5
        for tap in range(math.floor(src) - 1, math.floor(src) + 3):
            weights[i, min(max(tap, 0), n_in - 1)] += keys_cubic(src - tap)
    return weights


def paper_table_at(table: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The paper's interpolate_pos_encoding of a (1, 49, C) table for a (height, width) input."""
    rows, cols = height // 16, width // 16
    if rows * cols == TABLE * TABLE and height == width:
        return table
    grid = table[0].double().numpy().reshape(TABLE, TABLE, -1)
    row_w = resample_weights(TABLE, rows, (rows + 0.1) / TABLE)
    col_w = resample_weights(TABLE, cols, (cols + 0.1) / TABLE)
    out = np.einsum('ai,bj,ijc->abc', row_w, col_w, grid).reshape(1, rows * cols, -1)
    return torch.from_numpy(out).float()


@pytest.fixture(scope='module')
def paper_teacher():
    """The paper-format MambaR teacher (paper key names, 7x7 table)."""
    return paper_backbone(0, registers=REGISTERS, patches=TABLE * TABLE, dim=ARCH['embed_dims'],
                          depth=ARCH['num_layers'], state=ARCH['d_state'],
                          headdim=ARCH['headdim'], pos_scale=0.5)


@pytest.fixture(scope='module')
def raw_file(tmp_path_factory, paper_teacher):
    path = str(tmp_path_factory.mktemp('mambar') / 'checkpoint.pth')
    torch.save(paper_dino_checkpoint(paper_teacher), path)
    return path


def expected_features(paper_teacher, images: torch.Tensor) -> torch.Tensor:
    height, width = images.shape[-2:]
    state = paper_to_ours(paper_teacher)
    table = paper_teacher['pos_embed']
    state['pos_embed'] = torch.cat(
        [paper_teacher['pos_embed_cls'], paper_table_at(table, height, width)], dim=1)
    settings = {k: v for k, v in PAPER_MAMBAR.items() if k != 'type'}
    reference = DinoMambaReg(**dict(settings, img_size=(height, width))).eval()
    reference.load_state_dict(state, strict=True)
    with torch.no_grad():
        return torch.cat(reference(images), dim=1)


def features(backbone: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat(backbone.eval()(images), dim=1)


def load_by_init_cfg(raw_file, tmp_path, monkeypatch):
    model = MODELS.build(dict(PAPER_MAMBAR, init_cfg=dict(type='dinomamba_mm.PaperCheckpoint',
                                                          checkpoint=raw_file)))
    model.init_weights()
    return model


def load_converted(raw_file, tmp_path, monkeypatch):
    converted = str(tmp_path / 'converted.pth')
    load_tool('tools/model_converters/dinomamba_to_mmpretrain.py').main([raw_file, converted])
    model = FrozenBackbone(backbone=PAPER_MAMBAR, checkpoint=converted)
    model.init_weights()
    return model


def load_from_model_zoo(raw_file, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path))
    url = model_zoo.PAPER_CHECKPOINTS['dinomambareg-base']
    cached = model_zoo.cache_path(url)
    torch.hub.os.makedirs(osp.dirname(cached), exist_ok=True)
    torch.save(torch.load(raw_file, weights_only=False), cached)
    model = FrozenBackbone(backbone=PAPER_MAMBAR, checkpoint=url)
    model.init_weights()
    return model


PROBE_CONFIG = osp.join(ROOT, 'configs/dino/benchmarks',
                        'dinomambareg-base-p16_paper-teacher_8xb128-linear-coslr-100e_in1k.py')


def load_by_probe_config(raw_file, tmp_path, monkeypatch):
    """The documented paper-teacher probe config, unchanged but for the width and the file."""
    cfg = Config.fromfile(PROBE_CONFIG)
    cfg.model.backbone.checkpoint = raw_file
    cfg.model.backbone.backbone.arch = ARCH
    cfg.model.head.in_channels = 8 * ARCH['embed_dims']
    init_default_scope('mmpretrain')
    from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS
    classifier = MMPRETRAIN_MODELS.build(cfg.model)
    classifier.init_weights()
    return classifier.backbone


LOAD_PATHS = {'init_cfg': load_by_init_cfg, 'converter': load_converted,
              'model_zoo': load_from_model_zoo, 'probe_config': load_by_probe_config}


@pytest.mark.parametrize('size', SIZES, ids=lambda s: f'{s[0]}x{s[1]}')
@pytest.mark.parametrize('path', sorted(LOAD_PATHS))
def test_every_load_path_gives_the_papers_features(path, size, paper_teacher, raw_file,
                                                   tmp_path, monkeypatch):
    images = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(1))
    expected = expected_features(paper_teacher, images)
    model = LOAD_PATHS[path](raw_file, tmp_path, monkeypatch)
    actual = features(model, images)
    error = ((actual - expected).abs().max() / expected.abs().max()).item()
    print(f'{path} {size[0]}x{size[1]}: max relative error {error:.2e}')
    assert error < 1e-4


def test_the_oracle_differs_from_one_resample_per_grid_and_from_the_size_convention(
        paper_teacher):
    """The figures above can fail: mmpretrain's 'size' convention gives other tables at 224 and
    256x320, and so does a table resampled to 14x14 at load and again per input at 256x320."""
    from dinomamba_mm.models.layers import resize_pos_embed
    table = paper_teacher['pos_embed']

    def far(other, paper):
        return (other - paper).abs().max() > 1e-2 * paper.abs().max()

    for height, width in SIZES[:2]:
        grid = (height // 16, width // 16)
        paper = paper_table_at(table, height, width)
        assert far(resize_pos_embed(table, (7, 7), grid, 0, convention='size'), paper)
    at_load = resize_pos_embed(table, (7, 7), (14, 14), 0, convention='dino')
    twice = resize_pos_embed(at_load, (14, 14), (16, 20), 0, convention='dino')
    assert far(twice, paper_table_at(table, 256, 320))
