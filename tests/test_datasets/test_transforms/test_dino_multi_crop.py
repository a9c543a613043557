"""DINO multi-crop pipeline: crop counts/sizes, per-crop-type augmentations, seeding."""
import random
import re

import numpy as np
import pytest
import torch
from mmengine.dataset import default_collate
from PIL import Image, ImageFilter

import dinomamba_mm  # noqa: F401
from dinomamba_mm.datasets.transforms import DINOMultiCrop, RandomGaussianBlur
from dinomamba_mm.registry import TRANSFORMS


def _image(seed=0, size=40):
    return np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)


def _seed(seed):
    np.random.seed(seed)
    random.seed(seed)


@pytest.mark.parametrize('num_global,num_local', [(2, 8), (1, 0), (3, 2)])
def test_counts_sizes_and_collation(num_global, num_local):
    t = TRANSFORMS.build(dict(type='DINOMultiCrop', num_global_crops=num_global,
                              num_local_crops=num_local, global_crop_size=24,
                              local_crop_size=8))
    pack = TRANSFORMS.build(dict(type='mmpretrain.PackInputs'))
    _seed(0)
    samples = [pack(t(dict(img=_image(i)))) for i in range(3)]
    crops = samples[0]['inputs']
    assert len(crops) == num_global + num_local
    assert [tuple(c.shape) for c in crops] == ([(3, 24, 24)] * num_global
                                               + [(3, 8, 8)] * num_local)
    batch = default_collate(samples)['inputs']
    assert [tuple(b.shape) for b in batch] == ([(3, 3, 24, 24)] * num_global
                                               + [(3, 3, 8, 8)] * num_local)
    assert all(b.dtype == torch.uint8 for b in batch)


def test_paper_defaults_on_an_imagenet_sized_image():
    _seed(0)
    crops = DINOMultiCrop()(dict(img=_image(size=300)))['img']
    assert [c.shape for c in crops] == [(224, 224, 3)] * 2 + [(96, 96, 3)] * 8


def test_deterministic_under_seeding():
    t = DINOMultiCrop(global_crop_size=16, local_crop_size=8, num_local_crops=4)
    runs = []
    for seed in (3, 3, 4):
        _seed(seed)
        runs.append([c.copy() for c in t(dict(img=_image()))['img']])
    assert all(np.array_equal(a, b) for a, b in zip(runs[0], runs[1]))
    assert not all(np.array_equal(a, b) for a, b in zip(runs[0], runs[2]))


def test_solarize_only_on_global_crops_after_the_first():
    # a constant image: crops, flips and blur keep it; only solarisation (200 -> 55) changes it
    t = DINOMultiCrop(num_global_crops=3, num_local_crops=2, global_crop_size=16,
                      local_crop_size=8, color_jitter_prob=0., grayscale_prob=0.,
                      solarize_prob=1.0)
    _seed(0)
    crops = t(dict(img=np.full((32, 32, 3), 200, dtype=np.uint8)))['img']
    assert [int(np.unique(c)[0]) for c in crops] == [200, 55, 55, 200, 200]
    assert all(len(np.unique(c)) == 1 for c in crops)


def test_blur_probability_per_crop_type():
    # whole-image crops of a 16 px image at 16 px: only blur can change them
    t = DINOMultiCrop(num_global_crops=2, num_local_crops=2, global_crop_size=16,
                      local_crop_size=16, global_crop_scale=(1., 1.),
                      local_crop_scale=(1., 1.), flip_prob=0., color_jitter_prob=0.,
                      grayscale_prob=0., solarize_prob=0., global_blur_probs=(1.0, 0.0),
                      local_blur_prob=0.0)
    img = _image(size=16)
    _seed(0)
    crops = t(dict(img=img))['img']
    assert not np.array_equal(crops[0], img)
    assert all(np.array_equal(c, img) for c in crops[1:])


def test_gaussian_blur_radius_and_probability(monkeypatch):
    img = _image(size=20)
    fixed = RandomGaussianBlur(radius_range=(1.5, 1.5), prob=1.0)
    expected = np.asarray(Image.fromarray(img).filter(ImageFilter.GaussianBlur(radius=1.5)))
    assert np.array_equal(fixed(dict(img=img.copy()))['img'], expected)
    assert np.array_equal(RandomGaussianBlur(prob=0.0)(dict(img=img.copy()))['img'], img)

    radii = []
    real_blur = ImageFilter.GaussianBlur

    def recording_blur(radius):
        radii.append(radius)
        return real_blur(radius=radius)

    monkeypatch.setattr(ImageFilter, 'GaussianBlur', recording_blur)
    _seed(0)
    blur = RandomGaussianBlur(radius_range=(0.1, 2.0), prob=0.5)
    small = _image(size=4)
    for _ in range(400):
        blur(dict(img=small.copy()))
    assert 160 <= len(radii) <= 240  # Binomial(400, 0.5): 4 standard deviations
    assert 0.1 <= min(radii) < 0.3 and 1.8 < max(radii) <= 2.0
    with pytest.raises(ValueError, match='radius_range'):
        RandomGaussianBlur(radius_range=(2.0, 0.1))


@pytest.mark.parametrize('kwargs,error', [
    # crop counts and sizes
    (dict(num_global_crops=0), ValueError),
    (dict(num_global_crops=2.0), TypeError),
    (dict(num_global_crops=True), TypeError),
    (dict(num_local_crops=-1), ValueError),
    (dict(num_local_crops='8'), TypeError),
    (dict(global_crop_size=0), ValueError),
    (dict(local_crop_size=0), ValueError),
    (dict(local_crop_size=-96), ValueError),
    (dict(local_crop_size=96.0), TypeError),
    # crop scales: 0 < min <= max <= 1
    (dict(global_crop_scale=(1, 0.4)), ValueError),
    (dict(global_crop_scale=(0.0, 1.0)), ValueError),
    (dict(global_crop_scale=(0.4, 1.5)), ValueError),
    (dict(global_crop_scale=(0.4, float('nan'))), ValueError),
    (dict(local_crop_scale=(0.05,)), ValueError),
    (dict(local_crop_scale=(0.05, 0.2, 0.4)), ValueError),
    (dict(local_crop_scale=0.4), TypeError),
    (dict(local_crop_scale=('0.05', '0.4')), TypeError),
    # probabilities in [0, 1]
    (dict(flip_prob=1.5), ValueError),
    (dict(flip_prob=-0.1), ValueError),
    (dict(flip_prob='0.5'), TypeError),
    (dict(color_jitter_prob=1.5), ValueError),
    (dict(grayscale_prob=-1), ValueError),
    (dict(local_blur_prob=2.0), ValueError),
    (dict(solarize_prob=2.0), ValueError),
    (dict(solarize_prob=None), TypeError),
    (dict(global_blur_probs=(2, 0.1)), ValueError),
    (dict(global_blur_probs=(1.0, -0.1)), ValueError),
    (dict(global_blur_probs=(1.0,)), ValueError),
    (dict(global_blur_probs=0.5), TypeError),
    # blur radius, solarisation threshold
    (dict(blur_radius_range=(2.0, 0.1)), ValueError),
    (dict(blur_radius_range=(-0.1, 2.0)), ValueError),
    (dict(blur_radius_range=(0.1, float('inf'))), ValueError),
    (dict(blur_radius_range=2.0), TypeError),
    (dict(solarize_thr=300), ValueError),
    (dict(solarize_thr=None), TypeError),
    # resizing
    (dict(backend='turbojpeg'), ValueError),
    (dict(backend=None), TypeError),
    (dict(interpolation='cubic'), ValueError),
    (dict(interpolation='area'), ValueError),  # cv2 only; PIL would fail on the first image
    (dict(interpolation=2), TypeError),
    # colour jitter
    (dict(color_jitter=[0.4, 0.4]), TypeError),
    (dict(color_jitter=dict(brightness=-0.4)), ValueError),
    (dict(color_jitter=dict(sharpness=0.4)), TypeError),
])
def test_bad_arguments_name_the_argument_and_value(kwargs, error):
    (name, value), = kwargs.items()
    with pytest.raises(error) as info:
        DINOMultiCrop(**kwargs)
    message = str(info.value)
    assert type(info.value) is error
    assert message.startswith(f'{name} must be '), message
    assert repr(value) in message, message


def test_bad_arguments_fail_when_built_from_a_config():
    with pytest.raises(ValueError, match=r'local_crop_size must be an int >= 1, got 0'):
        TRANSFORMS.build(dict(type='DINOMultiCrop', local_crop_size=0))
    with pytest.raises(ValueError, match=re.escape(
            'global_crop_scale must be a (min, max) pair with 0 < min <= max <= 1, '
            'got (1, 0.4)')):
        DINOMultiCrop(global_crop_scale=(1, 0.4))


@pytest.mark.parametrize('kwargs', [
    dict(flip_prob=1, color_jitter_prob=0, grayscale_prob=1, local_blur_prob=0,
         solarize_prob=1, global_blur_probs=[1, 0]),  # ints 0 / 1 and a list are probabilities
    dict(global_crop_scale=[1, 1], local_crop_scale=(0.05, 0.05), blur_radius_range=(0, 0)),
    dict(num_global_crops=np.int64(1), num_local_crops=np.int64(0), local_crop_size=1),
    dict(solarize_thr=0, interpolation='area', backend='cv2'),
    dict(solarize_thr=256.0, interpolation='lanczos', color_jitter=dict(hue=(-0.1, 0.1))),
])
def test_edge_arguments_are_accepted_and_run(kwargs):
    t = DINOMultiCrop(**{**dict(global_crop_size=8, local_crop_size=4), **kwargs})
    _seed(0)
    crops = t(dict(img=_image(size=16)))['img']
    assert len(crops) == t.num_global_crops + t.num_local_crops


def test_int_flip_prob_flips():
    t = DINOMultiCrop(num_global_crops=1, num_local_crops=0, global_crop_size=16,
                      global_crop_scale=(1, 1), flip_prob=1, color_jitter_prob=0,
                      grayscale_prob=0, global_blur_probs=(0, 0))
    img = _image(size=16)
    _seed(0)
    crop, = t(dict(img=img))['img']
    assert np.array_equal(crop, img[:, ::-1])
