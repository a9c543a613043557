"""LinearViT: mmpretrain's ViT with linear attention in every layer."""
import pytest
import torch
from mmpretrain.models import VisionTransformer

from dinomamba_mm.models.backbones import LinearViT
from dinomamba_mm.models.layers import LinearMultiheadAttention

TINY = dict(embed_dims=32, num_layers=3, num_heads=4, feedforward_channels=64)


def test_every_layer_uses_linear_attention_with_its_drop_path():
    model = LinearViT(arch=TINY, drop_path_rate=0.2)
    assert all(type(layer.attn) is LinearMultiheadAttention for layer in model.layers)
    assert [layer.attn.out_drop.drop_prob for layer in model.layers] == pytest.approx(
        [0., 0.1, 0.2])


def test_layer_output_uses_phi_q_phi_k_attention():
    torch.manual_seed(0)
    model = LinearViT(arch=TINY, out_type='raw', out_indices=[0], final_norm=False).eval()
    layer = model.layers[0]
    captured = {}
    layer.register_forward_pre_hook(lambda m, a: captured.setdefault('x', a[0]))
    with torch.no_grad():
        out, = model(torch.randn(1, 3, 64, 64))
        x = captured['x']
        h = layer.ln1(x)
        q, k, v = (h @ layer.attn.qkv.weight.T + layer.attn.qkv.bias).split(32, -1)
        heads = [(q[..., s].softmax(-1) @ k[..., s].softmax(-1).mT) @ v[..., s]
                 for s in (slice(i * 8, (i + 1) * 8) for i in range(4))]
        x = x + layer.attn.proj(torch.cat(heads, -1))
        expected = layer.ffn(layer.ln2(x), identity=x)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('size', [(224, 224), (256, 320)])
def test_output_shapes(size):
    img = torch.randn(1, 3, *size)
    h, w = size[0] // 16, size[1] // 16
    for out_type, shape in (('cls_token', (1, 32)), ('featmap', (1, 32, h, w)),
                            ('avg_featmap', (1, 32)), ('raw', (1, h * w + 1, 32))):
        model = LinearViT(arch=TINY, out_type=out_type, out_indices=[0, -1]).eval()
        with torch.no_grad():
            outs = model(img)
        assert [o.shape for o in outs] == [shape, shape]


@pytest.mark.parametrize('arch, vit_arch', [('base', 'base'), ('deit-small', 'deit-small'),
                                            ('tiny', 'deit-tiny')])
def test_parameter_counts_equal_vit(arch, vit_arch):
    with torch.device('meta'):
        linear = LinearViT(arch=arch)
        vit = VisionTransformer(arch=vit_arch)
    count = sum(p.numel() for p in linear.parameters())
    assert count == sum(p.numel() for p in vit.parameters())
    if arch == 'base':
        assert 85e6 < count < 86e6


def test_frozen_stages_cover_the_swapped_attention_and_norm_eval():
    model = LinearViT(arch=TINY, frozen_stages=2, norm_eval=True)
    model.train()
    assert not any(p.requires_grad for p in model.layers[1].attn.parameters())
    assert all(p.requires_grad for p in model.layers[2].attn.parameters())
    assert not model.layers[0].training and model.layers[2].attn.training
    assert not model.layers[2].ln1.training


def test_attention_dropout_is_refused():
    with pytest.raises(ValueError, match='attn_drop_rate'):
        LinearViT(arch=TINY, attn_drop_rate=0.1)
