"""Argument and input checks shared by the backbones (DinoVim, LinearViT): one wording for all."""
import warnings
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from dinomamba_mm.argument_checks import (check_argument, check_choice, check_int,
                                          check_number, is_int)
from ..layers.pos_embed import INTERPOLATE_MODES


def check_arch_fields(arch: Mapping, fields: Sequence[str]) -> None:
    """Each of ``fields`` present in an ``arch`` dict is an int >= 1, named ``arch['field']``."""
    for field in fields:
        if field in arch:
            check_int(f"arch['{field}']", arch[field], 1)


def check_backbone_args(img_size: Union[int, Sequence[int]], patch_size: Any, in_channels: Any,
                        drop_rate: Any, drop_path_rate: Any, num_layers: Optional[int],
                        frozen_stages: Any, interpolate_mode: Any,
                        interpolate_modes: Sequence[str] = INTERPOLATE_MODES) -> None:
    """Check the arguments every backbone shares.

    Args:
        img_size: an int or an (h, w) pair of ints, each >= ``patch_size``.
        patch_size: an int >= 1.
        in_channels: an int >= 1.
        drop_rate, drop_path_rate: numbers in [0, 1) (1 would drop everything: NaN in training).
        num_layers: the backbone's depth (already checked; None: not known yet).
        frozen_stages: an int in [-1, num_layers] (more would freeze nothing more).
        interpolate_mode: one of ``interpolate_modes``.
        interpolate_modes: the modes the backbone's position-embedding resize takes
            (:data:`INTERPOLATE_MODES` by default).

    Raises:
        TypeError / ValueError naming the argument, what was expected and the value given.
    """
    check_int('frozen_stages', frozen_stages, -1, num_layers)
    check_choice('interpolate_mode', interpolate_mode, interpolate_modes)
    check_int('patch_size', patch_size, 1)
    check_int('in_channels', in_channels, 1)
    check_number('drop_rate', drop_rate, 0, 1, exclusive_maximum=True)
    check_number('drop_path_rate', drop_path_rate, 0, 1, exclusive_maximum=True)
    check_argument('img_size', img_size, f'an int or an (h, w) pair of ints >= patch_size '
                   f'{patch_size}',
                   lambda v: is_int(v) or (isinstance(v, (tuple, list)) and len(v) == 2
                                           and all(is_int(s) for s in v)),
                   lambda v: all(s >= patch_size for s in _pair(v)))


def init_cfg_from_pretrained(backbone: str, pretrained: Optional[str],
                             init_cfg: Optional[Union[dict, List[dict]]]
                             ) -> Optional[Union[dict, List[dict]]]:
    """``init_cfg`` of a backbone given the deprecated ``pretrained`` argument, as mmseg reads it.

    mmseg's ``EncoderDecoder`` hands its own ``pretrained`` to the backbone, and stock bases set
    it (``mmseg::_base_/models/upernet_vit-b16_ln_mln.py``: the ViT weights); mmseg's backbones
    take a path or URL as ``init_cfg=dict(type='Pretrained', checkpoint=pretrained)`` with a
    deprecation warning, and so do ours.

    Args:
        backbone (str): the backbone's class name, for the messages.
        pretrained (str, optional): checkpoint path or URL; None: ``init_cfg`` as given.
        init_cfg (dict | list[dict], optional): the backbone's ``init_cfg`` argument.

    Returns:
        dict | list[dict] | None: ``init_cfg``, or the ``Pretrained`` entry ``pretrained``
        stands for.

    Raises:
        TypeError: ``pretrained`` is neither a str nor None.
        ValueError: both ``pretrained`` and ``init_cfg`` are given.
    """
    if pretrained is None:
        return init_cfg
    check_argument(f'{backbone} pretrained', pretrained, 'a checkpoint path or URL (str) or None',
                   lambda value: isinstance(value, str))
    if init_cfg:
        raise ValueError(
            f'{backbone}: pretrained={pretrained!r} and init_cfg={init_cfg!r} both set the '
            'initialisation; give one of them. mmseg\'s EncoderDecoder passes its own '
            'model.pretrained to the backbone: set model.pretrained=None to keep the init_cfg')
    warnings.warn(f'{backbone}: pretrained is deprecated, as in mmseg\'s backbones: '
                  f'pretrained={pretrained!r} is read as init_cfg=dict(type=\'Pretrained\', '
                  f'checkpoint={pretrained!r})', FutureWarning, stacklevel=3)
    return dict(type='Pretrained', checkpoint=pretrained)


def check_image_input(inputs: Any, in_channels: int, patch_size: int,
                      pad_to_patch: bool, weight_dtype: torch.dtype) -> None:
    """Check a batch of images (B, C, H, W) before the patch embedding.

    Raises:
        TypeError: not a tensor, or of another dtype than the weights ``weight_dtype`` outside
            autocast (the convolution failed naming the bias' type).
        ValueError: not 4-D, ``C != in_channels``, or H / W not a multiple of ``patch_size``
            while ``pad_to_patch`` is False.
    """
    if not isinstance(inputs, torch.Tensor):
        raise TypeError(f'input must be a torch.Tensor (B, C, H, W), got {type(inputs).__name__}')
    device = inputs.device.type
    autocast = device in ('cpu', 'cuda') and torch.is_autocast_enabled(device)
    if inputs.dtype != weight_dtype and not (autocast and inputs.is_floating_point()):
        advice = (f'cast the input (inputs.to({weight_dtype})) or the model (model.to('
                  f'{inputs.dtype}))' if inputs.is_floating_point() else
                  'give it as floating-point, normalised images (the data preprocessor does)')
        raise TypeError(f'input has dtype {inputs.dtype} (shape {tuple(inputs.shape)}), the '
                        f"backbone's weights {weight_dtype}: {advice}")
    if inputs.dim() != 4:
        raise ValueError(f'input must be (B, C, H, W), got shape {tuple(inputs.shape)}')
    if inputs.shape[1] != in_channels:
        raise ValueError(f'input has {inputs.shape[1]} channels (shape {tuple(inputs.shape)}), '
                         f'the backbone expects in_channels={in_channels}')
    height, width = inputs.shape[-2:]
    if (height % patch_size or width % patch_size) and not pad_to_patch:
        raise ValueError(f'input size {height}x{width} (shape {tuple(inputs.shape)}) is not a '
                         f'multiple of the patch size {patch_size}; resize it or set '
                         'pad_to_patch=True')


def available_memory(device: torch.device) -> Optional[int]:
    """Bytes a new tensor can still take on ``device``: free GPU memory plus what PyTorch's
    cache holds unused; on the CPU, Linux's MemAvailable. None where it cannot be told."""
    if device.type == 'cuda':
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    if device.type != 'cpu':
        return None
    try:
        with open('/proc/meminfo') as meminfo:
            line = next(line for line in meminfo if line.startswith('MemAvailable:'))
    except (OSError, StopIteration):
        return None
    return int(line.split()[1]) * 1024


def check_parameter_memory(name: str, arch: Mapping, num_params: int) -> None:
    """MemoryError before a backbone allocates parameters the default device cannot hold.

    Args:
        name: the backbone's class name.
        arch: its arch settings, for the message.
        num_params: a lower bound of its parameter count (what is sure to be allocated).
    """
    device = torch.get_default_device()
    needed = num_params * torch.empty((), dtype=torch.get_default_dtype()).element_size()
    available = available_memory(device) if needed >= 2**30 else None
    if available is None or needed <= available:
        return
    raise MemoryError(f'{name}: its parameters need at least {needed / 2**30:.1f} GiB '
                      f'({num_params / 1e9:.1f} G values for arch {dict(arch)}), '
                      f'{available / 2**30:.1f} GiB is available on {device}: build a smaller '
                      'arch')


def _pair(size: Union[int, Sequence[int]]) -> Tuple[int, int]:
    return (size, size) if is_int(size) else tuple(size)
