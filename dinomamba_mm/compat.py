"""Fixes for the 2023-era OpenMMLab stack on a modern torch / numpy, each gated on the versions
it is for. docs/faq.md ("Compatibility fixes") lists each one with its reason and its test.

Also :func:`check_mmcv`, run first on import: mmcv is not an install requirement (its wheel must
match torch and CUDA), so a missing one is an error naming the command that installs it.

Applied by :func:`apply_on_import` on ``import dinomamba_mm`` (what ``custom_imports`` runs),
because mmengine reaches them before any of our code runs (checkpoint loading in the Runner,
process-group set-up, ``_base_`` parsing):

- :func:`allow_mmengine_checkpoint_globals` (torch >= 2.6),
- :func:`leave_default_statistics_out_of_checkpoints` (torch >= 2.6, mmengine <= 0.10.7),
- :func:`init_dist_without_cuda` (mmengine <= 0.10.7),
- :func:`resolve_dinomamba_configs` (mmengine <= 0.10.7),
- :func:`unscope_dataloader_functions` (mmengine <= 0.10.7).

Applied where needed: :func:`fix_adjust_hue` (mmcv <= 2.2.0 with numpy >= 2) by the module of
``DINOMultiCrop``, the transform whose colour jitter needs it.

Unsafe checkpoint loading is never a fallback: a checkpoint holding objects the safe unpickler
refuses is an error that names the opt-in, torch's own ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``
(:func:`dinomamba_mm.checkpoints.files.load_local`).
"""
import argparse
import copy
import glob
import importlib.metadata
import importlib.util
import os.path as osp
import warnings

import numpy as np
import torch
import torch.distributed as torch_dist
from mmengine import __version__ as MMENGINE_VERSION
from mmengine.config import config as config_module
from mmengine.config import utils as config_utils
from mmengine.dist import utils as dist_utils
from mmengine.logging.history_buffer import HistoryBuffer
from mmengine.runner import Runner
from mmengine.utils import digit_version

_DEFAULT_STATISTICS = ('min', 'max', 'current', 'mean')

#: torch.load defaults to the safe unpickler (weights_only=True) from torch 2.6.
TORCH_LOADS_WEIGHTS_ONLY = digit_version(torch.__version__) >= digit_version('2.6.0')
#: the last mmengine release checked: 0.10.7 (the mmengine fixes below are for <= 0.10.7).
MMENGINE_CHECKED = digit_version(MMENGINE_VERSION) <= digit_version('0.10.7')


#: mmpretrain 1.2.0 / mmseg 1.2.2 / mmdet 3.3.0 all accept these mmcv versions.
MMCV_MIN, MMCV_MAX = '2.0.0', '2.2.0'
MMCV_INSTALL = (f'pip install -U openmim && mim install "mmcv>={MMCV_MIN},<{MMCV_MAX}"` '
                '(OpenMMLab\'s wheel for your torch and CUDA, built from source when there is '
                'none), or in a source checkout `bash tools/setup_env.sh` (it builds mmcv 2.1.0 '
                'for torch > 2.1 and caches the wheel); README, section Install')


def check_mmcv() -> None:
    """Raise ImportError naming the install command unless mmcv with compiled ops is installed.

    Reads the installed metadata and files only (no ``import mmcv``), so that ``import
    dinomamba_mm`` stays light.
    """
    try:
        version = importlib.metadata.version('mmcv')
    except importlib.metadata.PackageNotFoundError:
        version = None
    spec = importlib.util.find_spec('mmcv')
    if version is None or spec is None:
        problem = 'mmcv is not installed (mmcv-lite has no compiled ops and does not count)'
    elif not digit_version(MMCV_MIN) <= digit_version(version) < digit_version(MMCV_MAX):
        problem = (f'mmcv {version} is installed; mmpretrain, mmseg and mmdet need '
                   f'{MMCV_MIN} <= mmcv < {MMCV_MAX}')
    elif not any(glob.glob(osp.join(folder, '_ext*'))
                 for folder in spec.submodule_search_locations or ()):
        problem = f'mmcv {version} has no compiled ops (mmcv._ext)'
    else:
        return
    raise ImportError(f'dinomamba_mm: {problem}. Install it with `{MMCV_INSTALL}.')


def _numpy_safe_globals() -> list:
    """The numpy objects an ndarray or a numpy scalar needs to be unpickled."""
    try:
        from numpy._core.multiarray import _reconstruct, scalar
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct, scalar
    dtype_classes = [type(np.dtype(code)) for code in '?bBhHiIlLqQefdgFDGSUV']
    return [np.ndarray, np.dtype, _reconstruct, scalar, *dtype_classes]


def allow_mmengine_checkpoint_globals() -> None:
    """Let torch's safe unpickler rebuild what mmengine and the paper put in checkpoints.

    mmengine 0.10.7 checkpoints hold a MessageHub (``HistoryBuffer`` objects with numpy arrays and
    scalars), the paper's DINO checkpoints an ``argparse.Namespace``; torch >= 2.6 refuses both
    unless allow-listed (``torch.serialization.add_safe_globals``, torch's own mechanism).
    """
    torch.serialization.add_safe_globals(
        [HistoryBuffer, argparse.Namespace, *_numpy_safe_globals()])


def _history_buffer_getstate(self: HistoryBuffer) -> dict:
    state = dict(self.__dict__)
    state.pop('statistics_methods', None)
    custom = {name: fn for name, fn in self._statistics_methods.items()
              if name not in _DEFAULT_STATISTICS}
    if custom:
        state['statistics_methods'] = custom
    return state


def leave_default_statistics_out_of_checkpoints() -> None:
    """Pickle ``HistoryBuffer`` without its default statistics functions.

    mmengine 0.10.7 pickles them as ``builtins.getattr`` references, which the safe unpickler can
    never allow, so a checkpoint could not be resumed. ``HistoryBuffer.__setstate__`` registers
    the defaults again, so nothing is lost.
    """
    HistoryBuffer.__getstate__ = _history_buffer_getstate


_mmengine_init_dist_pytorch = dist_utils._init_dist_pytorch


def _init_dist_pytorch(backend: str = 'nccl', init_backend: str = 'torch',
                       **kwargs) -> None:
    if torch.cuda.is_available() or init_backend != 'torch':
        _mmengine_init_dist_pytorch(backend, init_backend=init_backend, **kwargs)
        return
    # torchrun sets RANK / WORLD_SIZE / MASTER_ADDR; nccl needs a GPU, gloo does not.
    torch_dist.init_process_group(backend='gloo', **kwargs)


def init_dist_without_cuda() -> None:
    """Let ``launcher='pytorch'`` (``tools/dist_train.sh``) start on machines without CUDA.

    mmengine 0.10.7 calls ``torch.cuda.set_device(LOCAL_RANK)`` unconditionally and uses the
    config's backend (nccl); without CUDA we initialise the process group with gloo instead.
    (DDP's ``device_ids`` are the configs' ``model_wrapper_cfg``, not a patch.)
    """
    dist_utils._init_dist_pytorch = _init_dist_pytorch


_mmengine_get_installed_path = config_module.get_installed_path


def _get_installed_path(package: str) -> str:
    # mmengine locates 'pkg::' configs at <distribution location>/<package>; an editable
    # install (PEP 660) has its distribution in site-packages and the package in the checkout.
    if package == 'dinomamba_mm':
        return osp.dirname(osp.abspath(__file__))
    return _mmengine_get_installed_path(package)


def resolve_dinomamba_configs() -> None:
    """Let ``_base_ = 'dinomamba_mm::...'`` find this package's configs.

    mmengine 0.10.7 only knows the packages of its hard-coded ``MODULE2PACKAGE``, and looks for
    a package next to its distribution's metadata, which an editable install keeps in
    site-packages, away from the checkout. Takes effect in processes that import dinomamba_mm
    before parsing the config (mmengine parses ``_base_`` before ``custom_imports``).
    """
    config_utils.MODULE2PACKAGE.setdefault('dinomamba_mm', 'dinomamba_mm')
    config_module.get_installed_path = _get_installed_path


_mmengine_build_dataloader = Runner.build_dataloader
_DATALOADER_FUNCTIONS = ('collate_fn', 'worker_init_fn')


def _build_dataloader(dataloader, seed=None, diff_rank_seed: bool = False):
    if isinstance(dataloader, dict) and any(
            isinstance(dataloader.get(key), dict) and '_scope_' in dataloader[key]
            for key in _DATALOADER_FUNCTIONS):
        dataloader = copy.copy(dataloader)
        for key in _DATALOADER_FUNCTIONS:
            if isinstance(dataloader.get(key), dict):
                dataloader[key] = {k: v for k, v in dataloader[key].items() if k != '_scope_'}
    return _mmengine_build_dataloader(dataloader, seed=seed, diff_rank_seed=diff_rank_seed)


def unscope_dataloader_functions() -> None:
    """Let a dataloader's ``collate_fn`` / ``worker_init_fn`` come from a ``pkg::`` base.

    mmengine stamps ``_scope_`` on every dict with a ``type`` of a ``_base_ = 'pkg::...'``
    config; ``Runner.build_dataloader`` (mmengine 0.10.7) looks these two functions up itself
    and passes every other key as an argument, so ``default_collate`` fails with "unexpected
    keyword argument '_scope_'" (open-mmlab/mmyolo#886). The scope is dropped first: the
    functions are looked up as before (explicitly scoped names like
    ``dinomamba_mm.seed_worker_from_loader`` keep their prefix).
    """
    Runner.build_dataloader = staticmethod(_build_dataloader)


def _adjust_hue(img: np.ndarray, hue_factor: float, backend=None) -> np.ndarray:
    """``mmcv.adjust_hue`` (same arguments and checks) that also works on numpy >= 2.

    Args:
        img (ndarray): (H, W, 3) BGR image; uint8 for the pillow backend.
        hue_factor (float): hue shift in turns, in [-0.5, 0.5].
        backend (str, optional): 'cv2' or 'pillow'; None uses mmcv's image backend.
    """
    import cv2
    from mmcv.image import photometric
    from PIL import Image

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


def fix_adjust_hue() -> None:
    """Make ``mmcv.adjust_hue`` (mmpretrain's ``ColorJitter``) work for negative factors.

    mmcv <= 2.2.0 computes ``np.uint8(hue_factor * 255)``, which numpy >= 2 refuses
    (OverflowError) for every negative factor, so half of the colour-jittered images fail. The
    replacement shifts the hue channel by the same amount modulo 256 (numpy 1's uint8
    wrap-around). A no-op on other versions.
    """
    import mmcv
    from mmcv.image import photometric

    if digit_version(np.__version__) < digit_version('2.0.0') or \
            digit_version(mmcv.__version__) > digit_version('2.2.0'):
        return
    photometric.adjust_hue = mmcv.image.adjust_hue = mmcv.adjust_hue = _adjust_hue


def apply_on_import() -> None:
    """The fixes mmengine needs before our code runs (idempotent; see the module docstring)."""
    check_mmcv()
    # mmengine's `pkg::` bases import pkg_resources, which setuptools < 81 (required) keeps
    warnings.filterwarnings('ignore', 'pkg_resources is deprecated', UserWarning)
    if TORCH_LOADS_WEIGHTS_ONLY:
        allow_mmengine_checkpoint_globals()
        if MMENGINE_CHECKED:
            leave_default_statistics_out_of_checkpoints()
    if MMENGINE_CHECKED:
        init_dist_without_cuda()
        resolve_dinomamba_configs()
        unscope_dataloader_functions()
