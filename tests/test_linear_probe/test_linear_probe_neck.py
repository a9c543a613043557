import pytest
import torch
from mmpretrain.models import VisionTransformer

from dinomamba_mm.models.necks import LinearProbeNeck


def test_cls_tokens_laid_side_by_side():
    a = torch.arange(6.).reshape(2, 3)
    b = -torch.arange(6.).reshape(2, 3)
    (feat, ) = LinearProbeNeck()((a, b))
    expected = torch.tensor([[0., 1., 2., -0., -1., -2.],
                             [3., 4., 5., -3., -4., -5.]])
    assert torch.equal(feat, expected)


def test_raw_vit_tokens_match_vit_cls_output_and_manual_pool():
    torch.manual_seed(0)
    common = dict(arch=dict(embed_dims=16, num_layers=2, num_heads=2,
                            feedforward_channels=32),
                  img_size=32, patch_size=8, out_indices=[-1])
    vit_raw = VisionTransformer(out_type='raw', **common)
    vit_cls = VisionTransformer(out_type='cls_token', **common)
    vit_cls.load_state_dict(vit_raw.state_dict())
    vit_raw.eval()
    vit_cls.eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        tokens = vit_raw(x)
        (feat, ) = LinearProbeNeck(in_type='raw',
                                   avgpool_patch_tokens=True)(tokens)
        cls = vit_cls(x)[0]
    assert feat.shape == (2, 32)
    torch.testing.assert_close(feat[:, :16], cls)
    manual_pool = tokens[0][:, 1:17].sum(dim=1) / 16  # 4 x 4 patches
    torch.testing.assert_close(feat[:, 16:], manual_pool)


def test_bad_inputs():
    with pytest.raises(ValueError, match='in_type'):
        LinearProbeNeck(in_type='featmap')
    with pytest.raises(ValueError, match='avgpool_patch_tokens'):
        LinearProbeNeck(avgpool_patch_tokens=True)
    with pytest.raises(ValueError, match=r'inputs\[1\] has shape \(2, 4, 3\)'):
        LinearProbeNeck()((torch.zeros(2, 3), torch.zeros(2, 4, 3)))
    with pytest.raises(TypeError, match='tuple'):
        LinearProbeNeck()(torch.zeros(2, 3))
