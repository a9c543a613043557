"""A position-embedding table's grid is the one it was stored for: recorded with the state dict
(DinoVim and LinearViT write it into the state dict's metadata) or in a checkpoint's meta
(meta['backbone_layouts']), never inferred as a square from the number of rows (a 16 x 4 table
was resampled as 8 x 8; a 128 x 32 one was used as it was by a 32 x 128 model, transposed).

The oracle resamples the stored grid with torch's F.interpolate on the (h, w) grid by hand.
"""
import os.path as osp
import sys

import pytest
import torch
import torch.nn.functional as F

import dinomamba_mm  # noqa: F401
from dinomamba_mm.checkpoints import load_checkpoint_into
from dinomamba_mm.models.backbones import DinoMambaReg, DinoVim, LinearViT

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
sys.path.insert(0, osp.join(ROOT, 'tests'))
from helpers.paper_files import paper_backbone, paper_dino_checkpoint  # noqa: E402

ARCH = dict(embed_dims=8, num_layers=1, headdim=4, d_state=4)
VIT_ARCH = dict(embed_dims=8, num_layers=1, num_heads=2, feedforward_channels=16)


def resampled(table: torch.Tensor, extra: int, src, dst, **kwargs) -> torch.Tensor:
    """The oracle: the patch rows as a (C, h, w) image, interpolated to dst, extra rows kept."""
    grid = table[0, extra:].reshape(*src, -1).permute(2, 0, 1)[None]
    grid = F.interpolate(grid, **kwargs)
    assert tuple(grid.shape[-2:]) == tuple(dst)
    return torch.cat([table[:, :extra], grid[0].permute(1, 2, 0).reshape(1, -1, table.shape[-1])],
                     dim=1)


@pytest.mark.parametrize('backbone', ['DinoVim', 'LinearViT'])
@pytest.mark.parametrize('src, dst', [((256, 64), (224, 224)), ((256, 64), (128, 128)),
                                      ((128, 32), (32, 128))])
def test_the_grid_its_state_dict_records_is_resampled(backbone, src, dst):
    """16 x 4 -> 14 x 14; 16 x 4 -> 8 x 8 (the same number of rows: it was used as it was);
    8 x 2 -> 2 x 8, transposed. LinearViT inherited mmpretrain ViT's int(sqrt(rows)) side."""
    def build(img_size):
        if backbone == 'DinoVim':
            return DinoVim(arch=ARCH, img_size=img_size, patch_size=16)
        return LinearViT(arch=VIT_ARCH, img_size=img_size, patch_size=16)

    saved = build(src)
    with torch.no_grad():
        saved.pos_embed.normal_()
    model = build(dst)
    model.load_state_dict(saved.state_dict())
    src_grid, dst_grid = (src[0] // 16, src[1] // 16), (dst[0] // 16, dst[1] // 16)
    expected = resampled(saved.pos_embed.detach(), 1, src_grid, dst_grid, size=dst_grid,
                         mode='bicubic', align_corners=False)
    torch.testing.assert_close(model.pos_embed.detach(), expected)


def test_the_papers_convention_resamples_a_recorded_non_square_grid():
    saved = DinoMambaReg(arch=ARCH, num_registers=2, img_size=(96, 32), patch_size=16,
                         token_layout='paper')
    with torch.no_grad():
        saved.pos_embed.normal_()
    model = DinoMambaReg(arch=ARCH, num_registers=2, img_size=64, patch_size=16,
                         token_layout='paper')
    model.load_state_dict(saved.state_dict())
    expected = resampled(saved.pos_embed.detach(), 2, (6, 2), (4, 4),
                         scale_factor=(4.1 / 6, 4.1 / 2), mode='bicubic')
    torch.testing.assert_close(model.pos_embed.detach(), expected)


def test_a_checkpoints_recorded_grid_reaches_the_backbone(tmp_path):
    """A state dict without metadata (a converted or older checkpoint) whose checkpoint meta
    records the grid: the checked loader hands the record to the backbone."""
    saved = DinoVim(arch=ARCH, img_size=(256, 64), patch_size=16)
    path = str(tmp_path / 'teacher.pth')
    record = dict(type='DinoVim', token_layout='interleaved', pos_embed_grid=[16, 4])
    state = {f'backbone.{k}': v for k, v in saved.state_dict().items()}  # no _metadata
    torch.save(dict(state_dict=state, meta=dict(backbone_layouts=dict(backbone=record))), path)
    model = DinoVim(arch=ARCH, img_size=224, patch_size=16)
    load_checkpoint_into(model, path)
    expected = resampled(saved.pos_embed.detach(), 1, (16, 4), (14, 14), size=(14, 14),
                         mode='bicubic', align_corners=False)
    torch.testing.assert_close(model.pos_embed.detach(), expected)


def test_a_grid_that_is_neither_recorded_nor_square_is_refused():
    table = DinoVim(arch=ARCH, img_size=(48, 64), patch_size=16).state_dict()  # 3 x 4
    plain = {key: value for key, value in table.items()}  # no metadata: no grid recorded
    model = DinoVim(arch=ARCH, img_size=64, patch_size=16)
    with pytest.raises(ValueError) as error:
        model.load_state_dict(plain)
    assert str(error.value).startswith(
        'pos_embed of shape (1, 13, 8) records no patch grid, and its 12 patch rows (after 1 '
        'extra tokens) are not a square grid')
    with pytest.raises(ValueError, match='records a 5 x 5 patch grid, but its table of shape '
                                         r'\(1, 13, 8\) holds 12 patch rows'):
        wrong = dict(plain)
        wrong_metadata = {'': {'pos_embed_grid': [5, 5]}}
        wrong = type(table)(wrong)
        wrong._metadata = wrong_metadata
        model.load_state_dict(wrong)


def test_an_unrecorded_square_table_is_still_resampled_as_square():
    table = DinoVim(arch=ARCH, img_size=64, patch_size=16).state_dict()
    plain = {key: value for key, value in table.items()}
    model = DinoVim(arch=ARCH, img_size=32, patch_size=16)
    model.load_state_dict(plain)
    expected = resampled(table['pos_embed'], 1, (4, 4), (2, 2), size=(2, 2), mode='bicubic',
                         align_corners=False)
    torch.testing.assert_close(model.pos_embed.detach(), expected)


def test_a_paper_file_whose_table_is_not_square_is_refused(tmp_path):
    """The paper's files record no grid: their tables are square (14 x 14, MambaR's 7 x 7)."""
    path = str(tmp_path / 'checkpoint.pth')
    torch.save(paper_dino_checkpoint(paper_backbone(0, patches=12, dim=16, depth=1)), path)
    model = DinoVim(arch=dict(embed_dims=16, num_layers=1, headdim=8, d_state=8), img_size=64,
                    patch_size=16, token_layout='paper')
    with pytest.raises(ValueError, match=r"checkpoint '.*' holds a paper table \(pos_embed of "
                                         r'shape \(1, 13, 16\)\) whose 12 patch rows are not a '
                                         'square grid'):
        load_checkpoint_into(model, path)
