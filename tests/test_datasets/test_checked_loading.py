"""Unreadable images, faulty label maps and broken COCO files, loaded as the configs load them:
each error names the file and what is wrong in it (mmcv, mmseg and pycocotools named none)."""
import json
import re
import os.path as osp

import cv2
import numpy as np
import pytest
from mmengine.config import Config
from mmengine.registry import TRANSFORMS, DefaultScope

import dinomamba_mm  # noqa: F401

CONFIGS = osp.join(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))), 'configs')


def config(name):
    return Config.fromfile(osp.join(CONFIGS, name))


def build(transform_cfg, scope='mmseg', **kwargs):
    """A transform of a config, built as a run in the config's scope builds it."""
    with DefaultScope.overwrite_default_scope(scope):
        return TRANSFORMS.build({**transform_cfg, **kwargs})


@pytest.mark.parametrize('name, scope', [('_base_/datasets/synthetic_cls.py', 'mmpretrain'),
                                         ('_base_/datasets/synthetic_ade.py', 'mmseg'),
                                         ('_base_/datasets/synthetic_coco.py', 'mmdet'),
                                         ('_base_/datasets/imagenet_dino-multicrop_bs64.py',
                                          'mmpretrain')])
@pytest.mark.parametrize('content, problem', [
    (b'', 'the file is empty (0 bytes)'),
    (b'\x00junk' * 10,
     'its 50 bytes do not decode (ValueError: the cv2 backend decoded nothing)')])
def test_an_unreadable_image_is_fatal_and_named(tmp_path, name, scope, content, problem):
    """mmcv raised cv2.error '!buf.empty()' for the empty file, naming no file."""
    path = tmp_path / 'broken.jpg'
    path.write_bytes(content)
    load = build(config(name).train_pipeline[0], scope)
    with pytest.raises(OSError) as info:
        load(dict(img_path=str(path)))
    assert str(info.value).startswith(f"cannot load image '{path}': {problem}")


def test_ignore_empty_skips_with_a_warning_naming_the_file(tmp_path, capsys):
    from mmengine.logging import MMLogger
    MMLogger.get_instance('skip_test')  # a fresh current logger, writing to what capsys reads
    path = tmp_path / 'empty.jpg'
    path.write_bytes(b'')
    load = build(config('_base_/datasets/synthetic_cls.py').train_pipeline[0], 'mmpretrain',
                 ignore_empty=True)
    assert load(dict(img_path=str(path))) is None
    assert f"skipped image '{path}' (ignore_empty=True): the file is empty (0 bytes)" \
        in capsys.readouterr().out


def _ade_sample(tmp_path, label, image_shape=(8, 8)):
    image_path, label_path = tmp_path / 'a.jpg', tmp_path / 'a.png'
    cv2.imwrite(str(image_path), np.zeros((*image_shape, 3), np.uint8))
    cv2.imwrite(str(label_path), label)
    return dict(img_path=str(image_path), seg_map_path=str(label_path), reduce_zero_label=True,
                seg_fields=[])


def _load_ade(sample):
    pipeline = config('_base_/datasets/synthetic_ade.py').train_pipeline
    return build(pipeline[1])(build(pipeline[0])(sample))


def test_a_good_label_map_loads(tmp_path):
    label = np.arange(64, dtype=np.uint8).reshape(8, 8) % 8  # 0 (background) .. 7 classes
    result = _load_ade(_ade_sample(tmp_path, label))
    np.testing.assert_array_equal(result['gt_seg_map'], np.where(label == 0, 255, label - 1))


@pytest.mark.parametrize('label, image_shape, message', [
    (np.zeros((8, 8, 3), np.uint8), (8, 8),
     "label map '{label}' has shape (8, 8, 3): expected one channel of class ids (H, W); "
     'convert a colour-coded map to ids'),
    (np.zeros((6, 8), np.uint8), (8, 8),
     "label map '{label}' is 6x8 but its image '{image}' is 8x8"),
    (np.full((8, 8), 9, np.uint8), (8, 8),
     "label map '{label}' holds ids [8] beyond the 7 classes (ids 0..6, 255 ignored; "
     'reduce_zero_label=True)'),
])
def test_faulty_label_maps_are_named(tmp_path, label, image_shape, message):
    """mmseg loaded all three: a (H, W, 3) map, a map of another size, an id the loss indexes
    out of range."""
    sample = _ade_sample(tmp_path, label, image_shape)
    with pytest.raises(ValueError) as info:
        _load_ade(sample)
    assert str(info.value) == message.format(label=sample['seg_map_path'],
                                             image=sample['img_path'])


def test_an_empty_label_map_is_named(tmp_path):
    sample = _ade_sample(tmp_path, np.zeros((8, 8), np.uint8))
    open(sample['seg_map_path'], 'wb').close()
    with pytest.raises(ValueError) as info:
        _load_ade(sample)
    assert str(info.value) == (f"cannot load label map '{sample['seg_map_path']}': the file is "
                               'empty (0 bytes)')


COCO_OK = dict(images=[dict(id=1, file_name='a.jpg', height=8, width=8)],
               annotations=[dict(id=1, image_id=1, category_id=1, bbox=[0, 0, 4, 4], area=16,
                                 iscrowd=0, segmentation=[[0, 0, 4, 0, 4, 4]])],
               categories=[dict(id=1, name='circle')])


def _coco(tmp_path, text, test_mode=False):
    from mmdet.registry import DATASETS
    path = tmp_path / 'instances.json'
    path.write_text(text)
    dataset = config('_base_/datasets/synthetic_coco.py').train_dataloader.dataset
    return path, lambda: DATASETS.build(dict(
        type=dataset.type, ann_file=str(path), data_prefix=dict(img=str(tmp_path)),
        metainfo=dataset.metainfo, pipeline=[], test_mode=test_mode))


def test_a_good_coco_file_loads(tmp_path):
    _, build_dataset = _coco(tmp_path, json.dumps(COCO_OK))
    assert len(build_dataset()) == 1


@pytest.mark.parametrize('content, problem', [
    ('{"images": [', 'is not valid JSON: Expecting value: line 1 column 13 (char 12)'),
    ('', "is empty: a COCO instances file is a JSON object with 'images', 'annotations' and "
         "'categories'"),
    ('[1, 2]', 'is not a COCO file: annotation file format <class \'list\'> not supported'),
    (json.dumps({k: v for k, v in COCO_OK.items() if k != 'categories'}),
     "has no 'categories' key; a COCO instances file holds 'images', 'annotations' and "
     "'categories'"),
    (json.dumps({k: v for k, v in COCO_OK.items() if k != 'images'}),
     "holds no image (its 'images' list is missing or empty)"),
    (json.dumps({**COCO_OK, 'annotations': []}),
     "holds no annotation of the classes ['circle', 'cross', 'hexagon', 'ring', 'square']... "
     "(its 'annotations' list is missing or empty, or names other categories)"),
])
def test_broken_coco_files_are_named(tmp_path, content, problem):
    """pycocotools raised a bare JSONDecodeError / AssertionError / KeyError; no images or no
    annotations gave an empty training set."""
    path, build_dataset = _coco(tmp_path, content)
    with pytest.raises(ValueError) as info:
        build_dataset()
    assert str(info.value) == f'COCO annotation file {str(path)!r} {problem}'


def test_a_test_file_without_annotations_is_allowed_in_test_mode(tmp_path):
    _, build_dataset = _coco(tmp_path, json.dumps({**COCO_OK, 'annotations': []}),
                             test_mode=True)
    assert len(build_dataset()) == 1


@pytest.mark.parametrize('label, message', [
    (np.zeros((8, 8, 3), np.uint8), "label map '{label}' has shape (8, 8, 3)"),
    (np.full((8, 8), 200, np.uint8), "label map '{label}' holds ids [199] beyond the 150 classes"),
])
def test_the_ade20k_configs_name_a_faulty_label_map(tmp_path, label, message):
    """The real ADE20K configs (mmseg's pipelines) load with the checked loaders too, in the
    dataloader's pipeline and not only in the top-level variable."""
    cfg = config('ade20k/upernet_dinovim-tiny-p16_paper-teacher_8xb2-amp-160k_ade20k-512x512.py')
    for loader in (cfg.train_dataloader, cfg.val_dataloader, cfg.test_dataloader):
        pipeline = loader.dataset.pipeline
        load = next(t for t in pipeline if 'Annotations' in t['type'])
        sample = _ade_sample(tmp_path, label)
        with pytest.raises(ValueError, match=re.escape(message.format(
                label=sample['seg_map_path']))):
            build(load)(build(pipeline[0])(sample))


def test_mmpretrains_inferencer_runs_the_configs_with_our_loader():
    """The inferencer loads the image itself and drops the pipeline's loader by its type name,
    which is 'dinomamba_mm.LoadImageFromFile' in our configs: ours then passes the loaded
    image through."""
    import os.path as osp

    import numpy as np
    from mmpretrain import ImageClassificationInferencer
    root = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
    config = Config.fromfile(
        osp.join(root, 'configs', 'demo', 'linear-probe_dinovim-demo_synthetic.py'))
    config.model.backbone.checkpoint = None  # random weights: the loader is what is tested
    inferencer = ImageClassificationInferencer(config, pretrained=False)
    image = np.random.default_rng(0).integers(0, 256, (40, 40, 3), dtype=np.uint8)
    result = inferencer(image)[0]
    assert result['pred_scores'].shape == (7, )


def _load(path, backend, color_type='color'):
    from dinomamba_mm.datasets.transforms import LoadImageFromFile
    return LoadImageFromFile(imdecode_backend=backend, color_type=color_type)(
        dict(img_path=str(path)))


@pytest.mark.parametrize('backend', ['cv2', 'pillow'])
@pytest.mark.parametrize('color_type', ['color', 'grayscale'])
def test_a_16_bit_image_reads_as_8_bit_with_either_backend(tmp_path, backend, color_type):
    """The pillow backend saturated every pixel above 255 (a 16-bit PNG came out white); the
    oracle is the high byte of each value, what cv2 and Pillow's 16-bit RGB reader take."""
    values = (np.arange(64, dtype=np.uint16).reshape(8, 8) * 1031)
    cv2.imwrite(str(tmp_path / 'gray16.png'), values)
    img = _load(tmp_path / 'gray16.png', backend, color_type)['img']
    expected = (values >> 8).astype(np.uint8)
    assert img.dtype == np.uint8
    if color_type == 'color':
        assert img.shape == (8, 8, 3) and all((img[..., c] == expected).all() for c in range(3))
    else:
        assert (img == expected).all()
    rgb = np.stack([values, values // 2, values // 4], axis=-1)
    cv2.imwrite(str(tmp_path / 'rgb16.png'), rgb[..., ::-1])  # cv2 writes BGR
    img = _load(tmp_path / 'rgb16.png', backend)['img']
    assert (img[..., ::-1] == (rgb >> 8).astype(np.uint8)).all()  # the loader gives BGR


@pytest.mark.parametrize('backend', ['cv2', 'pillow'])
def test_a_float_image_is_refused_with_either_backend(tmp_path, backend):
    """A 32-bit float TIFF of values in [0, 1]: the pillow backend cast them to 0 / 1 (a black
    image); cv2 failed to decode it, naming no reason."""
    from PIL import Image
    path = tmp_path / 'float.tiff'
    Image.fromarray(np.linspace(0, 1, 64, dtype=np.float32).reshape(8, 8), mode='F').save(path)
    with pytest.raises(OSError) as info:
        _load(path, backend)
    assert str(info.value) == (
        f"cannot load image '{path}': it holds 32-bit floating-point samples (PIL mode 'F'), "
        'which have no 8-bit scale: convert it to an 8-bit image (0-255) first')


@pytest.mark.parametrize('backend', ['cv2', 'pillow'])
def test_unchanged_16_bit_pixels_are_refused(tmp_path, backend):
    """color_type='unchanged' kept values up to 65535, which the pipelines' 0-255
    normalisation took as 8-bit pixels."""
    cv2.imwrite(str(tmp_path / 'gray16.png'), np.full((8, 8), 40000, np.uint16))
    with pytest.raises(OSError) as info:
        _load(tmp_path / 'gray16.png', backend, 'unchanged')
    assert str(info.value) == (
        f"cannot load image '{tmp_path / 'gray16.png'}': with color_type='unchanged' it "
        'decodes to uint16 pixels, and the pipelines expect 8-bit ones (0-255): load it with '
        "color_type='color' or 'grayscale', which scale it to 8 bits")
