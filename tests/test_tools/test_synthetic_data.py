"""The synthetic shapes dataset: shapes, the three layouts through the STOCK dataset classes of
mmpretrain / mmseg / mmdet, determinism, and errors for bad paths."""
import hashlib
import json
import os
import os.path as osp
import subprocess
import sys

import numpy as np
import pytest

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(REPO, 'tools', 'data'))

import make_synthetic  # noqa: E402

TINY = dict(seed=3, num_train=14, num_val=7, size=64, seg_size=80, det_size=96)


@pytest.fixture(scope='module')
def tiny_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('synthetic'))
    manifest = make_synthetic.make_synthetic(root, **TINY)
    return root, manifest


def _digest_tree(root):
    digests = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = osp.join(folder, name)
            with open(path, 'rb') as f:
                digests[osp.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return digests


# Areas of the shapes inscribed in the unit disc, derived by hand.
_STAR_INNER, _STAR_HALF_POINT = 0.42, np.pi / 5
EXPECTED_AREAS = {
    'circle': np.pi,
    'ring': np.pi * (1 - 0.55**2),
    'square': 2.0,  # half side 1/sqrt(2)
    'triangle': 3 * 3**0.5 / 4,  # equilateral, circumradius 1
    'hexagon': 3 * 3**0.5 / 2,  # regular, circumradius 1
    'cross': 2 * (0.56 * 1.84) - 0.56**2,  # two 0.56 x 1.84 bars minus their overlap
    'star': 10 * 0.5 * _STAR_INNER * np.sin(_STAR_HALF_POINT),  # ten (tip, notch) triangles
}


@pytest.mark.parametrize('name', make_synthetic.SHAPES)
def test_shape_areas_match_geometry(name):
    n = 1201
    coords = (np.arange(n) + 0.5) / n * 2 - 1
    u, v = np.meshgrid(coords, coords)
    area = make_synthetic.shape_mask(name, u, v).mean() * 4.0
    assert area == pytest.approx(EXPECTED_AREAS[name], rel=0.01)
    # inscribed in the unit disc
    assert not make_synthetic.shape_mask(name, u, v)[u * u + v * v > 1.0001].any()


def test_rle_round_trips_through_pycocotools():
    from pycocotools import mask as mask_utils
    rng = np.random.default_rng(0)
    for first in (0, 1):
        mask = rng.random((7, 5)) < 0.5
        mask[0, 0] = bool(first)
        rle = make_synthetic.mask_to_rle(mask)
        decoded = mask_utils.decode(mask_utils.frPyObjects(rle, 7, 5))
        np.testing.assert_array_equal(decoded.astype(bool), mask)


def test_cls_layout_loads_with_mmpretrain(tiny_root):
    from mmpretrain.datasets import CustomDataset, ImageNet
    from mmpretrain.datasets.transforms import LoadImageFromFile
    root, manifest = tiny_root
    classes = manifest['cls']['classes']
    for split in ('train', 'val'):
        dataset = ImageNet(data_root=osp.join(root, 'cls'), split=split,
                           metainfo=dict(classes=classes),
                           pipeline=[LoadImageFromFile()])
        assert len(dataset) == TINY[f'num_{split}']
        recorded = {r['file']: r['label'] for r in manifest['cls']['records'][split]}
        for i in range(len(dataset)):
            info = dataset.get_data_info(i)
            rel = osp.relpath(info['img_path'], osp.join(root, 'cls', split))
            assert info['gt_label'] == recorded[rel]
            assert rel.split(os.sep)[0] == classes[recorded[rel]]
        sample = dataset[0]
        assert sample['img'].shape == (TINY['size'], TINY['size'], 3)
    # the folder scan (no ann_file) infers the same labels: default classes are sorted
    scanned = CustomDataset(data_root=osp.join(root, 'cls'), data_prefix='train')
    assert list(scanned.CLASSES) == classes
    assert sorted(int(x) for x in scanned.get_gt_labels()) == sorted(
        r['label'] for r in manifest['cls']['records']['train'])


def test_ade_layout_loads_with_mmseg(tiny_root):
    from mmseg.datasets import BaseSegDataset
    from mmseg.datasets.transforms import LoadAnnotations
    root, manifest = tiny_root
    for split, folder in (('train', 'training'), ('val', 'validation')):
        dataset = BaseSegDataset(
            data_root=osp.join(root, 'ade'), img_suffix='.jpg', seg_map_suffix='.png',
            reduce_zero_label=True, metainfo=dict(classes=tuple(manifest['ade']['classes'])),
            data_prefix=dict(img_path=f'images/{folder}',
                             seg_map_path=f'annotations/{folder}'),
            pipeline=[LoadAnnotations()])
        assert len(dataset) == TINY[f'num_{split}']
        for i, record in enumerate(manifest['ade']['records'][split]):
            sample = dataset[i]
            assert osp.basename(sample['seg_map_path']) == record['file'] + '.png'
            seg = sample['gt_seg_map']
            assert seg.shape == (TINY['seg_size'], TINY['seg_size'])
            expected = {}
            for obj in record['objects']:  # reduce_zero_label: class k (1-based) -> k - 1
                expected[obj['label']] = expected.get(obj['label'], 0) + obj['area']
            expected[255] = seg.size - sum(expected.values())  # background is ignored
            values, counts = np.unique(seg, return_counts=True)
            assert dict(zip(values.tolist(), counts.tolist())) == {
                k: v for k, v in expected.items() if v > 0}


def test_coco_layout_loads_with_mmdet(tiny_root):
    from mmdet.datasets import CocoDataset
    from mmcv.transforms import LoadImageFromFile
    from mmdet.datasets.transforms import LoadAnnotations
    root, manifest = tiny_root
    classes = tuple(manifest['coco']['classes'])
    for split in ('train', 'val'):
        ann_file = osp.join(root, 'coco', 'annotations', f'instances_{split}2017.json')
        with open(ann_file) as f:
            raw = json.load(f)
        dataset = CocoDataset(
            data_root=osp.join(root, 'coco'),
            ann_file=f'annotations/instances_{split}2017.json',
            data_prefix=dict(img=f'{split}2017/'), metainfo=dict(classes=classes),
            filter_cfg=dict(filter_empty_gt=True, min_size=1),
            pipeline=[LoadImageFromFile(),
                      LoadAnnotations(with_bbox=True, with_mask=True)])
        assert len(dataset) == TINY[f'num_{split}']  # no image is empty
        per_image = {}
        for ann in raw['annotations']:
            per_image.setdefault(ann['image_id'], []).append(ann)
        for i in range(len(dataset)):
            info = dataset.get_data_info(i)
            sample = dataset[i]
            anns = per_image[info['img_id']]
            masks = sample['gt_masks'].to_ndarray().astype(bool)
            assert masks.shape == (len(anns), TINY['det_size'], TINY['det_size'])
            assert not (masks.sum(0) > 1).any(), 'visible parts are disjoint'
            labels = sample['gt_bboxes_labels'].tolist()
            assert [classes[k] for k in labels] == [
                raw['categories'][a['category_id'] - 1]['name'] for a in anns]
            for mask, box, ann in zip(masks, sample['gt_bboxes'].numpy(), anns):
                rows, cols = np.nonzero(mask)
                np.testing.assert_array_equal(
                    box, [cols.min(), rows.min(), cols.max() + 1, rows.max() + 1])
                assert mask.sum() == ann['area'] and ann['iscrowd'] == 0


def test_rerun_writes_identical_bytes(tiny_root, tmp_path):
    root, _ = tiny_root
    make_synthetic.make_synthetic(str(tmp_path / 'again'), **TINY)
    assert _digest_tree(str(tmp_path / 'again')) == _digest_tree(root)
    # rerunning into the same folder replaces the previous output
    small = dict(TINY, num_train=3, num_val=2)
    make_synthetic.make_synthetic(str(tmp_path / 'again'), **small)
    assert len(os.listdir(tmp_path / 'again' / 'coco' / 'train2017')) == 3
    # regenerating one layout leaves the others (and their manifest entries) alone
    kept = _digest_tree(str(tmp_path / 'again' / 'cls'))
    manifest = make_synthetic.make_synthetic(str(tmp_path / 'again'),
                                             **dict(small, seed=9, layouts=('ade', )))
    assert _digest_tree(str(tmp_path / 'again' / 'cls')) == kept
    assert sorted(manifest) == ['ade', 'cls', 'coco'] and manifest['ade']['seed'] == 9
    make_synthetic.make_synthetic(str(tmp_path / 'again'), **small)
    other = dict(small, seed=TINY['seed'] + 1)
    make_synthetic.make_synthetic(str(tmp_path / 'other'), **other)
    first, second = (_digest_tree(str(tmp_path / n)) for n in ('again', 'other'))
    assert first.keys() == second.keys() and first != second


def test_bad_out_and_missing_layout_are_reported(tmp_path):
    a_file = tmp_path / 'file.txt'
    a_file.write_text('x')
    with pytest.raises(ValueError, match='file.txt'):
        make_synthetic.make_synthetic(str(a_file), **TINY)
    foreign = tmp_path / 'foreign'
    foreign.mkdir()
    (foreign / 'keep.me').write_text('x')
    with pytest.raises(ValueError, match='foreign'):
        make_synthetic.make_synthetic(str(foreign), **TINY)
    assert os.listdir(foreign) == ['keep.me']
    with pytest.raises(ValueError, match='num_train'):
        make_synthetic.make_synthetic(str(tmp_path / 'n'), **dict(TINY, num_train=0))

    with pytest.raises(FileNotFoundError, match='images/training') as error:
        make_synthetic.check_layout(str(tmp_path / 'nowhere'), 'ade')
    assert 'nowhere' in str(error.value)
    (tmp_path / 'half' / 'train2017').mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match='instances_train2017.json'):
        make_synthetic.check_layout(str(tmp_path / 'half'), 'coco')


def test_command_line_reports_a_bad_out(tmp_path):
    a_file = tmp_path / 'not_a_dir'
    a_file.write_text('x')
    result = subprocess.run(
        [sys.executable, osp.join(REPO, 'tools', 'data', 'make_synthetic.py'),
         '--out', str(a_file)], capture_output=True, text=True)
    assert result.returncode != 0
    assert 'not_a_dir' in result.stderr and 'not a directory' in result.stderr


@pytest.mark.parametrize('kind,scope', [('cls', 'mmpretrain'), ('ade', 'mmseg'),
                                        ('coco', 'mmdet')])
def test_dataset_configs_read_the_generated_layouts(tiny_root, kind, scope):
    """configs/_base_/datasets/synthetic_<kind>.py through each framework's full pipelines."""
    import importlib

    from mmengine import Config
    from mmengine.registry import init_default_scope
    root, manifest = tiny_root
    cfg = Config.fromfile(osp.join(REPO, 'configs', '_base_', 'datasets',
                                   f'synthetic_{kind}.py'))
    assert list(cfg.classes) == manifest[kind]['classes']
    init_default_scope(scope)
    datasets = importlib.import_module(f'{scope}.registry').DATASETS
    for loader in (cfg.train_dataloader, cfg.val_dataloader):
        loader.dataset.data_root = osp.join(root, kind)
        dataset = datasets.build(loader.dataset)
        assert len(dataset) == TINY['num_val' if loader is cfg.val_dataloader
                                    else 'num_train']
        packed = dataset[0]
        assert packed['inputs'].ndim == 3 and packed['inputs'].shape[0] == 3


def _distinct_shape_colours(style, shape, seed):
    canvas = make_synthetic.single_object_scene(np.random.default_rng(seed), 64, shape, 0, style)
    pixels = canvas.pixels()
    return (len(np.unique(pixels[canvas.ids == 1], axis=0)),
            len(np.unique(pixels[canvas.ids == 0], axis=0)))


@pytest.mark.parametrize('shape,colours', [('cross', 1), ('hexagon', 2), ('star', 2),
                                           ('circle', None), ('ring', None)])
def test_class_patterns_follow_the_class(shape, colours):
    """--class-patterns: a cross is always solid (one colour), hexagons and stars always a
    checker (two), stripes / noise / rings many; with --clutter 0 0 and contrast 0 the
    background is one flat colour."""
    style = make_synthetic.SceneStyle(background_contrast=0.0, clutter=(0, 0),
                                      class_patterns=True)
    for seed in range(6):
        inside, outside = _distinct_shape_colours(style, shape, seed)
        assert outside == 1
        if colours is None:
            assert inside > 2
        else:
            assert inside == colours
    # without class patterns the pattern of a cross is drawn at random: not always solid
    random_patterns = make_synthetic.SceneStyle(background_contrast=0.0, clutter=(0, 0))
    assert any(_distinct_shape_colours(random_patterns, 'cross', seed)[0] > 1
               for seed in range(6))


def test_background_contrast_scales_around_the_mean():
    full = make_synthetic._background(np.random.default_rng(4), 48)
    subdued = make_synthetic._background(np.random.default_rng(4), 48, contrast=0.3)
    mean = full.reshape(-1, 3).mean(axis=0)
    np.testing.assert_allclose(subdued, mean + 0.3 * (full - mean), rtol=0, atol=1e-3)


def test_scene_style_is_checked_and_recorded(tmp_path):
    with pytest.raises(ValueError, match='background_contrast must be in'):
        make_synthetic.make_synthetic(str(tmp_path / 'a'), **TINY, layouts=('cls', ),
                                      style=make_synthetic.SceneStyle(background_contrast=2.0))
    with pytest.raises(ValueError, match=r'clutter must be \(min, max\)'):
        make_synthetic.make_synthetic(str(tmp_path / 'b'), **TINY, layouts=('cls', ),
                                      style=make_synthetic.SceneStyle(clutter=(3, 1)))
    style = make_synthetic.SceneStyle(0.3, (0, 0), True)
    manifest = make_synthetic.make_synthetic(str(tmp_path / 'c'), **TINY, layouts=('cls', ),
                                             style=style)
    assert manifest['cls']['style'] == dict(background_contrast=0.3, clutter=(0, 0),
                                            class_patterns=True, background='varied')
    with open(tmp_path / 'c' / 'manifest.json') as f:
        assert json.load(f)['cls']['style']['clutter'] == [0, 0]


def test_shared_backgrounds_come_from_one_distribution():
    """--background shared: every background's mean colour is the shared grey (the smooth noise
    and the grain average out), where 'varied' backgrounds each have their own colours; both
    deviate from their mean by the same contrast rule."""
    def means(kind):
        return np.array([make_synthetic._background(np.random.default_rng(seed), 64, 0.3,
                                                    kind).reshape(-1, 3).mean(axis=0)
                         for seed in range(40)])
    shared, varied = means('shared'), means('varied')
    np.testing.assert_allclose(shared, np.broadcast_to(make_synthetic.SHARED_BACKGROUND_COLOUR,
                                                       shared.shape), atol=12)
    assert shared.std(axis=0).max() < 6 and varied.std(axis=0).min() > 25
    one = make_synthetic._background(np.random.default_rng(0), 64, 0.3, 'shared')
    other = make_synthetic._background(np.random.default_rng(1), 64, 0.3, 'shared')
    assert not np.allclose(one, other)  # drawn, not one image repeated


@pytest.fixture(scope='module')
def demo_style_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('demo_style'))
    style = make_synthetic.SceneStyle(0.3, (0, 0), True, 'shared')
    manifest = make_synthetic.make_synthetic(root, seed=0, num_train=21, num_val=14, size=64,
                                             layouts=('cls', ), style=style,
                                             cls_objects=(1, 3), cls_radius=(0.14, 0.3))
    return root, manifest


def test_cls_scenes_have_label_maps_of_their_class(demo_style_root):
    """--cls-objects 1 3: 1-3 shapes of the image's class; masks/ holds label maps with the
    class id (label + 1) on exactly the recorded shape pixels, 0 elsewhere; meta/<split>_seg.txt
    lists the images in the order of meta/<split>.txt."""
    from PIL import Image
    root, manifest = demo_style_root
    cls = osp.join(root, 'cls')
    counts = set()
    for split in ('train', 'val'):
        with open(osp.join(cls, 'meta', f'{split}.txt')) as f:
            meta = [line.split() for line in f.read().splitlines()]
        with open(osp.join(cls, 'meta', f'{split}_seg.txt')) as f:
            stems = f.read().splitlines()
        assert stems == [name[:-len('.JPEG')] for name, _ in meta]
        for (name, label), record in zip(meta, manifest['cls']['records'][split]):
            mask = np.asarray(Image.open(osp.join(cls, 'masks', split,
                                                  name.replace('.JPEG', '.png'))))
            assert mask.shape == (64, 64)
            assert set(np.unique(mask)) <= {0, int(label) + 1}
            assert (mask > 0).sum() == record['area'] > 0
            assert 1 <= record['objects'] <= 3
            counts.add(record['objects'])
    assert counts == {1, 2, 3}


def test_demo_scenes_config_reads_the_images_with_their_label_maps(demo_style_root):
    """configs/demo/synthetic-scenes_64px.py: mmseg's BaseSegDataset over the cls layout, in the
    order of meta/val.txt, each image with its own label map, classes with background first."""
    from mmengine import Config
    from mmengine.registry import init_default_scope
    from mmseg.registry import DATASETS
    from PIL import Image
    root, _ = demo_style_root
    cfg = Config.fromfile(osp.join(REPO, 'configs', 'demo', 'synthetic-scenes_64px.py'))
    init_default_scope('mmseg')
    cfg.test_dataloader.dataset.data_root = osp.join(root, 'cls')
    dataset = DATASETS.build(cfg.test_dataloader.dataset)
    with open(osp.join(root, 'cls', 'meta', 'val.txt')) as f:
        meta = [line.split() for line in f.read().splitlines()]
    assert len(dataset) == len(meta) and dataset.metainfo['classes'][0] == 'background'
    for index in (0, 5, len(meta) - 1):
        sample = dataset[index]
        name, label = meta[index]
        assert sample['data_samples'].img_path.endswith(osp.join('val', name))
        labels = sample['data_samples'].gt_sem_seg.data[0].numpy()
        mask = np.asarray(Image.open(osp.join(root, 'cls', 'masks', 'val',
                                              name.replace('.JPEG', '.png'))))
        np.testing.assert_array_equal(labels, mask)
        assert labels.max() == int(label) + 1
        assert tuple(sample['inputs'].shape) == (3, 64, 64)


@pytest.mark.parametrize('option,value,message', [
    ('style', make_synthetic.SceneStyle(background='plain'), 'background must be one of'),
    ('cls_objects', (0, 2), r'cls_objects must be \(min, max\) with 1 <= min'),
    ('cls_objects', (3, 2), r'cls_objects must be \(min, max\) with 1 <= min'),
    ('cls_radius', (0.3, 0.6), r'cls_radius must be \(min, max\) with 0.02 <= min'),
])
def test_demo_options_are_checked(tmp_path, option, value, message):
    with pytest.raises(ValueError, match=message):
        make_synthetic.make_synthetic(str(tmp_path / 'x'), **TINY, layouts=('cls', ),
                                      **{option: value})
