"""dinomamba_mm.compat: importing the plugin leaves the stack as it was; each fix works on the
path that applies it, checked against torch's / mmengine's / mmcv's own behaviour.

docs/faq.md ("Compatibility fixes") lists each fix with the test here that covers it.
"""
import argparse
import copy
import datetime
import json
import os.path as osp
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
import torch.distributed as dist
from mmengine.config import Config
from mmengine.logging import HistoryBuffer, MessageHub
from mmengine.registry import MODEL_WRAPPERS
from mmengine.runner import Runner
from mmengine.runner.checkpoint import CheckpointLoader

import dinomamba_mm  # noqa: F401
from dinomamba_mm import compat
from dinomamba_mm.checkpoints import load_checkpoint_into, read_checkpoint, resolve_checkpoint
from dinomamba_mm.checkpoints.files import UNSAFE_LOAD_ENV

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))

# What an import could rewrite, taken before and after `import dinomamba_mm` and a lookup in
# every registry (which imports every module of ours that registers something). The frameworks
# are imported first: they add warning filters of their own.
UNCHANGED_PROBE = r'''
import json, sys, warnings
import mmdet.models, mmpretrain.models, mmseg.models  # noqa: E401
import mmcv, mmcv.image, mmcv.image.photometric as photometric
import mmengine.config.config as config_module, mmengine.dist.utils as dist_utils
import mmengine.utils as mmengine_utils
import torch
from mmengine.config.utils import MODULE2PACKAGE
from mmengine.fileio.backends.registry_utils import backends
from mmengine.logging.history_buffer import HistoryBuffer
from mmengine.runner import Runner
from mmengine.runner.checkpoint import CheckpointLoader


def snapshot():
    return dict(
        schemes=dict(CheckpointLoader._schemes),
        get_installed_path=[config_module.get_installed_path,
                            mmengine_utils.get_installed_path],
        init_dist_pytorch=[dist_utils._init_dist_pytorch, dist_utils.init_dist],
        history_buffer=[HistoryBuffer.__getstate__, HistoryBuffer.__setstate__],
        build_dataloader=[Runner.__dict__['build_dataloader']],
        adjust_hue=[mmcv.adjust_hue, mmcv.image.adjust_hue, photometric.adjust_hue],
        warning_filters=list(warnings.filters),
        package_map=dict(MODULE2PACKAGE),
        file_backends=dict(backends),
        safe_globals=list(torch.serialization.get_safe_globals()))


before = snapshot()
import dinomamba_mm
from dinomamba_mm import registry
for name, value in vars(registry).items():
    if isinstance(value, registry.PluginRegistry):
        value.import_from_location()
import dinomamba_mm.checkpoints, dinomamba_mm.engine.safeguards  # noqa: E401
after = snapshot()

result = {}
for key in before:
    if key == 'schemes':
        result[key] = (list(before[key]) == list(after[key]) and
                       all(before[key][p] is after[key][p] for p in before[key]))
    elif key in ('package_map', 'safe_globals', 'file_backends'):
        result[key] = sorted(set(map(str, after[key])) - set(map(str, before[key])))
    else:
        result[key] = len(before[key]) == len(after[key]) and all(
            a is b for a, b in zip(before[key], after[key]))
print('RESULT ' + json.dumps(result))
'''


def test_importing_the_plugin_leaves_mmengine_and_mmcv_as_they_were(tmp_path):
    """In a fresh interpreter: mmengine's checkpoint schemes, the 5 functions compat.py used to
    rewrite and the warning filters are the very objects they were; what is added is our entry
    in mmengine's package map and torch's allow-list (the two fixes mmengine needs first), and
    names of our own (the file backend 'atomic_local', as the registries' children)."""
    proc = subprocess.run([sys.executable, '-c', UNCHANGED_PROBE], capture_output=True,
                          text=True, cwd=str(tmp_path), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads([line for line in proc.stdout.splitlines()
                         if line.startswith('RESULT ')][-1][len('RESULT '):])
    added_globals = result.pop('safe_globals')
    assert result.pop('package_map') == ['dinomamba_mm']
    assert result == dict(schemes=True, get_installed_path=True, init_dist_pytorch=True,
                          history_buffer=True, build_dataloader=True, adjust_hue=True,
                          warning_filters=True, file_backends=['atomic_local'])
    assert any('HistoryBuffer' in name for name in added_globals) == \
        compat.TORCH_LOADS_WEIGHTS_ONLY


def test_message_hub_checkpoint_loads_with_the_safe_unpickler(tmp_path):
    hub = MessageHub.get_instance('compat-test')
    hub.update_scalar('train/loss', 1.5)
    hub.update_scalar('train/loss', np.float64(0.5))
    state = hub.state_dict()
    compat.leave_default_statistics_out(state)
    path = str(tmp_path / 'ckpt.pth')
    torch.save({'message_hub': state, 'meta': {'seed': np.int64(3)},
                'args': argparse.Namespace(arch='vim_tiny', lr=5e-4)}, path)
    # weights_only=True must succeed without any fallback.
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        loaded = torch.load(path, weights_only=True)
    buffer = loaded['message_hub']['log_scalars']['train/loss']
    assert type(buffer) is HistoryBuffer
    assert buffer.mean() == pytest.approx(1.0)
    assert buffer.statistics('max') == pytest.approx(1.5)
    assert loaded['meta']['seed'] == 3
    assert loaded['args'].arch == 'vim_tiny'


class _Runner:
    def __init__(self, hub):
        self.message_hub = hub


@pytest.mark.parametrize('hook_type', ['SafeUnpickleHook', 'ResumableCheckpointHook'])
def test_our_checkpoint_hooks_write_what_the_safe_unpickler_reads(tmp_path, hook_type):
    """mmengine 0.10.7 pickles HistoryBuffer's statistics functions as builtins.getattr
    references: the checkpoint of a stock run cannot be resumed on torch >= 2.6. Saved through
    our hooks, the buffers load as plain HistoryBuffers, the defaults registered again."""
    from dinomamba_mm.registry import HOOKS
    hub = MessageHub.get_instance(f'compat-test-{hook_type}')
    hub.update_scalar('train/loss', 2.0)
    hub.update_scalar('train/loss', 4.0)
    checkpoint = {'meta': {'epoch': 1, 'iter': 2}, 'message_hub': hub.state_dict()}
    stock = str(tmp_path / 'stock.pth')
    torch.save(copy.deepcopy(checkpoint), stock)
    if compat.TORCH_LOADS_WEIGHTS_ONLY and compat.MMENGINE_CHECKED:
        with pytest.raises(pickle.UnpicklingError, match='getattr'):
            torch.load(stock, weights_only=True)
    HOOKS.build(dict(type=f'dinomamba_mm.{hook_type}')).before_save_checkpoint(
        _Runner(hub), checkpoint)
    ours = str(tmp_path / 'ours.pth')
    torch.save(checkpoint, ours)
    buffer = torch.load(ours, weights_only=True)['message_hub']['log_scalars']['train/loss']
    assert type(buffer) is HistoryBuffer
    assert (buffer.current(), buffer.mean(), buffer.statistics('min')) == (4.0, 3.0, 2.0)
    fresh = MessageHub.get_instance(f'compat-test-{hook_type}-resumed')
    fresh.load_state_dict(torch.load(ours, weights_only=True)['message_hub'])
    assert fresh.get_scalar('train/loss').max() == 4.0


def test_the_message_hub_fix_is_gated_on_mmengine(monkeypatch):
    hub = MessageHub.get_instance('compat-test-gated')
    hub.update_scalar('train/loss', 1.0)
    state = hub.state_dict()
    monkeypatch.setattr(compat, 'MMENGINE_CHECKED', False)
    compat.leave_default_statistics_out(state)
    assert type(state['log_scalars']['train/loss']) is HistoryBuffer


class RunsCode:
    """An object whose unpickling runs code: it creates ``marker``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f'open({self.marker!r}, "w").close()', )


def test_a_checkpoint_that_runs_code_is_refused_and_never_executed(tmp_path):
    """torch >= 2.6, our paths (the initialisers' and tools' reader, the file the tools hand
    mmengine's Runner): refused naming the file and the opt-in; the payload does not run."""
    marker = str(tmp_path / 'payload_ran')
    path = str(tmp_path / 'evil.pth')
    torch.save({'state_dict': {'weight': torch.ones(1, 2), 'bias': torch.ones(1)},
                'payload': RunsCode(marker)}, path)
    message = r'evil\.pth holds references to builtins\.exec.*TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1'
    with pytest.raises(pickle.UnpicklingError, match=message):
        read_checkpoint(path)
    with pytest.raises(pickle.UnpicklingError, match=message):
        load_checkpoint_into(torch.nn.Linear(2, 1), path)
    with pytest.raises(pickle.UnpicklingError, match=message):
        resolve_checkpoint(path)
    assert not osp.exists(marker)


def test_unsafe_loading_is_an_explicit_opt_in(tmp_path, monkeypatch):
    # Stock mmengine pickles HistoryBuffer's statistics functions (builtins.getattr).
    path = str(tmp_path / 'stock.pth')
    torch.save({'state_dict': {'w': torch.ones(2)}, 'fn': HistoryBuffer.min}, path)
    with pytest.raises(pickle.UnpicklingError,
                       match='stock.pth holds references to builtins.getattr'):
        read_checkpoint(path)
    with pytest.raises(pickle.UnpicklingError, match='stock.pth'):
        resolve_checkpoint(path)
    monkeypatch.setenv(UNSAFE_LOAD_ENV, '1')
    assert resolve_checkpoint(path) == path
    with pytest.warns(UserWarning, match=UNSAFE_LOAD_ENV):
        loaded = read_checkpoint(path)
    assert torch.equal(loaded['state_dict']['w'], torch.ones(2))


def test_missing_local_checkpoint_names_the_file(tmp_path):
    missing = str(tmp_path / 'missing.pth')
    with pytest.raises(FileNotFoundError, match="checkpoint '.*missing.pth' does not exist"):
        read_checkpoint(missing)
    # mmengine's own loader is mmengine's
    with pytest.raises(FileNotFoundError, match='missing.pth can not be found'):
        CheckpointLoader.load_checkpoint(missing)


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


@pytest.fixture
def launch_calls(monkeypatch):
    """What a distributed launch calls, recorded instead of run (torchrun's environment)."""
    import mmengine.device
    import mmengine.utils.dl_utils
    import torch.multiprocessing
    calls = []
    monkeypatch.setattr(mmengine.device, 'get_device', lambda: 'cpu')
    monkeypatch.setattr(torch.cuda, 'set_device', lambda *a: calls.append('set_device'))
    monkeypatch.setattr(dist, 'init_process_group',
                        lambda backend, **kwargs: calls.append((backend, kwargs)))
    monkeypatch.setattr(mmengine.utils.dl_utils, 'set_multi_processing',
                        lambda **kwargs: calls.append(('set_multi_processing', kwargs)))
    monkeypatch.setattr(torch.multiprocessing, 'get_start_method', lambda allow_none=False: 'fork')
    monkeypatch.setenv('RANK', '0')
    monkeypatch.setenv('LOCAL_RANK', '0')
    return calls


def test_our_tools_start_a_launch_without_cuda_with_gloo(launch_calls):
    """mmengine 0.10.7 calls torch.cuda.set_device first and uses the config's nccl; the tools
    start the process group (gloo, the config's timeout) before the Runner, which then uses it.
    """
    env_cfg = dict(mp_cfg=dict(mp_start_method='fork'),
                   dist_cfg=dict(backend='nccl', timeout=600))
    compat.init_distributed('pytorch', env_cfg)
    assert launch_calls == [
        ('set_multi_processing', dict(mp_start_method='fork', distributed=True)),
        ('gloo', dict(timeout=datetime.timedelta(seconds=600)))]
    launch_calls.clear()
    compat.init_distributed('none', env_cfg)
    assert launch_calls == []


def test_mmengines_launch_is_its_own(launch_calls, monkeypatch):
    """Not through our tools (or on a newer mmengine), the launch is mmengine's: it sets a CUDA
    device first."""
    from mmengine.dist import utils as dist_utils
    dist_utils.init_dist('pytorch', backend='nccl')
    assert launch_calls == ['set_device', ('nccl', {})]
    launch_calls.clear()
    monkeypatch.setattr(compat, 'MMENGINE_CHECKED', False)
    compat.init_distributed('pytorch', dict(dist_cfg=dict(backend='nccl')))
    assert launch_calls[1:] == ['set_device', ('nccl', {})]


def test_a_collate_fn_of_a_package_base_is_built_on_our_path(mim_links, tmp_path):
    """mmengine stamps _scope_ on collate_fn of a 'pkg::' base and passes it to the function;
    tools/train.py drops it before the Runner builds the dataloader."""
    child = tmp_path / 'child.py'
    child.write_text("_base_ = 'dinomamba_mm::demo/dino_dinovim-demo_synthetic.py'\n")
    cfg = Config.fromfile(str(child))
    loader = dict(cfg.train_dataloader, batch_size=2, num_workers=0, persistent_workers=False,
                  dataset=[torch.zeros(2), torch.ones(2)],
                  sampler=dict(type='DefaultSampler', shuffle=False))
    assert loader['collate_fn'].get('_scope_') == 'dinomamba_mm'
    with pytest.raises(TypeError, match='_scope_'):  # mmengine's own behaviour
        next(iter(Runner.build_dataloader(copy.deepcopy(loader))))
    compat.unscope_dataloader_functions(dict(train_dataloader=loader))
    built = Runner.build_dataloader(loader, seed=0)
    assert torch.equal(next(iter(built)), torch.tensor([[0., 0.], [1., 1.]]))


def _mmcv_photometric_as_shipped():
    """mmcv's own photometric module, loaded afresh (the oracle for non-negative factors)."""
    import importlib.util

    import mmcv.image.photometric as installed
    spec = importlib.util.spec_from_file_location('mmcv_photometric_original',
                                                  installed.__file__)
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
    from PIL import Image

    def hue(img):
        if backend == 'pillow':
            rgb = Image.fromarray(np.ascontiguousarray(img[..., ::-1]))
            return np.asarray(rgb.convert('HSV'))[..., 0].astype(int)
        return cv2.cvtColor(img, cv2.COLOR_BGR2HSV_FULL)[..., 0].astype(int)

    img = _saturated_bgr()
    out = compat.adjust_hue(img, factor, backend=backend)
    assert np.median((hue(out) - hue(img)) % 256) == int(factor * 255) % 256
    if factor >= 0:  # where mmcv's own implementation works, results are identical
        shipped = _mmcv_photometric_as_shipped().adjust_hue(img, factor, backend=backend)
        assert np.array_equal(out, shipped)
    with pytest.raises(ValueError, match='hue_factor'):
        compat.adjust_hue(img, 0.7, backend=backend)


def test_dino_colour_jitter_runs_with_negative_hue():
    """DINOMultiCrop's colour jitter on numpy 2, while mmcv's adjust_hue stays mmcv's (which
    still fails there for negative factors)."""
    import mmcv

    from dinomamba_mm.datasets.transforms import DINOMultiCrop
    from dinomamba_mm.datasets.transforms.color_jitter import HueSafeColorJitter
    jitter = HueSafeColorJitter(hue=0.5)
    np.random.seed(0)
    hues = []
    for _ in range(8):  # half of the draws are negative
        hues.append(jitter._rand_params()[-1])
        jitter(dict(img=_saturated_bgr()))
    assert min(hues) < 0 < max(hues)
    crop = DINOMultiCrop(num_local_crops=1, global_crop_size=16, local_crop_size=8,
                         color_jitter=dict(hue=0.5), color_jitter_prob=1.0)
    for _ in range(4):
        crop(dict(img=_saturated_bgr(size=32)))
    if int(np.__version__.split('.')[0]) >= 2:
        with pytest.raises(OverflowError):
            mmcv.adjust_hue(_saturated_bgr(), -0.1)


def test_the_colour_jitter_draws_and_adjusts_as_mmpretrains():
    """HueSafeColorJitter reads mmpretrain 1.2.0's private ``ColorJitter._rand_params``
    (docs/faq.md, "Private APIs"): same draws, same images wherever mmpretrain's runs (a
    non-negative hue factor)."""
    from mmpretrain.datasets.transforms import ColorJitter

    from dinomamba_mm.datasets.transforms.color_jitter import HueSafeColorJitter
    args = dict(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1)
    compared = 0
    for seed in range(12):
        np.random.seed(seed)
        ours = HueSafeColorJitter(**args)(dict(img=_saturated_bgr(seed)))['img']
        np.random.seed(seed)
        try:
            theirs = ColorJitter(**args)(dict(img=_saturated_bgr(seed)))['img']
        except OverflowError:  # mmcv's adjust_hue on numpy 2 with a negative factor
            continue
        assert np.array_equal(ours, theirs), seed
        compared += 1
    assert compared >= 3


@pytest.mark.parametrize('mmcv_version,numpy_version,ours', [
    ('2.1.0', '2.2.0', True), ('2.3.0', '2.2.0', False), ('2.1.0', '1.26.4', False)])
def test_hue_fix_is_gated_on_the_versions_it_is_for(mmcv_version, numpy_version, ours,
                                                    monkeypatch):
    import mmcv
    calls = []
    monkeypatch.setattr(mmcv, 'adjust_hue', lambda *args, **kwargs: calls.append(args))
    monkeypatch.setattr(mmcv, '__version__', mmcv_version)
    monkeypatch.setattr(np, '__version__', numpy_version)
    compat.adjust_hue(_saturated_bgr(), 0.1, backend='cv2')
    assert (not calls) == ours
