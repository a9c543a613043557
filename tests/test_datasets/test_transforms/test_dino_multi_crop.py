"""DINO multi-crop pipeline: crop counts/sizes, per-crop-type augmentations, seeding."""
import random

import numpy as np
import pytest
import torch
from mmengine.dataset import default_collate
from PIL import Image, ImageFilter

import dinomamba_mm  # noqa: F401
from dinomamba_mm.datasets.transforms import random_gaussian_blur
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

    monkeypatch.setattr(random_gaussian_blur.ImageFilter, 'GaussianBlur', recording_blur)
    _seed(0)
    blur = RandomGaussianBlur(radius_range=(0.1, 2.0), prob=0.5)
    small = _image(size=4)
    for _ in range(400):
        blur(dict(img=small.copy()))
    assert 160 <= len(radii) <= 240  # Binomial(400, 0.5): 4 standard deviations
    assert 0.1 <= min(radii) < 0.3 and 1.8 < max(radii) <= 2.0
    with pytest.raises(ValueError, match='radius_range'):
        RandomGaussianBlur(radius_range=(2.0, 0.1))


def test_bad_arguments():
    with pytest.raises(ValueError, match='num_global_crops'):
        DINOMultiCrop(num_global_crops=0)
    with pytest.raises(ValueError, match='num_local_crops'):
        DINOMultiCrop(num_local_crops=-1)
    with pytest.raises(ValueError, match='global_blur_probs'):
        DINOMultiCrop(global_blur_probs=(1.0,))
