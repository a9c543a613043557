"""Every backbone checks its arguments and inputs alike: same error type, same message.

The expected messages are written out here by hand (the oracle), one list for all backbones.
"""
import pytest
import torch

from dinomamba_mm.models.backbones import DinoMambaReg, DinoVim, LinearViT

DINOVIM_ARCH = dict(embed_dims=32, num_layers=2, headdim=8, d_state=8, chunk_size=16)
VIT_ARCH = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)


def dinovim(**kwargs):
    return DinoVim(**{'arch': DINOVIM_ARCH, 'img_size': 32, 'patch_size': 8, **kwargs})


def linear_vit(**kwargs):
    return LinearViT(**{'arch': VIT_ARCH, 'img_size': 32, 'patch_size': 8, **kwargs})


BACKBONES = [pytest.param(dinovim, id='DinoVim'), pytest.param(linear_vit, id='LinearViT')]


@pytest.mark.parametrize('build', BACKBONES)
@pytest.mark.parametrize('kwargs, error, message', [
    (dict(drop_path_rate=1.0), ValueError, 'drop_path_rate must be a number in [0, 1), got 1.0'),
    (dict(drop_path_rate=1.5), ValueError, 'drop_path_rate must be a number in [0, 1), got 1.5'),
    (dict(drop_path_rate=-0.5), ValueError,
     'drop_path_rate must be a number in [0, 1), got -0.5'),
    (dict(drop_path_rate='0.1'), TypeError,
     "drop_path_rate must be a number in [0, 1), got '0.1'"),
    (dict(drop_rate=1.0), ValueError, 'drop_rate must be a number in [0, 1), got 1.0'),
    (dict(patch_size=0), ValueError, 'patch_size must be an int >= 1, got 0'),
    (dict(patch_size=8.0), TypeError, 'patch_size must be an int >= 1, got 8.0'),
    (dict(in_channels=0), ValueError, 'in_channels must be an int >= 1, got 0'),
    (dict(img_size=4), ValueError,
     'img_size must be an int or an (h, w) pair of ints >= patch_size 8, got 4'),
    (dict(img_size='32'), TypeError,
     "img_size must be an int or an (h, w) pair of ints >= patch_size 8, got '32'"),
    (dict(out_indices='1'), TypeError,
     "out_indices must be an int or a sequence of ints in [-2, 2), got '1'"),
    (dict(out_indices=[0, 1.0]), TypeError,
     'out_indices must be an int or a sequence of ints in [-2, 2), got [0, 1.0]'),
    (dict(out_indices=True), TypeError,
     'out_indices must be an int or a sequence of ints in [-2, 2), got True'),
    (dict(out_indices=2), ValueError,
     'out_indices must be an int or a sequence of ints in [-2, 2), got 2'),
    (dict(out_indices=(0, -3)), ValueError,
     'out_indices must be an int or a sequence of ints in [-2, 2), got (0, -3)'),
])
def test_bad_arguments_name_the_argument_alike(build, kwargs, error, message):
    with pytest.raises(error) as info:
        build(**kwargs)
    assert str(info.value) == message


MODES = "('nearest', 'bilinear', 'bicubic', 'area', 'nearest-exact')"


@pytest.mark.parametrize('build', BACKBONES)
@pytest.mark.parametrize('kwargs, error, message', [
    (dict(frozen_stages=3), ValueError, 'frozen_stages must be an int in [-1, 2], got 3'),
    (dict(frozen_stages=1.0), TypeError, 'frozen_stages must be an int in [-1, 2], got 1.0'),
    (dict(out_indices=[]), ValueError, 'out_indices must hold at least one index, got []'),
    (dict(out_indices=[0, 0]), ValueError,
     'out_indices must not repeat an index (negative ones count from the end of 2), '
     'got [0, 0]'),
    (dict(out_indices=[1, -1]), ValueError,
     'out_indices must not repeat an index (negative ones count from the end of 2), '
     'got [1, -1]'),
])
def test_bad_shared_arguments_name_the_argument(build, kwargs, error, message):
    with pytest.raises(error) as info:
        build(**kwargs)
    assert str(info.value) == message


@pytest.mark.parametrize('build, mode, modes', [
    (dinovim, 'cubic', MODES),
    (linear_vit, 'cubic', "('bilinear', 'bicubic')"),
    # mmpretrain's resize of the position embedding passes align_corners, which these refuse
    (linear_vit, 'nearest', "('bilinear', 'bicubic')"),
    (linear_vit, 'area', "('bilinear', 'bicubic')"),
])
def test_interpolate_modes_the_resize_cannot_take_are_refused(build, mode, modes):
    with pytest.raises(ValueError) as info:
        build(interpolate_mode=mode)
    assert str(info.value) == f"interpolate_mode must be one of {modes}, got '{mode}'"


@pytest.mark.parametrize('build', BACKBONES)
@pytest.mark.parametrize('mode', ['bilinear', 'bicubic'])
def test_interpolate_modes_taken_resize_the_position_embedding(build, mode):
    with torch.no_grad():
        out = build(interpolate_mode=mode, out_type='featmap')(torch.randn(1, 3, 48, 64))
    assert out[-1].shape[-2:] == (6, 8)


@pytest.mark.parametrize('build, arch', [(dinovim, DINOVIM_ARCH), (linear_vit, VIT_ARCH)],
                         ids=['DinoVim', 'LinearViT'])
@pytest.mark.parametrize('field, value, error, expected', [
    ('embed_dims', 'abc', TypeError, 'an int >= 1'),
    ('embed_dims', -32, ValueError, 'an int >= 1'),
    ('embed_dims', 0, ValueError, 'an int >= 1'),
    ('num_layers', 2.5, TypeError, 'an int >= 1'),
    ('num_layers', 0, ValueError, 'an int >= 1'),
])
def test_bad_arch_fields_are_named(build, arch, field, value, error, expected):
    with pytest.raises(error) as info:
        build(arch={**arch, field: value})
    assert str(info.value) == f"arch['{field}'] must be {expected}, got {value!r}"


@pytest.mark.parametrize('field, value, error, message', [
    ('headdim', 0, ValueError, "arch['headdim'] must be an int >= 1, got 0"),
    ('d_conv', 0, ValueError, "arch['d_conv'] must be an int >= 1, got 0"),
    ('expand', 0, ValueError, "arch['expand'] must be an int >= 1, got 0"),
    ('expand', 1.5, TypeError, "arch['expand'] must be an int >= 1, got 1.5"),
    ('d_state', 0, ValueError, "arch['d_state'] must be an int >= 1, got 0"),
    ('ngroups', 0, ValueError, "arch['ngroups'] must be an int >= 1, got 0"),
])
def test_bad_dinovim_arch_fields_are_named(field, value, error, message):
    with pytest.raises(error) as info:
        dinovim(arch={**DINOVIM_ARCH, field: value})
    assert str(info.value) == message


@pytest.mark.parametrize('kwargs, error, message', [
    (dict(norm_eps=0.), ValueError, 'norm_eps must be a number in (0, inf), got 0.0'),
    (dict(norm_eps=-1e-5), ValueError, 'norm_eps must be a number in (0, inf), got -1e-05'),
    (dict(mixer_cfg=dict(dt_min=0.5, dt_max=0.1)), ValueError,
     "dt_max must be a number in [0.5, inf), got 0.1"),
    (dict(mixer_cfg=dict(dt_min=0.)), ValueError,
     "dt_min must be a number in (0, inf), got 0.0"),
])
def test_bad_dinovim_numbers_are_named(kwargs, error, message):
    with pytest.raises(error) as info:
        dinovim(**kwargs)
    assert str(info.value) == message


def test_linear_vit_heads_must_divide_the_width():
    with pytest.raises(ValueError) as info:
        linear_vit(arch={**VIT_ARCH, 'num_heads': 3})
    assert str(info.value) == ("arch['num_heads'] must be an int >= 1 dividing arch['embed_dims'] "
                               '32, got 3')


def test_all_frozen_is_allowed_and_frozen():
    model = dinovim(frozen_stages=2)
    assert not any(p.requires_grad for p in model.parameters())


def test_registers_need_at_least_one():
    with pytest.raises(ValueError, match='num_registers must be an int >= 1, got 0'):
        DinoMambaReg(arch=DINOVIM_ARCH, img_size=32, patch_size=8, num_registers=0)
    with pytest.raises(TypeError, match='num_registers must be an int >= 0, got 1.5'):
        dinovim(num_registers=1.5)


@pytest.mark.parametrize('build', BACKBONES)
@pytest.mark.parametrize('shape, message', [
    ((3, 32, 32), 'input must be (B, C, H, W), got shape (3, 32, 32)'),
    ((1, 1, 32, 32), 'input has 1 channels (shape (1, 1, 32, 32)), the backbone expects '
     'in_channels=3'),
    ((1, 3, 30, 32), 'input size 30x32 (shape (1, 3, 30, 32)) is not a multiple of the patch '
     'size 8; resize it or set pad_to_patch=True'),
])
def test_bad_inputs_are_refused_alike(build, shape, message):
    model = build().eval()
    with pytest.raises(ValueError) as info:
        model(torch.zeros(shape))
    assert str(info.value) == message


@pytest.mark.parametrize('build', BACKBONES)
def test_pad_to_patch_pads_instead(build):
    model = build(pad_to_patch=True, out_type='featmap').eval()
    with torch.no_grad():
        out, = model(torch.zeros(1, 3, 30, 26))
    assert out.shape == (1, 32, 4, 4)  # ceil(30 / 8) x ceil(26 / 8) patches


@pytest.mark.parametrize('build, num_tokens', [
    pytest.param(dinovim, 17, id='DinoVim'), pytest.param(linear_vit, 17, id='LinearViT')])
@pytest.mark.parametrize('out_type, shape', [
    ('cls_token', (0, 32)), ('avg_featmap', (0, 32)), ('featmap', (0, 32, 4, 4)),
    ('raw', (0, None, 32))])
def test_empty_batch_gives_empty_outputs(build, num_tokens, out_type, shape):
    model = build(out_type=out_type, out_indices=(0, 1))
    inputs = torch.zeros(0, 3, 32, 32, requires_grad=True)
    outs = model(inputs)
    expected = tuple(num_tokens if s is None else s for s in shape)
    assert [tuple(o.shape) for o in outs] == [expected, expected]
    sum(o.sum() for o in outs).backward()  # training on an empty batch is a no-op, not an error
    assert inputs.grad.shape == inputs.shape




@pytest.mark.parametrize('dtype', [torch.float64, torch.float16, torch.uint8])
@pytest.mark.parametrize('backbone', ['DinoVim', 'LinearViT'])
def test_an_input_of_another_dtype_than_the_weights_says_what_to_do(dtype, backbone):
    """'Input type (double) and bias type (float) should be the same', from inside the patch
    embedding's convolution."""
    from dinomamba_mm.models.backbones import DinoVim, LinearViT
    model = DinoVim(arch=dict(embed_dims=16, num_layers=1, headdim=8, d_state=4), img_size=32,
                    patch_size=16) if backbone == 'DinoVim' else LinearViT(
        arch=dict(embed_dims=16, num_layers=1, num_heads=2, feedforward_channels=32),
        img_size=32, patch_size=16)
    with pytest.raises(TypeError) as info:
        model(torch.zeros(1, 3, 32, 32, dtype=dtype))
    assert str(info.value).startswith(
        f'input has dtype {dtype} (shape (1, 3, 32, 32)), the backbone\'s weights '
        'torch.float32: ')
    with torch.autocast('cpu', dtype=torch.bfloat16):  # autocast casts for the convolution
        model(torch.zeros(1, 3, 32, 32))


def test_unknown_arch_and_mixer_keys_are_refused_listing_the_allowed_ones():
    from dinomamba_mm.models.backbones import DinoVim, LinearViT
    with pytest.raises(ValueError) as info:  # LinearViT ignored it
        LinearViT(arch=dict(embed_dims=16, num_layers=1, num_heads=2, feedforward_channels=32,
                            mlp_ratio=4), img_size=32, patch_size=16)
    assert str(info.value) == (
        "custom arch dict has unknown keys ['mlp_ratio']; allowed: ['embed_dims', 'num_layers', "
        "'num_heads', 'feedforward_channels']")
    with pytest.raises(ValueError) as info:  # a TypeError from inside the mixer's __init__
        DinoVim(arch=dict(embed_dims=16, num_layers=1, headdim=8, d_state=4), img_size=32,
                patch_size=16, mixer_cfg=dict(dt_limits=(0., 1.)))
    allowed = str(info.value).split('; allowed: ')[1].split(' (')[0]
    assert str(info.value).startswith("mixer_cfg has unknown keys ['dt_limits']; allowed: [")
    assert "'dt_limit'" in allowed and "'segment_len'" in allowed
    assert "'headdim'" not in allowed and "'headdim'" in str(info.value)  # an arch key


@pytest.mark.parametrize('backbone', ['DinoVim', 'LinearViT'])
def test_an_arch_whose_parameters_cannot_fit_is_refused_before_allocating(backbone):
    """The allocator failed after the first layers were built ('can't allocate memory: you
    tried to allocate 17730161868800 bytes'), or the process was killed."""
    from dinomamba_mm.models.backbones import DinoVim, LinearViT
    huge = 2**17
    with pytest.raises(MemoryError) as info:
        if backbone == 'DinoVim':
            DinoVim(arch=dict(embed_dims=huge, num_layers=24, headdim=64, d_state=64))
        else:
            LinearViT(arch=dict(embed_dims=huge, num_layers=24, num_heads=2,
                                feedforward_channels=4 * huge))
    assert str(info.value).startswith(f'{backbone}: its parameters need at least ')
    assert 'GiB is available on cpu' in str(info.value) and 'smaller arch' in str(info.value)
