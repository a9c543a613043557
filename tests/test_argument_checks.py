"""dinomamba_mm.argument_checks, and the modules that use it: one wording for every int check.

The messages are written out by hand; bools are refused where an int is expected (Python counts
True as 1, which let `out_channels=True` build a one-prototype head before).
"""
import numpy as np
import pytest

from dinomamba_mm.analysis.matrix_rank import block_ranks
from dinomamba_mm.analysis.mixing_matrix import normalize_layer_indices
from dinomamba_mm.argument_checks import (check_bool, check_choice, check_indices, check_int,
                                          check_number)
from dinomamba_mm.engine.hooks import DINOTeacherTempHook, FreezeLastLayerHook
from dinomamba_mm.models.heads import DINOLossHead, DINOProjectionHead
from dinomamba_mm.models.layers import BidirectionalMamba2Mixer


@pytest.mark.parametrize('kwargs, value, error, message', [
    (dict(minimum=1), 0, ValueError, 'n must be an int >= 1, got 0'),
    (dict(minimum=1), True, TypeError, 'n must be an int >= 1, got True'),
    (dict(minimum=1), 2.0, TypeError, 'n must be an int >= 1, got 2.0'),
    (dict(maximum=3), 4, ValueError, 'n must be an int <= 3, got 4'),
    (dict(minimum=2, maximum=3), 1, ValueError, 'n must be an int in [2, 3], got 1'),
    (dict(), '1', TypeError, "n must be an int, got '1'"),
])
def test_check_int(kwargs, value, error, message):
    with pytest.raises(error) as info:
        check_int('n', value, **kwargs)
    assert str(info.value) == message


def test_check_int_accepts_numpy_integers_and_bounds():
    check_int('n', np.int64(3), 3, 3)
    check_int('n', -7)


def test_check_number_exclusive_maximum():
    check_number('p', 0.999, 0, 1, exclusive_maximum=True)
    with pytest.raises(ValueError) as info:
        check_number('p', 1, 0, 1, exclusive_maximum=True)
    assert str(info.value) == 'p must be a number in [0, 1), got 1'


@pytest.mark.parametrize('value', ['False', 'no', 0, 1, None, np.bool_(True)])
def test_check_bool_refuses_what_only_looks_like_a_flag(value):
    with pytest.raises(TypeError) as info:  # 'False' is truthy: it switched the flag on
        check_bool('flag', value)
    assert str(info.value) == f'flag must be a bool (True or False), got {value!r}'
    check_bool('flag', True)
    check_bool('flag', False)


def test_check_choice_does_not_take_a_bool_for_an_int():
    check_choice('k', 1, (1, 2))
    with pytest.raises(ValueError, match=r'k must be one of \(1, 2\), got True'):
        check_choice('k', True, (1, 2))  # True == 1 in Python


@pytest.mark.parametrize('kwargs, value, message', [
    (dict(minimum=0, exclusive_minimum=True), float('inf'),
     'x must be a number in (0, inf), got inf'),
    (dict(), float('-inf'), 'x must be a number in (-inf, inf), got -inf'),
    (dict(maximum=1), float('-inf'), 'x must be a number in (-inf, 1], got -inf'),
    (dict(minimum=0, maximum=float('inf')), float('inf'),
     'x must be a number in [0, inf], got inf'),
])
def test_check_number_refuses_infinity_as_a_finite_limit(kwargs, value, message):
    with pytest.raises(ValueError) as info:  # an infinite epsilon or temperature passed before
        check_number('x', value, **kwargs)
    assert str(info.value) == message


def test_check_number_takes_infinity_where_allowed():
    check_number('x', float('inf'), 0, allow_inf=True)
    with pytest.raises(TypeError) as info:
        check_number('x', float('nan'), 0, allow_inf=True)
    assert str(info.value) == 'x must be a number in [0, inf], got nan'


@pytest.mark.parametrize('value, expected', [(-1, [3]), ([0, -3, 2], [0, 1, 2]),
                                             (np.int32(1), [1])])
def test_check_indices_resolves_negative_ones(value, expected):
    assert check_indices('idx', value, 4) == expected


@pytest.mark.parametrize('value, error', [('1', TypeError), ([1, None], TypeError),
                                          (1.0, TypeError), ([4], ValueError),
                                          (-5, ValueError)])
def test_check_indices_refuses(value, error):
    with pytest.raises(error) as info:
        check_indices('idx', value, 4)
    assert str(info.value) == f'idx must be an int or a sequence of ints in [-4, 4), got {value!r}'


@pytest.mark.parametrize('value, message', [
    ((), 'idx must hold at least one index, got ()'),
    ([0, -4, 2], 'idx must not repeat an index (negative ones count from the end of 4), '
     'got [0, -4, 2]')])
def test_check_indices_refuses_no_index_and_repeats(value, message):
    with pytest.raises(ValueError) as info:  # [0, 0] gave two outputs of one block
        check_indices('idx', value, 4)
    assert str(info.value) == message


@pytest.mark.parametrize('build, error, message', [
    (lambda: DINOLossHead(out_channels=True), TypeError,
     'out_channels must be an int >= 1, got True'),
    (lambda: DINOLossHead(out_channels=4, sinkhorn_iterations=0), ValueError,
     'sinkhorn_iterations must be an int >= 1, got 0'),
    (lambda: DINOLossHead(out_channels=4, teacher_temp=-1), ValueError,
     'teacher_temp must be a number in (0, inf), got -1'),
    (lambda: DINOLossHead(out_channels=4, center_momentum=2), ValueError,
     'center_momentum must be a number in [0, 1], got 2'),
    (lambda: DINOProjectionHead(in_channels=4, num_layers=True), TypeError,
     'num_layers must be an int >= 1, got True'),
    (lambda: DINOTeacherTempHook(warmup_epochs=True), TypeError,
     'warmup_epochs must be an int >= 0, got True'),
    (lambda: FreezeLastLayerHook(freeze_epochs=1.0), TypeError,
     'freeze_epochs must be an int >= 0, got 1.0'),
    (lambda: BidirectionalMamba2Mixer(8, d_state=4, headdim=4, segment_len=True), TypeError,
     'segment_len must be an int >= 1, got True'),
    (lambda: block_ranks(np.eye(4), block_size=2.0), TypeError,
     'block_size must be an int in [1, 4], got 2.0'),
    (lambda: normalize_layer_indices('0', 2), TypeError,
     "layer_indices must be an int or a sequence of ints in [-2, 2), got '0'"),
])
def test_modules_share_the_wording(build, error, message):
    with pytest.raises(error) as info:
        build()
    assert str(info.value) == message


def _tiny_dinovim(**kwargs):
    from dinomamba_mm.models.backbones import DinoVim
    return DinoVim(arch=dict(embed_dims=16, num_layers=1, headdim=8, d_state=4), img_size=16,
                   patch_size=8, **kwargs)


def _tiny_linear_vit(**kwargs):
    from dinomamba_mm.models.backbones import LinearViT
    return LinearViT(arch=dict(embed_dims=16, num_layers=1, num_heads=2,
                               feedforward_channels=32), img_size=16, patch_size=8, **kwargs)


def _flag_builds():
    from dinomamba_mm.checkpoints import CheckedPretrainedInit, PaperCheckpointInit
    from dinomamba_mm.datasets.transforms import LoadImageFromFile
    from dinomamba_mm.evaluation.metrics import BinaryAUC
    from dinomamba_mm.models.necks import LinearProbeNeck
    yield from (('final_norm', lambda v: _tiny_dinovim(final_norm=v)),
                ('pad_to_patch', lambda v: _tiny_dinovim(pad_to_patch=v)),
                ('norm_eval', lambda v: _tiny_dinovim(norm_eval=v)),
                ('with_cp', lambda v: _tiny_dinovim(with_cp=v)),
                ('norm_eval', lambda v: _tiny_linear_vit(norm_eval=v)),
                ('pad_to_patch', lambda v: _tiny_linear_vit(pad_to_patch=v)),
                ('final_norm', lambda v: _tiny_linear_vit(final_norm=v)),
                ('qkv_bias', lambda v: _tiny_linear_vit(qkv_bias=v)),
                ('norm_before_gate', lambda v: BidirectionalMamba2Mixer(
                    8, d_state=4, headdim=4, norm_before_gate=v)),
                ('bias', lambda v: BidirectionalMamba2Mixer(8, d_state=4, headdim=4, bias=v)),
                ('norm_last_layer', lambda v: DINOProjectionHead(4, norm_last_layer=v)),
                ('avgpool_patch_tokens',
                 lambda v: LinearProbeNeck(in_type='raw', avgpool_patch_tokens=v)),
                ('pooled', lambda v: BinaryAUC(pooled=v)),
                ('allow_non_finite',
                 lambda v: CheckedPretrainedInit(checkpoint='a.pth', allow_non_finite=v)),
                ('allow_non_finite',
                 lambda v: PaperCheckpointInit(checkpoint='a.pth', allow_non_finite=v)),
                ('ignore_empty', lambda v: LoadImageFromFile(ignore_empty=v)),
                ('to_float32', lambda v: LoadImageFromFile(to_float32=v)))


@pytest.mark.parametrize('name, build', list(_flag_builds()))
def test_flags_refuse_a_string(name, build):
    """'False' is truthy: allow_non_finite='False' loaded NaN weights, final_norm='False'
    built the final norm."""
    with pytest.raises(TypeError) as info:
        build('False')
    assert str(info.value) == f"{name} must be a bool (True or False), got 'False'"
    build(False)


@pytest.mark.parametrize('build, message', [
    (lambda: _tiny_dinovim(norm_eps=float('inf')),
     'norm_eps must be a number in (0, inf), got inf'),
    (lambda: BidirectionalMamba2Mixer(8, d_state=4, headdim=4, dt_max=float('inf')),
     'dt_max must be a number in [0.001, inf), got inf'),
    (lambda: DINOLossHead(out_channels=4, student_temp=float('inf')),
     'student_temp must be a number in (0, inf), got inf'),
    (lambda: DINOTeacherTempHook(teacher_temp=float('inf')),
     'teacher_temp must be a number in (0, inf), got inf'),
])
def test_infinity_is_not_a_finite_setting(build, message):
    with pytest.raises(ValueError) as info:
        build()
    assert str(info.value) == message


def test_gaussian_blur_and_subset_accuracy_arguments(tmp_path):
    from dinomamba_mm.datasets.transforms import RandomGaussianBlur
    from dinomamba_mm.evaluation.metrics import ClassSubsetAccuracy
    with pytest.raises(ValueError) as info:  # an infinite radius was accepted
        RandomGaussianBlur(radius_range=(0.1, float('inf')))
    assert str(info.value) == ('radius_range must be a (min, max) pair with 0 <= min <= max '
                               '< inf, got (0.1, inf)')
    with pytest.raises(TypeError, match="prob must be a number in \\[0, 1\\], got '0.5'"):
        RandomGaussianBlur(prob='0.5')  # failed comparing a str with a float
    (tmp_path / 'n01440764').mkdir()
    with pytest.raises(TypeError, match='topk must be an int >= 1, got True'):
        ClassSubsetAccuracy(str(tmp_path), topk=(True, ))


def test_dino_num_teacher_crops_is_checked():
    from dinomamba_mm.models.selfsup import DINO
    with pytest.raises(TypeError) as info:
        DINO(backbone=dict(type='dinomamba_mm.DinoVim'), neck=dict(), head=dict(),
             num_teacher_crops=True)
    assert str(info.value) == 'num_teacher_crops must be an int >= 1, got True'


def test_arguments_of_the_wrong_type_are_named_before_they_are_used(tmp_path):
    """Each of these failed later, inside another library, naming none of our arguments (a
    None path: 'stat: path should be string ... not NoneType'; an int prefix: "'int' object
    has no attribute 'endswith'"; an unknown resize mode: NotImplementedError from
    F.interpolate), or, for a FrozenBackbone's checkpoint, only at init_weights."""
    import torch

    from dinomamba_mm.checkpoints import find_backbone_weights
    from dinomamba_mm.evaluation.metrics import ClassSubsetAccuracy, ReaLAccuracy
    from dinomamba_mm.models.backbones import FrozenBackbone
    from dinomamba_mm.models.layers import resize_pos_embed
    cases = [
        (lambda: ClassSubsetAccuracy(imagenet_wnids=None), TypeError,
         'imagenet_wnids must be a path (str), got None'),
        (lambda: ReaLAccuracy(real_json=None), TypeError,
         'real_json must be a path (str), got None'),
        (lambda: find_backbone_weights({'state_dict': {}}, 'c', prefix=3), TypeError,
         "prefix must be 'auto', None or a key prefix (str), got 3"),
        (lambda: FrozenBackbone(dict(type='dinomamba_mm.DinoVim'), checkpoint=3), TypeError,
         'checkpoint must be None or a path or URL (str or os.PathLike), got 3'),
        (lambda: FrozenBackbone(dict(type='dinomamba_mm.DinoVim'), prefix=3), TypeError,
         "prefix must be None, 'auto' or a key prefix (str), got 3"),
        (lambda: resize_pos_embed(torch.zeros(1, 5, 2), (2, 2), (3, 3), 1, mode='cubic'),
         ValueError, "mode must be one of ('nearest', 'bilinear', 'bicubic', 'area', "
         "'nearest-exact'), got 'cubic'"),
    ]
    for build, error, message in cases:
        with pytest.raises(error) as info:
            build()
        assert str(info.value) == message


@pytest.mark.parametrize('kwargs, message', [
    (dict(imdecode_backend='opencv'), "imdecode_backend must be one of ('cv2', 'turbojpeg', "
     "'pillow', 'tifffile'), got 'opencv'"),
    (dict(color_type='rgb'), "color_type must be one of ("),
    (dict(imdecode_backend='turbojpeg'), "imdecode_backend='turbojpeg' needs the python "
     'package PyTurboJPEG, which is not installed: pip install PyTurboJPEG, or use cv2'),
])
def test_the_image_loader_checks_its_backend_when_built(kwargs, message):
    """An unknown or missing decoding backend, an unknown color_type: every image was then
    reported as a file whose bytes 'do not decode'."""
    from dinomamba_mm.datasets.transforms import LoadImageFromFile
    with pytest.raises(ValueError) as info:
        LoadImageFromFile(**kwargs)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize('kwargs, error, message', [
    (dict(A_init_range=(1, float('inf'))), ValueError,
     'A_init_range must be a (low, high) pair with 0 < low <= high < inf, got (1, inf)'),
    (dict(dt_init_floor=float('inf')), ValueError,
     'dt_init_floor must be a number in (0, inf), got inf'),
    (dict(dt_limit=(0.1, 0.01)), ValueError,
     'dt_limit must be a (low, high) pair with 0 <= low <= high (high may be inf), got '
     '(0.1, 0.01)'),
    (dict(norm_eps=0.), ValueError, 'norm_eps must be a number in (0, inf), got 0.0'),
])
def test_the_mixer_refuses_infinite_or_inverted_settings(kwargs, error, message):
    """An infinite A range gave A_log = inf (NaN outputs); an inverted dt_limit clamped every
    step to its low end; both passed."""
    with pytest.raises(error) as info:
        BidirectionalMamba2Mixer(8, d_state=4, headdim=4, **kwargs)
    assert str(info.value) == message
    BidirectionalMamba2Mixer(8, d_state=4, headdim=4, dt_limit=(0., float('inf')))
