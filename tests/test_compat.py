"""dinomamba_mm.compat: what the fixes promise, checked against torch's own behaviour.

docs/faq.md ("Compatibility fixes") lists each fix with the test here that covers it.
"""
import argparse
import copy
import os.path as osp
import pickle
import warnings

import numpy as np
import pytest
import torch
import torch.distributed as dist
from mmengine.config import Config
from mmengine.dist import utils as mmengine_dist_utils
from mmengine.logging import HistoryBuffer, MessageHub
from mmengine.registry import MODEL_WRAPPERS
from mmengine.runner import Runner
from mmengine.runner.checkpoint import CheckpointLoader, _load_checkpoint, load_checkpoint

import dinomamba_mm  # noqa: F401
from dinomamba_mm.checkpoints.files import UNSAFE_LOAD_ENV

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


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


class RunsCode:
    """An object whose unpickling runs code: it creates ``marker``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f'open({self.marker!r}, "w").close()', )


def test_a_checkpoint_that_runs_code_is_refused_and_never_executed(tmp_path):
    """torch >= 2.6 with the plugin: mmengine's loaders (load_from, resume, Pretrained, our
    tools) refuse the file and name the opt-in; the payload does not run."""
    marker = str(tmp_path / 'payload_ran')
    path = str(tmp_path / 'evil.pth')
    torch.save({'state_dict': {'w': torch.ones(2)}, 'payload': RunsCode(marker)}, path)
    with pytest.raises(pickle.UnpicklingError,
                       match=r'evil\.pth holds references to builtins\.exec.*'
                       r'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1'):
        _load_checkpoint(path, map_location='cpu')
    with pytest.raises(pickle.UnpicklingError, match='evil.pth'):
        load_checkpoint(torch.nn.Linear(2, 1), path, map_location='cpu')
    assert not osp.exists(marker)


def test_unsafe_loading_is_an_explicit_opt_in(tmp_path, monkeypatch):
    # Stock mmengine pickles HistoryBuffer's statistics functions (builtins.getattr).
    path = str(tmp_path / 'stock.pth')
    torch.save({'state_dict': {'w': torch.ones(2)}, 'fn': HistoryBuffer.min}, path)
    with pytest.raises(pickle.UnpicklingError,
                       match='stock.pth holds references to builtins.getattr'):
        _load_checkpoint(path, map_location='cpu')
    monkeypatch.setenv(UNSAFE_LOAD_ENV, '1')
    with pytest.warns(UserWarning, match=UNSAFE_LOAD_ENV):
        loaded = _load_checkpoint(path, map_location='cpu')
    assert torch.equal(loaded['state_dict']['w'], torch.ones(2))


def test_missing_local_checkpoint_names_the_file(tmp_path):
    missing = str(tmp_path / 'missing.pth')
    with pytest.raises(FileNotFoundError, match='missing.pth'):
        CheckpointLoader.load_checkpoint(missing)


def test_checkpoints_written_with_the_plugin_load_with_the_safe_unpickler(tmp_path):
    hub = MessageHub.get_instance('compat-test-written')
    hub.update_scalar('train/loss', 2.0)
    path = str(tmp_path / 'ours.pth')
    torch.save({'message_hub': hub.state_dict()}, path)
    loaded = torch.load(path, weights_only=True)  # raises without the fix
    buffer = loaded['message_hub']['log_scalars']['train/loss']
    assert buffer.current() == 2.0 and buffer.mean() == 2.0  # defaults registered again


@pytest.mark.parametrize('config', [
    'demo/dino_dinovim-demo_synthetic.py',
    'demo/upernet_dinovim-demo_synthetic-ade.py',
    'demo/cascade-mask-rcnn_dinovim-demo_synthetic-coco.py',
])
def test_configs_wrap_cpu_models_in_ddp(config, tmp_path):
    """mmengine's Runner adds device_ids=[LOCAL_RANK] (which torch refuses for CPU modules)
    unless the config's model_wrapper_cfg sets them: the families' bases set None."""
    cfg = Config.fromfile(osp.join(ROOT, 'configs', config))
    init_file = osp.join(str(tmp_path), 'pg')
    dist.init_process_group('gloo', init_method=f'file://{init_file}', rank=0,
                            world_size=1)
    try:
        # what Runner.wrap_model does with a model_wrapper_cfg
        model = MODEL_WRAPPERS.build(
            copy.deepcopy(cfg.model_wrapper_cfg),
            default_args=dict(module=torch.nn.Linear(2, 1), device_ids=[0]))
        assert model.device_ids is None
        model(torch.ones(3, 2)).sum().backward()
        assert model.module.weight.grad is not None
    finally:
        dist.destroy_process_group()


def test_init_dist_without_cuda_uses_gloo(monkeypatch):
    """mmengine 0.10.7 calls torch.cuda.set_device first; without CUDA we go to gloo."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    calls = []
    monkeypatch.setattr(torch.cuda, 'set_device', lambda *a: calls.append('set_device'))
    monkeypatch.setattr(dist, 'init_process_group',
                        lambda backend, **kwargs: calls.append(backend))
    monkeypatch.setenv('RANK', '0')
    monkeypatch.setenv('LOCAL_RANK', '0')
    mmengine_dist_utils.init_dist('pytorch', backend='nccl')
    assert calls == ['gloo']


def test_collate_fn_of_a_package_base_is_built(tmp_path):
    """mmengine stamps _scope_ on collate_fn of a 'pkg::' base and passes it to the function."""
    loader = Runner.build_dataloader(dict(
        batch_size=2, num_workers=0, dataset=[torch.zeros(2), torch.ones(2)],
        sampler=dict(type='DefaultSampler', shuffle=False),
        collate_fn=dict(type='default_collate', _scope_='dinomamba_mm')))
    assert torch.equal(next(iter(loader)), torch.tensor([[0., 0.], [1., 1.]]))


@pytest.fixture
def dino_pipeline_imported():
    """What a config with DINOMultiCrop does: import its module, which applies the hue fix."""
    import dinomamba_mm.datasets.transforms.dino_multi_crop  # noqa: F401


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
def test_adjust_hue_rotates_hue_on_numpy_2(backend, factor, dino_pipeline_imported):
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


def test_mmpretrain_color_jitter_runs_with_negative_hue(dino_pipeline_imported):
    from mmpretrain.datasets.transforms import ColorJitter
    jitter = ColorJitter(hue=0.5)
    np.random.seed(0)
    for _ in range(8):  # half of the draws are negative
        jitter(dict(img=_saturated_bgr()))
    with pytest.raises(ValueError, match='hue_factor'):
        import mmcv
        mmcv.adjust_hue(_saturated_bgr(), 0.7)


@pytest.mark.parametrize('mmcv_version,numpy_version,patched', [
    ('2.1.0', '2.2.0', True), ('2.3.0', '2.2.0', False), ('2.1.0', '1.26.4', False)])
def test_hue_fix_is_gated_on_the_versions_it_is_for(mmcv_version, numpy_version, patched,
                                                    monkeypatch):
    import mmcv
    from mmcv.image import photometric

    from dinomamba_mm import compat
    shipped = _mmcv_photometric_as_shipped().adjust_hue
    for owner in (mmcv, mmcv.image, photometric):
        monkeypatch.setattr(owner, 'adjust_hue', shipped)
    monkeypatch.setattr(mmcv, '__version__', mmcv_version)
    monkeypatch.setattr(np, '__version__', numpy_version)
    compat.fix_adjust_hue()
    assert (mmcv.adjust_hue is compat._adjust_hue) == patched
    assert (photometric.adjust_hue is compat._adjust_hue) == patched
