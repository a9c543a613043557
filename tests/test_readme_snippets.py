"""The README's config example runs as written: copied from README.md into a config file, it
trains through tools/train.py on a folder of a few images (a tiny model and 2 iterations set by
a child config, the way a user shrinks a run), on this machine (AMP falls back to float32
without an accelerator)."""
import os
import os.path as osp
import re
import subprocess
import sys

import numpy as np
from PIL import Image

from dinomamba_mm.engine.safeguards import has_amp_device

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def readme_config_snippets() -> list:
    """The README's ```python blocks that are configs inheriting ours (``_base_ = ...``)."""
    with open(osp.join(ROOT, 'README.md')) as f:
        blocks = re.findall(r'```python\n(.*?)```', f.read(), re.DOTALL)
    return [block for block in blocks if block.startswith("_base_ = 'dinomamba_mm::")]


SHRINK = """
_base_ = './readme_config.py'
model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims=32, num_layers=2, headdim=16, d_state=8)),
    neck=dict(in_channels=32, out_channels=64, hidden_channels=64, bottleneck_channels=16),
    head=dict(out_channels=64))
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False)
train_cfg = dict(max_epochs=1)
"""


def test_the_readme_has_one_inheritance_example():
    assert len(readme_config_snippets()) == 1


def test_the_readme_inheritance_example_trains_as_written(tmp_path):
    (snippet, ) = readme_config_snippets()
    data_root = re.search(r"data_root='([^']+)'", snippet).group(1)
    rng = np.random.default_rng(0)
    for i in range(4):  # a user's folder: two sub-folders of images, no annotation file
        folder = tmp_path / data_root / ('cats' if i % 2 else 'dogs')
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (48, 40, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f'{i}.jpg')
    (tmp_path / 'readme_config.py').write_text(snippet)
    (tmp_path / 'tiny.py').write_text(SHRINK)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in [os.environ.get('PYTHONPATH')] if p]))
    proc = subprocess.run(
        [sys.executable, osp.join(ROOT, 'tools', 'train.py'), 'tiny.py', '--work-dir', 'work'],
        cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    assert (tmp_path / 'work' / 'epoch_1.pth').is_file(), log[-3000:]
    assert re.search(r'Epoch\(train\) \[1\]\[2/2\]', log), log[-3000:]
    assert 'pkg_resources is deprecated' not in log  # known noise of the setuptools<81 pin
    if not has_amp_device():
        assert 'AmpOptimWrapper replaced by OptimWrapper' in log, log[-3000:]
