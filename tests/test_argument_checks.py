"""dinomamba_mm.argument_checks, and the modules that use it: one wording for every int check.

The messages are written out by hand; bools are refused where an int is expected (Python counts
True as 1, which let `out_channels=True` build a one-prototype head before).
"""
import numpy as np
import pytest

from dinomamba_mm.analysis.matrix_rank import block_ranks
from dinomamba_mm.analysis.mixing_matrix import normalize_layer_indices
from dinomamba_mm.argument_checks import check_indices, check_int, check_number
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
     'teacher_temp must be a number in (0, inf], got -1'),
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


def test_dino_num_teacher_crops_is_checked():
    from dinomamba_mm.models.selfsup import DINO
    with pytest.raises(TypeError) as info:
        DINO(backbone=dict(type='dinomamba_mm.DinoVim'), neck=dict(), head=dict(),
             num_teacher_crops=True)
    assert str(info.value) == 'num_teacher_crops must be an int >= 1, got True'
