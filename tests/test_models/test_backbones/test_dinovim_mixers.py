"""DinoVim's token mixer is a config field: other registered mixers train and give their mixing
matrices; the default one is the paper's and still loads the shipped demo checkpoint."""
import os.path as osp

import pytest
import torch
from mmengine.config import Config

from dinomamba_mm.analysis import (capture_mixer_inputs, extract_class_token_maps, find_mixer,
                                   mixer_mixing_matrices)
from dinomamba_mm.analysis.backbone_loading import build_backbone
from dinomamba_mm.registry import MODELS

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
ARCH = dict(embed_dims=32, num_layers=2)


def _dinovim(mixer_cfg, arch=ARCH, seed=0):
    torch.manual_seed(seed)
    return MODELS.build(dict(type='dinomamba_mm.DinoVim', arch=arch, img_size=32, patch_size=8,
                             drop_path_rate=0., mixer_cfg=mixer_cfg))


@pytest.mark.parametrize('mixer, name', [('LinearMultiheadAttention', 'linear'),
                                         ('SoftmaxAttention', 'softmax')])
def test_another_mixer_is_a_config_change(mixer, name):
    """DinoVim with an attention mixer: the mixer's parameters under layers.{i}.mixer, a
    training step that moves every parameter, then mixing matrices that reproduce each mixer's
    output (Y = M V through its projection) and class-token maps from them."""
    model = _dinovim(dict(type=f'dinomamba_mm.{mixer}', num_heads=4))
    assert {k.split('.', 3)[-1] for k in model.state_dict() if k.startswith('layers.1.mixer.')} \
        == {'qkv.weight', 'qkv.bias', 'proj.weight', 'proj.bias'}
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    (feature, ) = model(images)
    feature.square().mean().backward()
    assert all(torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
               for p in model.parameters())
    optimizer.step()
    assert all(not torch.equal(p, before[k]) for k, p in model.named_parameters())

    model.eval()
    with torch.no_grad(), capture_mixer_inputs(model, [0, 1]) as captured:
        model(images)
    for layer in (0, 1):
        attention = find_mixer(model.layers[layer])
        assert attention is model.layers[layer].mixer
        matrices = mixer_mixing_matrices(attention, captured[layer])
        assert list(matrices) == [name] and matrices[name].shape == (2, 4, 17, 17)
        x = captured[layer]
        v = attention.qkv(x).reshape(2, 17, 3, 4, 8)[:, :, 2]
        with torch.no_grad():
            mixed = torch.einsum('bhij,bjhd->bihd', matrices[name], v).flatten(2)
            torch.testing.assert_close(attention.proj(mixed), attention(x), rtol=1e-4,
                                       atol=1e-5)
    maps = extract_class_token_maps(model, images, [1], 'attention')
    assert maps.maps.shape == (2, 1, 4, 4, 4) and maps.names == [f'head{h}' for h in range(4)]


def test_mixer_sizes_may_sit_in_arch_or_mixer_cfg_but_not_both():
    """A custom arch may give the mixer its sizes (num_heads here) or leave them to mixer_cfg;
    the named archs hold the Mamba-2 mixer's sizes, which an attention mixer does not take."""
    in_arch = _dinovim(dict(type='dinomamba_mm.LinearMultiheadAttention'),
                       arch=dict(ARCH, num_heads=4))
    in_cfg = _dinovim(dict(type='dinomamba_mm.LinearMultiheadAttention', num_heads=4))
    for a, b in zip(in_arch.state_dict().values(), in_cfg.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"mixer_cfg keys \['num_heads'\] belong in arch"):
        _dinovim(dict(type='dinomamba_mm.LinearMultiheadAttention', num_heads=4),
                 arch=dict(ARCH, num_heads=4))
    with pytest.raises(ValueError) as info:
        _dinovim(dict(type='dinomamba_mm.SoftmaxAttention', num_heads=4), arch='tiny')
    assert str(info.value).startswith(
        "arch has unknown keys ['chunk_size', 'd_conv', 'd_state', 'expand', 'headdim', "
        "'ngroups'] for SoftmaxAttention; allowed: ['embed_dims', 'num_layers', 'num_heads', ")
    assert str(info.value).endswith("(the named archs give the Mamba-2 mixer's sizes: another "
                                    'mixer takes a custom arch dict)')
    with pytest.raises(ValueError, match=r"mixer_cfg has unknown keys \['heads'\]; allowed: "
                                         r"\['num_heads', "):
        _dinovim(dict(type='dinomamba_mm.LinearMultiheadAttention', heads=4))
    with pytest.raises(KeyError, match="mixer_cfg type 'Nope' is not a registered model"):
        _dinovim(dict(type='Nope'))


def test_the_default_mixer_is_the_papers_and_loads_the_demo_checkpoint():
    """Without a type, mixer_cfg builds BidirectionalMamba2Mixer with arch's sizes; the demo
    checkpoint loads strictly into its config's backbone (keys layers.{i}.mixer.* as stored)."""
    cfg = Config.fromfile(osp.join(ROOT, 'configs', 'demo', 'dino_dinovim-demo_synthetic.py'))
    model = build_backbone(cfg, osp.join(ROOT, 'checkpoints', 'demo', 'dinovim.pth'))
    assert model.mixer_cfg['type'] == 'dinomamba_mm.BidirectionalMamba2Mixer'
    assert all(type(layer.mixer).__name__ == 'BidirectionalMamba2Mixer'
               for layer in model.layers)
    stored = torch.load(osp.join(ROOT, 'checkpoints', 'demo', 'dinovim.pth'), map_location='cpu',
                        weights_only=False)['state_dict']
    keys = {k[len('backbone.'):] for k in stored if k.startswith('backbone.')}
    assert keys == set(model.state_dict())
    assert 'layers.0.mixer.A_log_b' in keys and 'layers.0.mixer.out_proj.weight' in keys
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, stored['backbone.' + key], rtol=0, atol=0)
