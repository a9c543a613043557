"""Shims that let the 2023-era OpenMMLab stack run on a modern torch.

Applied once, on ``import dinomamba_mm`` (which ``custom_imports`` does before anything is built):

1. torch >= 2.6 loads checkpoints with ``weights_only=True``. mmengine 0.10.7 checkpoints hold a
   MessageHub (``HistoryBuffer`` objects with numpy arrays and scalars), and the paper's DINO
   checkpoints hold an ``argparse.Namespace``; both fail to load. We allow-list exactly those
   globals instead of disabling the safe unpickler.
2. ``HistoryBuffer.__getstate__`` pickles its statistics functions, which the safe unpickler can only
   rebuild through ``builtins.getattr`` (not safe to allow). The default functions are re-registered
   on unpickling anyway, so new checkpoints leave them out.
3. Checkpoints written by runs that did not import this package still carry those functions. For
   local files only (the user's own runs), the loader falls back to ``weights_only=False`` with a
   warning naming the file; downloaded files never fall back.
4. mmcv 2.1's ``adjust_hue`` computes ``np.uint8(hue_factor * 255)``, which numpy >= 2 refuses
   (OverflowError) for every negative factor, so mmpretrain's ``ColorJitter`` fails on half of the
   images. The replacement shifts the hue channel by the same amount modulo 256 (the uint8
   wrap-around numpy 1 performed).
5. Distributed training on CPU-only machines (``tools/dist_train.sh`` with gloo): mmengine calls
   ``torch.cuda.set_device`` and wraps models in DDP with ``device_ids=[LOCAL_RANK]``; both fail
   without a GPU. Without CUDA we initialise the process group with gloo and give DDP no device ids.
6. ``_base_ = 'pkg::path'`` inheritance only knows the packages in mmengine's hard-coded
   ``MODULE2PACKAGE``; we add ours. It takes effect in processes that imported dinomamba_mm before
   parsing the config (our tools do; a stock tool parses ``_base_`` before ``custom_imports``).
   mmengine then looks for the package next to its distribution's metadata, which an editable
   install (``pip install -e .``, what ``make env`` does) keeps in site-packages, away from the
   checkout: for dinomamba_mm the package's own directory is used.
"""
import argparse
import os.path as osp
import pickle
import warnings

import cv2
import mmcv
import numpy as np
import torch
import torch.distributed as torch_dist
from mmcv.image import photometric
from mmengine.config import config as config_module
from mmengine.config import utils as config_utils
from mmengine.dist import utils as dist_utils
from mmengine.logging.history_buffer import HistoryBuffer
from mmengine.model.wrappers import distributed as ddp_wrappers
from mmengine.runner.checkpoint import CheckpointLoader
from PIL import Image

_DEFAULT_STATISTICS = ('min', 'max', 'current', 'mean')


def _numpy_safe_globals() -> list:
    """The numpy objects an ndarray or a numpy scalar needs to be unpickled."""
    try:
        from numpy._core.multiarray import _reconstruct, scalar
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct, scalar
    dtype_classes = [type(np.dtype(code)) for code in '?bBhHiIlLqQefdgFDGSUV']
    return [np.ndarray, np.dtype, _reconstruct, scalar, *dtype_classes]


def _history_buffer_getstate(self: HistoryBuffer) -> dict:
    state = dict(self.__dict__)
    state.pop('statistics_methods', None)
    custom = {name: fn for name, fn in self._statistics_methods.items()
              if name not in _DEFAULT_STATISTICS}
    if custom:
        state['statistics_methods'] = custom
    return state


def _is_safe_unpickling_error(error: Exception) -> bool:
    return isinstance(error, pickle.UnpicklingError) and \
        'Weights only load failed' in str(error)


@CheckpointLoader.register_scheme(prefixes='', force=True)
def load_from_local(filename: str, map_location=None) -> dict:
    """mmengine's local-file loader, safe unpickler first, then trusted fallback.

    Args:
        filename (str): Local checkpoint path.
        map_location: Same as :func:`torch.load`.
    """
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'checkpoint file {filename!r} does not exist')
    try:
        return torch.load(filename, map_location=map_location, weights_only=True)
    except Exception as error:  # noqa: BLE001 (re-raised unless it is the safe-unpickler refusal)
        if not _is_safe_unpickling_error(error):
            raise
        refused = [line.strip() for line in str(error).splitlines()
                   if 'Unsupported global' in line] or ['unsupported object']
        warnings.warn(
            f'{filename} holds Python objects that the safe unpickler refuses '
            f'({refused[0]}); loading it with '
            'weights_only=False because it is a local file. Only load '
            'checkpoints you trust.')
        return torch.load(filename, map_location=map_location, weights_only=False)


def adjust_hue(img: np.ndarray, hue_factor: float, backend=None) -> np.ndarray:
    """``mmcv.adjust_hue`` (same arguments and checks) that also works on numpy >= 2.

    Args:
        img (ndarray): (H, W, 3) BGR image; uint8 for the pillow backend.
        hue_factor (float): hue shift in turns, in [-0.5, 0.5].
        backend (str, optional): 'cv2' or 'pillow'; None uses mmcv's image backend.
    """
    backend = backend or photometric.imread_backend
    if backend not in ('cv2', 'pillow'):
        raise ValueError(f"backend: {backend} is not supported. Supported backends are "
                         "'cv2', 'pillow'")
    if not -0.5 <= hue_factor <= 0.5:
        raise ValueError(f'hue_factor:{hue_factor} is not in [-0.5, 0.5].')
    if not (isinstance(img, np.ndarray) and img.ndim in (2, 3)):
        raise TypeError('img should be ndarray with dim=[2 or 3].')
    shift = int(hue_factor * 255) % 256

    if backend == 'pillow':
        if img.dtype != np.uint8:
            raise ValueError(f'the pillow backend needs a uint8 image, got {img.dtype}')
        h, s, v = Image.fromarray(np.ascontiguousarray(img[..., ::-1]), mode='RGB') \
            .convert('HSV').split()
        h = Image.fromarray(((np.asarray(h, dtype=np.uint16) + shift) % 256)
                            .astype(np.uint8), 'L')
        rgb = Image.merge('HSV', (h, s, v)).convert('RGB')
        return np.array(rgb, dtype=img.dtype)[..., ::-1]
    dtype = img.dtype
    h, s, v = cv2.split(cv2.cvtColor(img.astype(np.uint8), cv2.COLOR_BGR2HSV_FULL))
    h = ((h.astype(np.uint16) + shift) % 256).astype(np.uint8)
    return cv2.cvtColor(cv2.merge([h, s, v]), cv2.COLOR_HSV2BGR_FULL).astype(dtype)


_mmengine_init_dist_pytorch = dist_utils._init_dist_pytorch
_mmengine_ddp_init = ddp_wrappers.MMDistributedDataParallel.__init__
_mmengine_get_installed_path = config_module.get_installed_path


def _init_dist_pytorch(backend: str = 'nccl', init_backend: str = 'torch',
                       **kwargs) -> None:
    if torch.cuda.is_available() or init_backend != 'torch':
        _mmengine_init_dist_pytorch(backend, init_backend=init_backend, **kwargs)
        return
    # torchrun sets RANK / WORLD_SIZE / MASTER_ADDR; nccl needs a GPU, gloo does not.
    torch_dist.init_process_group(backend='gloo', **kwargs)


def _ddp_init(self, module, detect_anomalous_params: bool = False, **kwargs):
    if not any(p.is_cuda for p in module.parameters()):
        kwargs['device_ids'] = None
        kwargs.pop('output_device', None)
    _mmengine_ddp_init(self, module,
                       detect_anomalous_params=detect_anomalous_params, **kwargs)


def _get_installed_path(package: str) -> str:
    # mmengine locates 'pkg::' configs at <distribution location>/<package>; an editable
    # install (PEP 660) has its distribution in site-packages and the package in the checkout.
    if package == 'dinomamba_mm':
        return osp.dirname(osp.abspath(__file__))
    return _mmengine_get_installed_path(package)


def apply() -> None:
    """Install the shims (idempotent)."""
    torch.serialization.add_safe_globals(
        [HistoryBuffer, argparse.Namespace, *_numpy_safe_globals()])
    HistoryBuffer.__getstate__ = _history_buffer_getstate
    photometric.adjust_hue = mmcv.image.adjust_hue = mmcv.adjust_hue = adjust_hue
    dist_utils._init_dist_pytorch = _init_dist_pytorch
    ddp_wrappers.MMDistributedDataParallel.__init__ = _ddp_init
    config_utils.MODULE2PACKAGE.setdefault('dinomamba_mm', 'dinomamba_mm')
    config_module.get_installed_path = _get_installed_path


apply()
