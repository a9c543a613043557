"""The README's example of a config inheriting ours runs as written: its ```python block (the
config) and the ```bash block after it (the command) are taken from README.md and run verbatim
in a temporary folder outside the checkout, holding a handful of images in the folder the config
names. The package is the checkout's (on PYTHONPATH, ahead of the installed copy), with its
``dinomamba_mm/.mim`` folder as an install makes it (the ``mim_links`` fixture)."""
import os
import os.path as osp
import re
import subprocess
import sys

import numpy as np
from PIL import Image

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def readme_blocks() -> list:
    """[(language, text)] of README.md's fenced code blocks, in order."""
    with open(osp.join(ROOT, 'README.md')) as f:
        return re.findall(r'^```(\w*)\n(.*?)^```', f.read(), re.DOTALL | re.MULTILINE)


def inheritance_example() -> tuple:
    """(config, command): the one python block inheriting a ``dinomamba_mm::`` config and the
    bash block that follows it."""
    blocks = readme_blocks()
    (index, ) = [i for i, (language, text) in enumerate(blocks)
                 if language == 'python' and text.startswith("_base_ = 'dinomamba_mm::")]
    language, command = blocks[index + 1]
    assert language == 'bash', blocks[index + 1]
    return blocks[index][1], command


def write_images(folder, count: int) -> None:
    """``count`` images of a user's folder: sub-folders at two depths, JPEG and PNG, sizes of
    their own, no annotation file."""
    rng = np.random.default_rng(0)
    for i in range(count):
        sub = folder / ('cats' if i % 2 else osp.join('dogs', 'puppies'))
        sub.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (120 + 8 * i, 160, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(sub / f'{i}.{"png" if i % 3 == 0 else "jpg"}')


def run_example(tmp_path, images: int) -> subprocess.CompletedProcess:
    config, command = inheritance_example()
    (config_file, ) = re.findall(r'(\S+\.py)\b', command)
    (tmp_path / config_file).write_text(config)
    (data_root, ) = re.findall(r"data_root='([^']+)'", config)
    write_images(tmp_path / data_root, images)
    env = dict(os.environ,
               PATH=os.pathsep.join([osp.dirname(sys.executable), os.environ['PATH']]),
               PYTHONPATH=os.pathsep.join([ROOT, *filter(None, [os.environ.get('PYTHONPATH')])]))
    return subprocess.run(['bash', '-e', '-c', command], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=900)


def test_the_readme_has_one_inheritance_example_and_its_command():
    config, command = inheritance_example()
    assert 'python -m dinomamba_mm train ' in command


def test_the_readme_inheritance_example_trains_as_written(tmp_path, mim_links):
    proc = run_example(tmp_path, images=6)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    (batch_size, ) = re.findall(r'batch_size=(\d+)', inheritance_example()[0])
    batches = 6 // int(batch_size)
    assert (f'train_dataloader: 6 images, batch_size {batch_size}, drop_last True: '
            f'{batches} batches per epoch') in log, log[-5000:]
    assert re.search(rf'Epoch\(train\) \[1\]\[{batches}/{batches}\]', log), log[-3000:]
    (checkpoint, ) = (tmp_path / 'work_dirs').glob('*/epoch_1.pth')
    # noise the log must not carry: a line per parameter, torch's warnings on workers and
    # pinning (the tool fits both to the machine), setuptools' pkg_resources warning
    for noise in ('paramwise_options', 'Our suggested max number of worker',
                  "'pin_memory' argument is set as true", 'pkg_resources is deprecated'):
        assert noise not in log, noise


def test_fewer_images_than_the_batch_size_are_named_before_training(tmp_path, mim_links):
    (batch_size, ) = re.findall(r'batch_size=(\d+)', inheritance_example()[0])
    images = int(batch_size) - 1
    proc = run_example(tmp_path, images=images)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log[-3000:]
    assert (f'train_dataloader gives no full batch: its dataset has {images} images, fewer '
            f'than batch_size {batch_size}, and drop_last=True drops an incomplete batch'
            in log), log[-3000:]
    assert f'--cfg-options train_dataloader.batch_size={images}' in log
    assert 'epoch_length' not in log and 'Epoch(train)' not in log

