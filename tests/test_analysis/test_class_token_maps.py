"""Class-token maps and mixing matrices of the three mixers against independent formulations."""
import numpy as np
import pytest
import torch
from mmpretrain.models.backbones import VisionTransformer

from dinomamba_mm.analysis import (capture_mixer_inputs, extract_class_token_maps, find_mixer,
                                   mixer_mixing_matrices)
from dinomamba_mm.ops.ssd.naive import ssd_scan_naive
from dinomamba_mm.registry import MODELS

ARCH_VIT = dict(embed_dims=32, num_layers=2, num_heads=4, feedforward_channels=64)
ARCH_VIM = dict(embed_dims=32, num_layers=2, headdim=16, d_state=8, chunk_size=8)


def _eval(model):
    model.eval()
    return model


@pytest.fixture(autouse=True)
def no_grad():
    with torch.no_grad():
        yield


@pytest.fixture(scope='module')
def images():
    return torch.randn(2, 3, 24, 32, generator=torch.Generator().manual_seed(0))


def _vit(**kwargs):
    torch.manual_seed(0)
    return _eval(VisionTransformer(arch=ARCH_VIT, img_size=32, patch_size=8, **kwargs))


def _linear_vit(**kwargs):
    torch.manual_seed(1)
    return _eval(MODELS.build(dict(type='dinomamba_mm.LinearViT', arch=ARCH_VIT, img_size=32,
                                   patch_size=8, **kwargs)))


def _dinovim(**kwargs):
    torch.manual_seed(2)
    return _eval(MODELS.build(dict(type='dinomamba_mm.DinoVim', arch=ARCH_VIM, img_size=32,
                                   patch_size=8, drop_path_rate=0., **kwargs)))


def _mixer_input(backbone, images, layer):
    with capture_mixer_inputs(backbone, [layer]) as captured:
        backbone(images)
    return captured[layer]


@pytest.mark.parametrize('build', [_vit, _linear_vit])
def test_attention_matrix_reproduces_the_layer(build, images):
    """M V through the output projection equals the attention module's own forward."""
    backbone = build()
    x = _mixer_input(backbone, images, 1)
    attn = find_mixer(backbone.layers[1])
    (matrix, ) = mixer_mixing_matrices(attn, x).values()
    batch, length, _ = x.shape
    v = attn.qkv(x).reshape(batch, length, 3, attn.num_heads, attn.head_dims)[:, :, 2]
    mixed = torch.einsum('bhij,bjhd->bihd', matrix, v).reshape(batch, length, -1)
    torch.testing.assert_close(attn.proj(mixed), attn(x), rtol=1e-4, atol=1e-5)


def test_linear_attention_rank_is_at_most_head_dims(images):
    backbone = _linear_vit()
    x = _mixer_input(backbone, images, 0)
    (matrix, ) = mixer_mixing_matrices(find_mixer(backbone.layers[0]), x).values()
    head_dims = ARCH_VIT['embed_dims'] // ARCH_VIT['num_heads']
    assert matrix.shape[-1] == 13 and head_dims == 8  # L = 1 + 3 * 4 > d
    ranks = np.linalg.matrix_rank(matrix.numpy())  # float32: tolerance uses its eps
    assert (ranks <= head_dims).all() and ranks.max() == head_dims


@pytest.mark.parametrize('num_registers', [0, 3])
def test_dinovim_mixing_matrices_reproduce_the_ssd_scan(num_registers, images):
    """M x + D x of each direction equals the float64 sequential recurrence, and the mixer
    output rebuilt from M equals the mixer's forward."""
    backbone = _dinovim(num_registers=num_registers)
    x = _mixer_input(backbone, images, 1)
    mixer = find_mixer(backbone.layers[1])
    matrices = mixer_mixing_matrices(mixer, x)
    inputs = mixer.ssd_inputs(x)
    ys = []
    for name in ('forward', 'backward'):
        d = inputs[name]
        expected = ssd_scan_naive(d['x'], d['dt'], d['A'], d['B'], d['C'], D=d['D'],
                                  dt_bias=d['dt_bias'], dt_softplus=True,
                                  reverse=d['reverse'])
        got = torch.einsum('bhij,bjhp->bihp', matrices[name].double(), d['x'].double()) \
            + d['D'].double()[:, None] * d['x'].double()
        torch.testing.assert_close(got, expected.double(), rtol=1e-4, atol=1e-5)
        ys.append(got.float().flatten(-2))
    torch.testing.assert_close(matrices['combined'],
                               (matrices['forward'] + matrices['backward']) / 2)
    rebuilt = mixer.out_proj((mixer.norm(ys[0], inputs['z']) + mixer.norm_b(ys[1], inputs['z']))
                             / 2)
    torch.testing.assert_close(rebuilt, mixer(x), rtol=1e-4, atol=1e-5)


def test_similarity_map_is_cosine_of_raw_tokens(images):
    maps = extract_class_token_maps(_vit(), images, [0], 'similarity')
    oracle = _vit(out_type='raw', out_indices=[0])
    (tokens, ) = oracle(images)
    tokens = tokens.double().numpy()
    cls, patches = tokens[:, :1], tokens[:, 1:]
    cosine = (cls * patches).sum(-1) / (np.linalg.norm(cls, axis=-1)
                                        * np.linalg.norm(patches, axis=-1))
    assert maps.maps.shape == (2, 1, 1, 3, 4) and maps.names == ['cls']
    np.testing.assert_allclose(maps.maps[:, 0, 0].numpy(), cosine.reshape(2, 3, 4), atol=1e-5)


def test_dinovim_similarity_reads_the_middle_class_token(images):
    backbone = _dinovim()
    maps = extract_class_token_maps(backbone, images, [-1], 'similarity')
    (tokens, ) = _dinovim(out_type='raw')(images)  # same seed: same weights
    middle = 12 // 2  # 12 patches, class token inserted in the middle
    patches = torch.cat([tokens[:, :middle], tokens[:, middle + 1:]], dim=1)
    cosine = torch.cosine_similarity(tokens[:, middle:middle + 1], patches, dim=-1)
    torch.testing.assert_close(maps.maps[:, 0, 0], cosine.reshape(2, 3, 4), atol=1e-5,
                               rtol=0)


def test_attention_maps_are_class_token_rows(images):
    backbone = _vit()
    x = _mixer_input(backbone, images, 1)
    (full, ) = mixer_mixing_matrices(find_mixer(backbone.layers[1]), x).values()
    maps = extract_class_token_maps(backbone, images, [1], 'attention')
    assert maps.names == [f'head{h}' for h in range(4)]
    torch.testing.assert_close(maps.maps[:, 0], full[:, :, 0, 1:].reshape(2, 4, 3, 4))
    backbone = _linear_vit()
    linear = extract_class_token_maps(backbone, images, [0], 'attention')
    # phi(q_cls) . phi(k_j) over the patches j, in float64 from the layer's own projections
    x = _mixer_input(backbone, images, 0).double()
    attn = backbone.layers[0].attn
    qkv = x @ attn.qkv.weight.double().T + attn.qkv.bias.double()
    q, k = qkv.reshape(2, 13, 3, 4, 8).permute(2, 0, 3, 1, 4)[:2].softmax(dim=-1)
    rows = torch.einsum('bhd,bhjd->bhj', q[:, :, 0], k[:, :, 1:])
    torch.testing.assert_close(linear.maps[:, 0].double(), rows.reshape(2, 4, 3, 4))


def test_register_maps_each_and_mean(images):
    backbone = _dinovim(num_registers=3)
    each = extract_class_token_maps(backbone, images, [1], 'attention', query='each',
                                    mamba_kinds=('forward', 'backward'))
    mean = extract_class_token_maps(backbone, images, [1], 'attention', query='mean',
                                    mamba_kinds=('forward', 'backward'))
    assert each.maps.shape == (2, 1, 3 * 2 * 4, 3, 4)
    assert each.names[:5] == ['tok3_forward_head0', 'tok3_forward_head1', 'tok3_forward_head2',
                              'tok3_forward_head3', 'tok3_backward_head0']
    assert mean.names[0] == 'forward_head0'
    torch.testing.assert_close(mean.maps, each.maps.unflatten(2, (3, 8)).mean(2))


def test_bad_arguments(images):
    backbone = _vit()
    with pytest.raises(ValueError, match='map_type must be one of'):
        extract_class_token_maps(backbone, images, [0], 'gradcam')
    with pytest.raises(ValueError, match=r'layer_indices must be an int or a sequence of ints '
                                         r'in \[-2, 2\), got \[5\]'):
        extract_class_token_maps(backbone, images, [5])
    with pytest.raises(ValueError, match='query must be one of'):
        extract_class_token_maps(backbone, images, [0], query='first')
    with pytest.raises(ValueError, match='has no class token'):
        extract_class_token_maps(_vit(with_cls_token=False, out_type='featmap'), images, [0])


@pytest.mark.parametrize('map_type', ['similarity', 'attention'])
def test_empty_batch_gives_empty_maps(map_type):
    """An empty batch runs through the blocks like any other, so the mixer inputs the
    attention maps read are recorded for it too."""
    result = extract_class_token_maps(_dinovim(), torch.zeros(0, 3, 32, 32), [0, 1], map_type)
    assert result.maps.shape[:2] == (0, 2) and result.maps.shape[-2:] == (4, 4)
