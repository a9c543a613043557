"""dinomamba_mm.compat: what the shims promise, checked against torch's own behaviour."""
import argparse
import os.path as osp
import warnings

import numpy as np
import pytest
import torch
import torch.distributed as dist
from mmengine.logging import HistoryBuffer, MessageHub
from mmengine.model import MMDistributedDataParallel
from mmengine.runner.checkpoint import CheckpointLoader, _load_checkpoint

import dinomamba_mm  # noqa: F401


def test_message_hub_checkpoint_loads_with_the_safe_unpickler(tmp_path):
    hub = MessageHub.get_instance('compat-test')
    hub.update_scalar('train/loss', 1.5)
    hub.update_scalar('train/loss', np.float64(0.5))
    path = str(tmp_path / 'ckpt.pth')
    torch.save({'message_hub': hub.state_dict(), 'meta': {'seed': np.int64(3)},
                'args': argparse.Namespace(arch='vim_tiny', lr=5e-4)}, path)
    # weights_only=True must succeed without any fallback.
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        loaded = torch.load(path, weights_only=True)
    buffer = loaded['message_hub']['log_scalars']['train/loss']
    assert isinstance(buffer, HistoryBuffer)
    assert buffer.mean() == pytest.approx(1.0)
    assert buffer.statistics('max') == pytest.approx(1.5)
    assert loaded['meta']['seed'] == 3
    assert loaded['args'].arch == 'vim_tiny'


def test_checkpoint_of_a_run_without_the_plugin_loads_locally_with_a_warning(tmp_path):
    # Stock mmengine pickles HistoryBuffer's statistics functions, which only
    # builtins.getattr can rebuild; this is the same construct.
    path = str(tmp_path / 'stock.pth')
    torch.save({'state_dict': {'w': torch.ones(2)}, 'fn': HistoryBuffer.min}, path)
    with pytest.raises(Exception, match='Weights only load failed'):
        torch.load(path, weights_only=True)
    with pytest.warns(UserWarning, match='stock.pth'):
        loaded = _load_checkpoint(path, map_location='cpu')
    assert torch.equal(loaded['state_dict']['w'], torch.ones(2))


def test_missing_local_checkpoint_names_the_file(tmp_path):
    missing = str(tmp_path / 'missing.pth')
    with pytest.raises(FileNotFoundError, match='missing.pth'):
        CheckpointLoader.load_checkpoint(missing)


def test_ddp_wrapper_accepts_cpu_modules_with_device_ids(tmp_path):
    """mmengine's Runner passes device_ids=[LOCAL_RANK]; torch refuses that for CPU modules."""
    init_file = osp.join(str(tmp_path), 'pg')
    dist.init_process_group('gloo', init_method=f'file://{init_file}', rank=0,
                            world_size=1)
    try:
        model = MMDistributedDataParallel(module=torch.nn.Linear(2, 1),
                                          device_ids=[0], broadcast_buffers=False)
        assert model.device_ids is None
        out = model(torch.ones(3, 2))
        out.sum().backward()
        assert model.module.weight.grad is not None
    finally:
        dist.destroy_process_group()


def _mmcv_photometric_as_shipped():
    """mmcv's own photometric module, loaded afresh (the oracle for non-negative factors)."""
    import importlib.util

    import mmcv.image.photometric as patched
    spec = importlib.util.spec_from_file_location('mmcv_photometric_original',
                                                  patched.__file__)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = 'mmcv.image'
    spec.loader.exec_module(module)
    return module


def _saturated_bgr(seed=1, size=16):
    """Fully saturated, bright pixels: their hue survives the HSV round trip."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    hsv = np.stack([rng.integers(0, 256, (size, size)), np.full((size, size), 255),
                    np.full((size, size), 255)], axis=-1).astype(np.uint8)
    return np.asarray(Image.fromarray(hsv, 'HSV').convert('RGB'))[..., ::-1].copy()


@pytest.mark.parametrize('backend', ['pillow', 'cv2'])
@pytest.mark.parametrize('factor', [-0.5, -0.1, 0.2])
def test_adjust_hue_rotates_hue_on_numpy_2(backend, factor):
    import cv2
    import mmcv
    from PIL import Image

    def hue(img):
        if backend == 'pillow':
            rgb = Image.fromarray(np.ascontiguousarray(img[..., ::-1]))
            return np.asarray(rgb.convert('HSV'))[..., 0].astype(int)
        return cv2.cvtColor(img, cv2.COLOR_BGR2HSV_FULL)[..., 0].astype(int)

    img = _saturated_bgr()
    out = mmcv.adjust_hue(img, factor, backend=backend)
    assert np.median((hue(out) - hue(img)) % 256) == int(factor * 255) % 256
    if factor >= 0:  # where mmcv's own implementation works, results are identical
        shipped = _mmcv_photometric_as_shipped().adjust_hue(img, factor, backend=backend)
        assert np.array_equal(out, shipped)


def test_mmpretrain_color_jitter_runs_with_negative_hue():
    from mmpretrain.datasets.transforms import ColorJitter
    jitter = ColorJitter(hue=0.5)
    np.random.seed(0)
    for _ in range(8):  # half of the draws are negative
        jitter(dict(img=_saturated_bgr()))
    with pytest.raises(ValueError, match='hue_factor'):
        import mmcv
        mmcv.adjust_hue(_saturated_bgr(), 0.7)
