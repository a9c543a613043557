"""Generate the synthetic shapes dataset in the layouts mmpretrain, mmseg and mmdet read unchanged.

Images show shapes (circle, cross, hexagon, ring, square, star, triangle) of varied colour, size,
position, rotation and inner texture (solid, stripes, checker, noise) over textured backgrounds
(smooth noise, gradients, stripes) with clutter (lines and arcs that belong to no class).
``--background-contrast``, ``--clutter`` and ``--class-patterns`` make calmer scenes whose shapes
carry a pattern of their class; ``--background shared`` draws every background from one
distribution, so that only the shapes tell one image from another; ``--cls-objects`` puts several
shapes of the image's class in a classification image (the demo's data, ``tools/demo.py``).

``<out>/cls``, ``<out>/ade`` and ``<out>/coco`` are the layouts that mmpretrain's ``ImageNet`` /
``CustomDataset`` (with ``ann_file``), mmseg's ``ADE20KDataset`` and mmdet's ``CocoDataset`` (the
shape classes as metainfo) read unchanged (``LAYOUTS``: the entries each needs):

- ``cls``: one dominant shape per image (or ``--cls-objects`` shapes, all of one class), label =
  its class: ``{train,val}/<class>/<name>.JPEG`` and ``meta/{train,val}.txt``
  ("<class>/<name>.JPEG <label>" lines); ``masks/{train,val}/<class>/<name>.png`` label maps of
  the same images (0 = background, k = k-th class, 1-based) and ``meta/{train,val}_seg.txt``
  ("<class>/<name>" lines, in the order of ``meta/{train,val}.txt``), so that mmseg's
  ``BaseSegDataset`` reads them as a segmentation set too (``ann_file``, ``img_suffix='.JPEG'``,
  ``seg_map_suffix='.png'``);
- ``ade``: several shapes per image, ``images/{training,validation}/*.jpg`` and label maps
  ``annotations/{training,validation}/*.png``, 0 = background, k = k-th class (1-based), so
  that ``reduce_zero_label=True`` maps them as for ADE20K;
- ``coco``: several shapes per image, ``{train,val}2017/*.jpg`` and
  ``annotations/instances_{train,val}2017.json`` (boxes, areas, uncompressed RLE masks of the
  visible parts).

``<out>/manifest.json`` records the options of each layout and what was drawn (class and visible
pixel count of every shape). Every image is drawn from its own generator seeded by (seed, layout,
split, index), so a rerun with the same options writes the same bytes. Usage::

    python tools/data/make_synthetic.py --out data/synthetic --seed 0
"""
import argparse
import json
import os
import os.path as osp
import shutil
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from PIL import Image, ImageDraw

SHAPES = ('circle', 'cross', 'hexagon', 'ring', 'square', 'star', 'triangle')
TEXTURES = ('solid', 'stripes', 'checker', 'noise')
#: --class-patterns: each shape's own inner pattern (kind, cycles across the shape's radius);
#: orientation, phase, contrast and colour stay random
CLASS_PATTERNS = {'circle': ('stripes', 2.0), 'cross': ('solid', 0.0),
                  'hexagon': ('checker', 2.5), 'ring': ('noise', 0.0),
                  'square': ('stripes', 4.5), 'star': ('checker', 4.5),
                  'triangle': ('rings', 3.0)}
SPLITS = ('train', 'val')
#: --background: 'varied' (noise, gradient or stripes, colours drawn per image) or 'shared'
BACKGROUNDS = ('varied', 'shared')
#: --background shared: the one mean colour and smooth-noise grid of every background
SHARED_BACKGROUND_COLOUR = (128.0, 128.0, 128.0)
SHARED_BACKGROUND_CELLS = 8
#: the entries each layout's root must hold
LAYOUTS = {
    'cls': ('train', 'val', 'meta/train.txt', 'meta/val.txt', 'masks/train', 'masks/val',
            'meta/train_seg.txt', 'meta/val_seg.txt'),
    'ade': ('images/training', 'images/validation', 'annotations/training',
            'annotations/validation'),
    'coco': ('train2017', 'val2017', 'annotations/instances_train2017.json',
             'annotations/instances_val2017.json'),
}
LAYOUT_KINDS = tuple(LAYOUTS)
_LAYOUT_CODE = {kind: code for code, kind in enumerate(LAYOUT_KINDS)}
_SPLIT_CODE = {split: code for code, split in enumerate(SPLITS)}
_ADE_SPLIT_DIR = {'train': 'training', 'val': 'validation'}
_MANIFEST = 'manifest.json'


class SceneStyle(NamedTuple):
    """How busy the scenes are (the defaults: textured, cluttered backgrounds, patterns drawn
    independently of the class).

    Attributes:
        background_contrast (float): the background's deviation from its mean colour is scaled
            by this (1: as drawn; 0.3: subdued, so that the shapes stand out). Defaults to 1.0.
        clutter (tuple[int, int]): (min, max) number of lines and arcs drawn over the
            background. Defaults to (2, 8).
        class_patterns (bool): each shape class gets its own inner pattern
            (``CLASS_PATTERNS``), a class cue that survives colour changes; otherwise one of
            ``TEXTURES`` at random. Defaults to False.
        background (str): 'varied': each background a noise, gradient or stripes of colours
            drawn for the image; 'shared': every background drawn from one distribution
            (smooth colour noise on a ``SHARED_BACKGROUND_CELLS`` grid around
            ``SHARED_BACKGROUND_COLOUR``, plus grain), so that nothing in it tells one image
            from another. Defaults to 'varied'.
    """
    background_contrast: float = 1.0
    clutter: Tuple[int, int] = (2, 8)
    class_patterns: bool = False
    background: str = 'varied'


# ---------------------------------------------------------------- shapes in the unit disc
def _half_planes(u: np.ndarray, v: np.ndarray, angles_deg: Sequence[float],
                 offset: float) -> np.ndarray:
    inside = np.ones(u.shape, dtype=bool)
    for angle in np.deg2rad(np.asarray(angles_deg, dtype=np.float64)):
        inside &= u * np.cos(angle) + v * np.sin(angle) <= offset
    return inside


def shape_mask(name: str, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Membership of points (u, v) (object frame, shape inscribed in the unit disc) in ``name``."""
    r2 = u * u + v * v
    if name == 'circle':
        return r2 <= 1.0
    if name == 'ring':
        return (r2 <= 1.0) & (r2 >= 0.55**2)
    if name == 'square':
        return np.maximum(np.abs(u), np.abs(v)) <= 0.5**0.5
    if name == 'triangle':  # equilateral; edge normals point away from the vertices
        return _half_planes(u, v, (270, 30, 150), 0.5)
    if name == 'hexagon':
        return _half_planes(u, v, range(0, 360, 60), 3**0.5 / 2)
    if name == 'cross':
        au, av = np.abs(u), np.abs(v)
        return ((au <= 0.28) & (av <= 0.92)) | ((av <= 0.28) & (au <= 0.92))
    if name == 'star':  # five points: fold the angle onto half a point, test the straight edge
        inner = 0.42
        half_point = np.pi / 5
        folded = (np.arctan2(v, u) - np.pi / 2) % (2 * half_point)
        folded = np.minimum(folded, 2 * half_point - folded)
        radius = np.sqrt(r2)
        px, py = radius * np.cos(folded), radius * np.sin(folded)
        ex, ey = inner * np.cos(half_point) - 1.0, inner * np.sin(half_point)
        return ex * py - ey * (px - 1.0) >= 0.0
    raise ValueError(f'shape must be one of {SHAPES}, got {name!r}')


# ---------------------------------------------------------------- painting
def _random_colour(rng: np.random.Generator, avoid: Optional[np.ndarray] = None,
                   min_distance: float = 90.0) -> np.ndarray:
    """An RGB colour (float, 0..255) at least ``min_distance`` away from ``avoid``."""
    for _ in range(32):
        colour = rng.uniform(0, 255, size=3)
        if avoid is None or np.linalg.norm(colour - avoid) >= min_distance:
            return colour
    return 255.0 - avoid  # the complement is always far enough


def _smooth_noise(rng: np.random.Generator, size: int, cells: int) -> np.ndarray:
    """(size, size, 3) smooth colour noise in 0..255 (bicubic upsampling of a coarse grid)."""
    coarse = rng.integers(0, 256, size=(cells, cells, 3), dtype=np.uint8)
    return np.asarray(Image.fromarray(coarse).resize((size, size), Image.BICUBIC),
                      dtype=np.float32)


def _shared_background(rng: np.random.Generator, size: int, contrast: float) -> np.ndarray:
    """(size, size, 3) float background of the one shared distribution: smooth colour noise
    around ``SHARED_BACKGROUND_COLOUR`` scaled by ``contrast``, plus grain of fixed amplitude."""
    noise = _smooth_noise(rng, size, SHARED_BACKGROUND_CELLS) - np.float32(127.5)
    grain = rng.random(size=(size, size, 1), dtype=np.float32) - np.float32(0.5)
    return (np.asarray(SHARED_BACKGROUND_COLOUR, dtype=np.float32) + np.float32(contrast) * noise
            + np.float32(20.0) * grain)


def _background(rng: np.random.Generator, size: int, contrast: float = 1.0,
                kind: str = 'varied') -> np.ndarray:
    """(size, size, 3) float background of ``kind`` (``BACKGROUNDS``). 'varied': smooth noise,
    a gradient or stripes, plus grain, its deviation from its mean colour scaled by
    ``contrast``; 'shared': :func:`_shared_background`."""
    if kind == 'shared':
        return _shared_background(rng, size, contrast)
    kind = rng.integers(3)
    if kind == 0:
        image = _smooth_noise(rng, size, int(rng.integers(2, 9)))
    else:
        angle = rng.uniform(0, np.pi)
        coords = np.arange(size, dtype=np.float32) / size
        # projection of (x, y) on the direction `angle`, as a (size, size) broadcast sum
        proj = (coords[None, :] * np.cos(angle) + coords[:, None] * np.sin(angle))
        if kind == 1:
            weight = (proj - proj.min()) / (np.ptp(proj) + 1e-6)
        else:
            weight = 0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(3, 12) * proj)
        first, second = _random_colour(rng), _random_colour(rng)
        image = first.astype(np.float32) + weight[..., None] * (second - first).astype(
            np.float32)
    grain = rng.random(size=(size, size, 1), dtype=np.float32) - np.float32(0.5)
    image += np.float32(rng.uniform(0, 40)) * grain
    if contrast != 1.0:
        mean = image.reshape(-1, 3).mean(axis=0)
        image = mean + np.float32(contrast) * (image - mean)
    return image


def _draw_clutter(rng: np.random.Generator, image: np.ndarray,
                  count: Tuple[int, int] = (2, 8)) -> np.ndarray:
    """Draw ``count[0]``-``count[1]`` random lines and arcs (part of the background) onto
    ``image``."""
    size = image.shape[0]
    canvas = Image.fromarray(np.clip(image, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(canvas)
    for _ in range(int(rng.integers(count[0], count[1] + 1))):
        colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
        width = int(rng.integers(1, 4))
        x0, y0, x1, y1 = (float(c) for c in rng.uniform(0, size, size=4))
        if rng.random() < 0.6:
            draw.line((x0, y0, x1, y1), fill=colour, width=width)
        else:
            box = (min(x0, x1), min(y0, y1), max(x0, x1) + 1, max(y0, y1) + 1)
            start = float(rng.uniform(0, 360))
            draw.arc(box, start, start + float(rng.uniform(30, 200)), fill=colour,
                     width=width)
    return np.asarray(canvas, dtype=np.float32)


def _texture(rng: np.random.Generator, u: np.ndarray, v: np.ndarray,
             shape: Optional[str] = None) -> np.ndarray:
    """Brightness factor in [1 - amplitude, 1] over the object frame: ``shape``'s own pattern
    (CLASS_PATTERNS) at a random orientation, phase and amplitude, or without ``shape`` one of
    ``TEXTURES`` at random."""
    if shape is None:
        kind, cycles = TEXTURES[rng.integers(len(TEXTURES))], None
    else:
        kind, cycles = CLASS_PATTERNS[shape]
    if kind == 'solid':
        return np.ones(u.shape, dtype=np.float32)
    amplitude = rng.uniform(0.2, 0.5) if shape is None else rng.uniform(0.3, 0.6)
    if kind == 'stripes':
        angle = rng.uniform(0, np.pi)
        along = u * np.cos(angle) + v * np.sin(angle)
        if shape is None:
            pattern = 0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(2, 5) * along)
        else:
            pattern = 0.5 + 0.5 * np.sin(2 * np.pi * cycles * along + rng.uniform(0, 2 * np.pi))
    elif kind == 'checker':
        if shape is None:
            along, across, cycles = u, v, rng.uniform(2, 4)
        else:
            angle = rng.uniform(0, np.pi / 2)
            along = u * np.cos(angle) + v * np.sin(angle)
            across = v * np.cos(angle) - u * np.sin(angle)
        pattern = (np.floor(along * cycles) + np.floor(across * cycles)) % 2
    elif kind == 'rings':
        pattern = 0.5 + 0.5 * np.sin(2 * np.pi * cycles * np.sqrt(u * u + v * v)
                                     + rng.uniform(0, 2 * np.pi))
    else:
        pattern = rng.random(size=u.shape, dtype=np.float32)
    return 1.0 - amplitude * pattern


class _Canvas:
    """An image being painted plus the id map of the shapes visible on it (0 = background)."""

    def __init__(self, rng: np.random.Generator, size: int, style: SceneStyle):
        self.rng = rng
        self.size = size
        self.class_patterns = style.class_patterns
        self.image = _draw_clutter(
            rng, _background(rng, size, style.background_contrast, style.background),
            style.clutter)
        self.ids = np.zeros((size, size), dtype=np.int32)
        self.classes: List[int] = []
        self.full_areas = np.zeros(0, dtype=np.int64)
        self.visible = np.zeros(0, dtype=np.int64)

    def _frame(self, centre: Tuple[float, float], radius: float, angle: float):
        """Pixel window covering the object's disc and the object-frame coordinates in it."""
        cx, cy = centre
        x0, x1 = max(int(cx - radius) - 1, 0), min(int(cx + radius) + 2, self.size)
        y0, y1 = max(int(cy - radius) - 1, 0), min(int(cy + radius) + 2, self.size)
        dx = (np.arange(x0, x1, dtype=np.float32) + 0.5 - cx)[None, :]
        dy = (np.arange(y0, y1, dtype=np.float32) + 0.5 - cy)[:, None]
        cos, sin = np.cos(angle), np.sin(angle)
        u = (dx * cos + dy * sin) / radius
        v = (-dx * sin + dy * cos) / radius
        return (slice(y0, y1), slice(x0, x1)), u, v

    def try_place(self, class_index: int, shape: str, radius: float,
                  max_covered: float = 0.25, min_kept: float = 0.6,
                  tries: int = 20) -> bool:
        """Paint ``shape`` on top at a random pose where it overlaps earlier shapes on at most
        ``max_covered`` of its own area and leaves each of them at least ``min_kept`` of its
        full area visible. Returns whether a pose was found within ``tries``."""
        for _ in range(tries):
            centre = tuple(self.rng.uniform(radius, self.size - radius, size=2))
            angle = self.rng.uniform(0, 2 * np.pi)
            window, u, v = self._frame(centre, radius, angle)
            inside = shape_mask(shape, u, v)
            area = int(inside.sum())
            if area == 0:
                continue
            covered_ids = self.ids[window][inside]
            if np.count_nonzero(covered_ids) > max_covered * area:
                continue
            lost = np.bincount(covered_ids, minlength=len(self.classes) + 1)[1:]
            if np.any(self.visible - lost < min_kept * self.full_areas):
                continue
            self._paint(window, u, v, inside, class_index, shape)
            self.visible = np.append(self.visible - lost, area)
            self.full_areas = np.append(self.full_areas, area)
            return True
        return False

    def _paint(self, window, u: np.ndarray, v: np.ndarray, inside: np.ndarray,
               class_index: int, shape: str) -> None:
        region = self.image[window]
        colour = _random_colour(self.rng, avoid=region.reshape(-1, 3).mean(axis=0))
        texture = _texture(self.rng, u, v, shape if self.class_patterns else None)
        shaded = colour.astype(np.float32) * texture[..., None]
        region[inside] = shaded[inside]
        self.classes.append(class_index)
        self.ids[window][inside] = len(self.classes)

    def pixels(self) -> np.ndarray:
        return np.clip(np.rint(self.image), 0, 255).astype(np.uint8)


# ---------------------------------------------------------------- scenes
def _rng(seed: int, kind: str, split: str, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, _LAYOUT_CODE[kind], _SPLIT_CODE[split], index])


def single_object_scene(rng: np.random.Generator, size: int, shape: str,
                        class_index: int, style: SceneStyle = SceneStyle(),
                        objects: Tuple[int, int] = (1, 1),
                        radius: Tuple[float, float] = (0.22, 0.42)) -> _Canvas:
    """A scene of one class: ``objects`` (min, max) shapes ``shape`` (radius a fraction in
    ``radius`` of the image side), occluding each other a little, on a background of
    ``style``. The first shape always fits; a further one is left out when no pose fits."""
    canvas = _Canvas(rng, size, style)
    count = objects[0] if objects[0] == objects[1] else int(rng.integers(objects[0],
                                                                         objects[1] + 1))
    placed = canvas.try_place(class_index, shape, rng.uniform(*radius) * size)
    assert placed, 'the first shape on an empty canvas always fits'
    for _ in range(count - 1):
        canvas.try_place(class_index, shape, rng.uniform(*radius) * size)
    return canvas


def multi_object_scene(rng: np.random.Generator, size: int, classes: Sequence[str],
                       max_objects: int, style: SceneStyle = SceneStyle()) -> _Canvas:
    """1..``max_objects`` shapes (radius 7-28 % of the image), occluding each other a little,
    on a background of ``style``."""
    canvas = _Canvas(rng, size, style)
    for _ in range(int(rng.integers(1, max_objects + 1))):
        class_index = int(rng.integers(len(classes)))
        canvas.try_place(class_index, classes[class_index],
                         rng.uniform(0.07, 0.28) * size)
    return canvas


# ---------------------------------------------------------------- writers
def _save(array: np.ndarray, path: str) -> None:
    image = Image.fromarray(array)
    if path.endswith('.png'):
        image.save(path, format='PNG', optimize=False)
    else:
        image.save(path, format='JPEG', quality=95, subsampling=0)


def mask_to_rle(mask: np.ndarray) -> Dict:
    """COCO uncompressed RLE of a (H, W) bool mask: run lengths in column-major order,
    starting with a (possibly empty) run of zeros."""
    flat = mask.ravel(order='F').astype(np.int8)
    changes = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate(([0], changes, [flat.size]))
    counts = np.diff(bounds).tolist()
    if flat[0] == 1:
        counts = [0] + counts
    return {'size': [int(mask.shape[0]), int(mask.shape[1])], 'counts': counts}


def write_cls(root: str, seed: int, num: Dict[str, int], size: int,
              classes: Sequence[str], style: SceneStyle, objects: Tuple[int, int] = (1, 1),
              radius: Tuple[float, float] = (0.22, 0.42)) -> Dict[str, List[Dict]]:
    record = {}
    os.makedirs(osp.join(root, 'meta'))
    for split in SPLITS:
        lines, record[split] = [], []
        for name in classes:
            os.makedirs(osp.join(root, split, name))
            os.makedirs(osp.join(root, 'masks', split, name))
        for index in range(num[split]):
            label = index % len(classes)
            canvas = single_object_scene(_rng(seed, 'cls', split, index), size,
                                         classes[label], label, style, objects, radius)
            rel = f'{classes[label]}/{split}_{index:06d}.JPEG'
            _save(canvas.pixels(), osp.join(root, split, rel))
            mask = np.where(canvas.ids > 0, label + 1, 0).astype(np.uint8)
            _save(mask, osp.join(root, 'masks', split, rel[:-len('.JPEG')] + '.png'))
            lines.append(f'{rel} {label}')
            record[split].append({'file': rel, 'label': label,
                                  'area': int(canvas.visible.sum()),
                                  'objects': len(canvas.classes)})
        with open(osp.join(root, 'meta', f'{split}.txt'), 'w') as f:
            f.write('\n'.join(lines) + '\n')
        with open(osp.join(root, 'meta', f'{split}_seg.txt'), 'w') as f:
            f.write('\n'.join(line.split('.JPEG ')[0] for line in lines) + '\n')
    return record


def write_ade(root: str, seed: int, num: Dict[str, int], size: int,
              classes: Sequence[str], max_objects: int,
              style: SceneStyle) -> Dict[str, List[Dict]]:
    record = {}
    for split in SPLITS:
        image_dir = osp.join(root, 'images', _ADE_SPLIT_DIR[split])
        label_dir = osp.join(root, 'annotations', _ADE_SPLIT_DIR[split])
        os.makedirs(image_dir)
        os.makedirs(label_dir)
        record[split] = []
        for index in range(num[split]):
            canvas = multi_object_scene(_rng(seed, 'ade', split, index), size, classes,
                                        max_objects, style)
            # id k (1-based, order of drawing) -> label class_index + 1; 0 stays background
            id_to_label = np.array([0] + [c + 1 for c in canvas.classes], dtype=np.uint8)
            stem = f'synthetic_{split}_{index:06d}'
            _save(canvas.pixels(), osp.join(image_dir, stem + '.jpg'))
            _save(id_to_label[canvas.ids], osp.join(label_dir, stem + '.png'))
            record[split].append({
                'file': stem,
                'objects': [{'label': c, 'area': int(a)} for c, a in
                            zip(canvas.classes, canvas.visible)]})
    return record


def write_coco(root: str, seed: int, num: Dict[str, int], size: int,
               classes: Sequence[str], max_objects: int, style: SceneStyle) -> None:
    categories = [{'id': i + 1, 'name': name, 'supercategory': 'shape'}
                  for i, name in enumerate(classes)]
    os.makedirs(osp.join(root, 'annotations'))
    annotation_id = 1
    for split in SPLITS:
        image_dir = osp.join(root, f'{split}2017')
        os.makedirs(image_dir)
        images, annotations = [], []
        for index in range(num[split]):
            canvas = multi_object_scene(_rng(seed, 'coco', split, index), size, classes,
                                        max_objects, style)
            image_id = index + 1 + (0 if split == 'train' else 1_000_000)
            file_name = f'{image_id:012d}.jpg'
            _save(canvas.pixels(), osp.join(image_dir, file_name))
            images.append({'id': image_id, 'file_name': file_name, 'height': size,
                           'width': size})
            for instance, class_index in enumerate(canvas.classes, start=1):
                mask = canvas.ids == instance
                rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
                x0, y0 = int(cols[0]), int(rows[0])
                annotations.append({
                    'id': annotation_id, 'image_id': image_id,
                    'category_id': class_index + 1,
                    'bbox': [x0, y0, int(cols[-1]) + 1 - x0, int(rows[-1]) + 1 - y0],
                    'area': int(mask.sum()), 'iscrowd': 0,
                    'segmentation': mask_to_rle(mask)})
                annotation_id += 1
        with open(osp.join(root, 'annotations', f'instances_{split}2017.json'), 'w') as f:
            json.dump({'info': {'description': 'synthetic shapes', 'seed': seed},
                       'licenses': [], 'images': images, 'annotations': annotations,
                       'categories': categories}, f)


# ---------------------------------------------------------------- entry point
def check_layout(root: str, kind: str) -> None:
    """Raise ``FileNotFoundError`` naming the missing entries unless ``root`` holds every entry
    of layout ``kind`` (one of ``LAYOUT_KINDS``)."""
    if kind not in LAYOUTS:
        raise ValueError(f'kind must be one of {LAYOUT_KINDS}, got {kind!r}')
    missing = [entry for entry in LAYOUTS[kind] if not osp.exists(osp.join(root, entry))]
    if missing:
        raise FileNotFoundError(
            f'{kind} dataset root {root!r} lacks {missing}; expected a folder with '
            f'{list(LAYOUTS[kind])} (python tools/data/make_synthetic.py --out <dir> writes '
            f'<dir>/{kind})')


def _prepare_out(out: str, layouts: Sequence[str]) -> Dict:
    """Create ``out``, or clear the requested layouts a previous run of this script wrote
    there (other layouts stay); returns the manifest of the layouts kept."""
    if osp.exists(out) and not osp.isdir(out):
        raise ValueError(f'--out {out!r} exists and is not a directory; expected a new or '
                         f'empty directory, or one written earlier by this script')
    kept = {}
    if osp.isdir(out) and os.listdir(out):
        if not osp.isfile(osp.join(out, _MANIFEST)):
            raise ValueError(
                f'--out {out!r} is a non-empty directory without {_MANIFEST}; refusing to '
                f'write into a folder this script did not create')
        with open(osp.join(out, _MANIFEST)) as f:
            kept = {k: v for k, v in json.load(f).items() if k not in layouts}
        for kind in layouts:
            if osp.isdir(osp.join(out, kind)):
                shutil.rmtree(osp.join(out, kind))
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as error:
        raise ValueError(f'--out {out!r} cannot be created: {error}') from error
    return kept


def make_synthetic(out: str, seed: int = 0, num_train: int = 400, num_val: int = 100,
                   size: int = 224, seg_size: int = 256, det_size: int = 320,
                   classes: Sequence[str] = SHAPES, max_objects: int = 5,
                   layouts: Sequence[str] = LAYOUT_KINDS,
                   style: SceneStyle = SceneStyle(),
                   cls_objects: Tuple[int, int] = (1, 1),
                   cls_radius: Tuple[float, float] = (0.22, 0.42)) -> Dict:
    """Write the requested layouts under ``out`` and return the manifest: per layout, the
    options and (cls, ade) what was drawn in each image. Layouts not requested that an earlier
    run wrote to ``out`` are kept.

    Args:
        out: output root; ``<out>/cls``, ``<out>/ade``, ``<out>/coco`` are created.
        seed: base seed; the same options write the same bytes.
        num_train, num_val: images per split (each layout).
        size, seg_size, det_size: square image side of cls / ade / coco images.
        classes: shape classes (a subset of ``SHAPES``, in label order).
        max_objects: most shapes per ade / coco image.
        layouts: which of ``('cls', 'ade', 'coco')`` to write.
        style: backgrounds, clutter and patterns of every layout (:class:`SceneStyle`).
        cls_objects: (min, max) shapes per cls image, all of the image's class.
        cls_radius: (min, max) radius of a cls image's shapes, as a fraction of its side.
    """
    for name, value in (('num_train', num_train), ('num_val', num_val)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f'{name} must be a positive int, got {value!r}')
    for name, value in (('size', size), ('seg_size', seg_size), ('det_size', det_size)):
        if not isinstance(value, int) or value < 32:
            raise ValueError(f'{name} must be an int >= 32, got {value!r}')
    unknown = [c for c in classes if c not in SHAPES]
    if unknown or len(set(classes)) != len(classes) or len(classes) < 2:
        raise ValueError(f'classes must be >= 2 distinct names from {SHAPES}, got '
                         f'{list(classes)}')
    if not 1 <= max_objects <= 20:
        raise ValueError(f'max_objects must be in [1, 20], got {max_objects}')
    bad = [k for k in layouts if k not in LAYOUT_KINDS]
    if bad or not layouts:
        raise ValueError(f'layouts must be a non-empty subset of {LAYOUT_KINDS}, '
                         f'got {list(layouts)}')
    if not 0.0 <= style.background_contrast <= 1.0:
        raise ValueError(f'background_contrast must be in [0, 1], got '
                         f'{style.background_contrast!r}')
    low, high = style.clutter
    if not 0 <= low <= high:
        raise ValueError(f'clutter must be (min, max) with 0 <= min <= max, got '
                         f'{tuple(style.clutter)}')
    if style.background not in BACKGROUNDS:
        raise ValueError(f'background must be one of {BACKGROUNDS}, got {style.background!r}')
    low, high = cls_objects
    if not 1 <= low <= high <= 20:
        raise ValueError(f'cls_objects must be (min, max) with 1 <= min <= max <= 20, got '
                         f'{tuple(cls_objects)}')
    low, high = cls_radius
    if not 0.02 <= low <= high <= 0.5:
        raise ValueError(f'cls_radius must be (min, max) with 0.02 <= min <= max <= 0.5 (a '
                         f'fraction of the image side), got {tuple(cls_radius)}')
    manifest = _prepare_out(out, layouts)

    classes = list(classes)
    num = {'train': num_train, 'val': num_val}
    common = dict(seed=seed, classes=classes, num=num, style=style._asdict())
    if 'cls' in layouts:
        manifest['cls'] = dict(common, size=size, objects=list(cls_objects),
                               radius=list(cls_radius), background_label=0,
                               records=write_cls(osp.join(out, 'cls'), seed, num, size,
                                                 classes, style, tuple(cls_objects),
                                                 tuple(cls_radius)))
    if 'ade' in layouts:
        manifest['ade'] = dict(common, size=seg_size, max_objects=max_objects,
                               background_label=0, records=write_ade(
                                   osp.join(out, 'ade'), seed, num, seg_size, classes,
                                   max_objects, style))
    if 'coco' in layouts:
        write_coco(osp.join(out, 'coco'), seed, num, det_size, classes, max_objects, style)
        manifest['coco'] = dict(common, size=det_size, max_objects=max_objects)
    for kind in layouts:
        check_layout(osp.join(out, kind), kind)
    with open(osp.join(out, _MANIFEST), 'w') as f:
        json.dump(manifest, f, sort_keys=True)
    return manifest


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Generate the synthetic shapes dataset (cls / ADE20K / COCO layouts).')
    parser.add_argument('--out', required=True, help='output root, e.g. data/synthetic')
    parser.add_argument('--seed', type=int, default=0,
                        help='base seed; the same options write the same bytes (default 0)')
    parser.add_argument('--num-train', type=int, default=400,
                        help='training images per layout (default 400)')
    parser.add_argument('--num-val', type=int, default=100,
                        help='validation images per layout (default 100)')
    parser.add_argument('--size', type=int, default=224, help='cls image side')
    parser.add_argument('--seg-size', type=int, default=256, help='ade image side')
    parser.add_argument('--det-size', type=int, default=320, help='coco image side')
    parser.add_argument('--classes', nargs='+', default=list(SHAPES), choices=SHAPES,
                        help='shape classes in label order')
    parser.add_argument('--max-objects', type=int, default=5,
                        help='most shapes per ade / coco image')
    parser.add_argument('--layouts', nargs='+', default=list(LAYOUT_KINDS),
                        choices=LAYOUT_KINDS, help='layouts to write (default: all)')
    parser.add_argument('--background-contrast', type=float, default=1.0,
                        help="scale of the backgrounds' deviation from their mean colour "
                        '(0.3: subdued backgrounds on which the shapes stand out)')
    parser.add_argument('--clutter', type=int, nargs=2, default=[2, 8], metavar=('MIN', 'MAX'),
                        help='lines and arcs drawn over each background (0 0: none)')
    parser.add_argument('--class-patterns', action='store_true',
                        help='each shape class its own inner pattern (a class cue that '
                        'survives colour changes) instead of a random one')
    parser.add_argument('--background', choices=BACKGROUNDS, default='varied',
                        help="'varied' (default): colours and kind drawn per image; 'shared': "
                        'every background from one distribution, so that only the shapes '
                        'tell the images apart')
    parser.add_argument('--cls-objects', type=int, nargs=2, default=[1, 1],
                        metavar=('MIN', 'MAX'),
                        help='shapes per cls image, all of its class (default 1 1)')
    parser.add_argument('--cls-radius', type=float, nargs=2, default=[0.22, 0.42],
                        metavar=('MIN', 'MAX'),
                        help="radius of a cls image's shapes, a fraction of its side "
                        '(default 0.22 0.42)')
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    make_synthetic(args.out, args.seed, args.num_train, args.num_val, args.size, args.seg_size,
                   args.det_size, args.classes, args.max_objects, args.layouts,
                   SceneStyle(args.background_contrast, tuple(args.clutter), args.class_patterns,
                              args.background),
                   tuple(args.cls_objects), tuple(args.cls_radius))
    print(f'wrote {", ".join(args.layouts)} layouts ({args.num_train} train / '
          f'{args.num_val} val images each, {len(args.classes)} classes) to {args.out}')


if __name__ == '__main__':
    main()
