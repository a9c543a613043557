"""A few labelled PNGs in mmpretrain's CustomDataset layout, for Runner-level tests."""
import os
import os.path as osp

import numpy as np
from PIL import Image


def write_tiny_cls_dataset(root: str, num_images: int = 8, size: int = 32,
                           num_classes: int = 2, seed: int = 0) -> str:
    """Write ``root/images/*.png`` and ``root/ann.txt`` ("path label" lines); return root."""
    rng = np.random.default_rng(seed)
    lines = []
    img_dir = osp.join(root, 'images')
    os.makedirs(img_dir, exist_ok=True)
    for i in range(num_images):
        label = i % num_classes
        pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        pixels[..., label] = 255  # a class is a saturated colour channel
        Image.fromarray(pixels).save(osp.join(img_dir, f'{i}.png'))
        lines.append(f'images/{i}.png {label}')
    with open(osp.join(root, 'ann.txt'), 'w') as f:
        f.write('\n'.join(lines) + '\n')
    return root
