"""resize_pos_embed vs torch's F.interpolate on a hand-made grid."""
import pytest
import torch
import torch.nn.functional as F

from dinomamba_mm.models.layers import resize_pos_embed


def _hand_pos_embed():
    # 2 extra tokens, then a 2 x 3 grid of 2 channels: channel 0 = row * 10 + col, channel 1 = -it
    grid = torch.tensor([[0., 1., 2.], [10., 11., 12.]])
    patches = torch.stack([grid, -grid], dim=-1).reshape(1, 6, 2)
    extra = torch.tensor([[[7., 8.], [9., 10.]]])
    return torch.cat([extra, patches], dim=1), grid


def test_size_convention_is_bicubic_interpolation_of_the_grid():
    pos, grid = _hand_pos_embed()
    out = resize_pos_embed(pos, (2, 3), (4, 5), num_extra_tokens=2)
    assert out.shape == (1, 2 + 20, 2)
    torch.testing.assert_close(out[:, :2], pos[:, :2])
    expected = F.interpolate(grid[None, None], size=(4, 5), mode='bicubic', align_corners=False)
    torch.testing.assert_close(out[0, 2:, 0], expected.flatten())
    torch.testing.assert_close(out[0, 2:, 1], -expected.flatten())


def test_dino_convention_uses_offset_scale_factor():
    pos, grid = _hand_pos_embed()
    out = resize_pos_embed(pos, (2, 3), (4, 6), num_extra_tokens=2, convention='dino')
    expected = F.interpolate(grid[None, None], scale_factor=(4.1 / 2, 6.1 / 3), mode='bicubic')
    assert expected.shape[-2:] == (4, 6)
    torch.testing.assert_close(out[0, 2:, 0], expected.flatten())
    size_based = resize_pos_embed(pos, (2, 3), (4, 6), num_extra_tokens=2)
    assert not torch.allclose(size_based, out)


def test_same_grid_is_unchanged_and_bad_shape_raises():
    pos, _ = _hand_pos_embed()
    assert resize_pos_embed(pos, (2, 3), (2, 3), 2) is pos
    with pytest.raises(ValueError, match='pos_embed must have shape'):
        resize_pos_embed(pos, (3, 3), (4, 4), 2)


@pytest.mark.parametrize('mode', ['bicubic', 'bilinear'])
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_size_convention_equals_mmpretrains_resize_pos_embed(mode, dtype):
    from mmpretrain.models.utils import resize_pos_embed as mmpretrain_resize
    pos = torch.randn(1, 1 + 6 * 5, 8, generator=torch.Generator().manual_seed(0)).to(dtype)
    for dst in ((6, 5), (9, 7), (3, 4)):
        ours = resize_pos_embed(pos, (6, 5), dst, num_extra_tokens=1, mode=mode)
        theirs = mmpretrain_resize(pos, (6, 5), dst, mode=mode, num_extra_tokens=1)
        assert ours.dtype == theirs.dtype and torch.equal(ours, theirs)
