"""The one loader of checkpoint weights into a module, and how it says that they do not fit.

mmengine loads ``load_from`` and ``Pretrained`` checkpoints non-strictly: keys that do not match
and tensors of the wrong shape are only logged, and the model goes on with random weights.
:func:`load_checkpoint_into` reads the file (:func:`read_checkpoint`), finds the module's weights
in it (:mod:`.backbone_weights`), checks their token layout (:mod:`.layout`) and that they are
finite, and loads them with :func:`load_state_dict_checked`; the Runner's hooks call the last
directly, on what the Runner read from the file :func:`resolve_checkpoint` gave it.
"""
import os
from collections import Counter, OrderedDict
from typing import Iterable, List, Mapping, NamedTuple, Optional, Union

import torch
from mmengine.logging import print_log
from mmengine.runner.checkpoint import CheckpointLoader
from torch import nn

from dinomamba_mm.finite_checks import non_finite_tensors
from .backbone_weights import ModuleWeights, check_tensors, find_backbone_weights
from .files import (CheckpointError, check_checkpoint_file, check_safe_to_unpickle, is_local_path,
                    load_local)
from .layout import check_layouts, hand_recorded_grids
from .model_zoo import HUGGINGFACE_PREFIXES, describe, fetch, load_from_huggingface

# Keys listed per kind in an error; the counts are always given in full.
_SHOWN_KEYS = 10


def read_checkpoint(filename: str, map_location='cpu'):
    """The checkpoint at ``filename``, read by our loaders: a local file checked first
    (:func:`.files.load_local`), a Hugging Face URL downloaded to its own cache name
    (:func:`.model_zoo.load_from_huggingface`); other URLs (``https://``, ``open-mmlab://``,
    ...) by mmengine's ``CheckpointLoader``.

    Args:
        filename (str): path or URL.
        map_location (str): as :func:`torch.load`'s. Defaults to 'cpu'.
    """
    if is_local_path(filename):
        return load_local(filename, map_location=map_location)
    if filename.startswith(HUGGINGFACE_PREFIXES):
        return load_from_huggingface(filename, map_location=map_location)
    return CheckpointLoader.load_checkpoint(filename, map_location=map_location)


def resolve_checkpoint(filename: str, what: str = 'checkpoint') -> str:
    """What to hand mmengine's Runner as ``load_from`` for ``filename``: a local file checked
    (:func:`.files.check_checkpoint_file`, :func:`.files.check_safe_to_unpickle`), a Hugging
    Face URL replaced by its checked download (:func:`.model_zoo.fetch`: rank 0 first, so call
    it after the process group started), another URL as it is.

    Args:
        filename (str): path or URL.
        what (str): how an error names the file, e.g. ``'--resume checkpoint'``.
    """
    if is_local_path(filename):
        check_checkpoint_file(filename, what)
        check_safe_to_unpickle(filename)
        return filename
    if filename.startswith(HUGGINGFACE_PREFIXES):
        return fetch(filename)
    return filename


class LoadReport(NamedTuple):
    """Keys of a load: the module's keys the state dict lacks, and the reverse."""
    missing: List[str]
    unexpected: List[str]


def prefix_hint(source_keys: Iterable[str], target_keys: Iterable[str]) -> Optional[str]:
    """A sentence naming the prefix that makes most keys of one side those of the other, e.g.
    the ``teacher.backbone.`` of a DINO checkpoint loaded into a bare backbone; None if none."""
    source, target = set(source_keys), set(target_keys)

    def best(longer: set, shorter: set) -> Optional[tuple]:
        """(prefixes tied for the most keys, written 'a' or 'b', that count)."""
        counts = Counter(key[:i + 1] for key in longer for i, char in enumerate(key)
                         if char == '.' and key[i + 1:] in shorter)
        if not counts:
            return None
        top = max(counts.values())
        return ' or '.join(repr(p) for p in sorted(p for p, c in counts.items() if c == top)), top

    in_source, in_target = best(source, target), best(target, source)
    if in_source and (not in_target or in_source[1] >= in_target[1]):
        return (f'the checkpoint holds {in_source[1]} of the {len(target)} expected keys under '
                f'the prefix {in_source[0]}')
    if in_target:
        return (f'the model expects {in_target[1]} of the checkpoint\'s {len(source)} keys '
                f'under the prefix {in_target[0]}')
    return None


def _listed(keys: List[str]) -> str:
    shown = ', '.join(keys[:_SHOWN_KEYS])
    return f'[{shown}{", ..." if len(keys) > _SHOWN_KEYS else ""}]'


def check_finite(state_dict: Mapping, source: str) -> None:
    """Raise a :class:`CheckpointError` naming the floating-point tensors of ``state_dict``
    that hold NaN or Inf (a diverged run, a corrupt save)."""
    floats = [(key, value) for key, value in state_dict.items()
              if torch.is_tensor(value) and value.is_floating_point()]
    bad = [floats[i][0] for i in non_finite_tensors([value for _, value in floats])]
    if bad:
        raise CheckpointError(
            f'{source}: {len(bad)} tensors hold NaN or Inf values: {_listed(bad)}; expected '
            'finite weights. Pass allow_non_finite=True (tools/test.py: --allow-non-finite) to '
            'load them anyway')


def _dtype_kind(tensor: torch.Tensor) -> str:
    if tensor.is_floating_point():
        return 'float'
    if tensor.is_complex():
        return 'complex'
    return 'bool' if tensor.dtype == torch.bool else 'int'


def _dtype_mismatches(state_dict: Mapping, expected: Mapping) -> List[str]:
    """Keys whose checkpoint tensor is of another kind (float, int, bool, complex) than the
    module's: ``load_state_dict`` would cast it silently (rounded, truncated or the imaginary
    part dropped). Float -> float casts (a float16 checkpoint) are torch's and stay allowed."""
    return [f'{key}: {str(value.dtype)[6:]} in the checkpoint, '
            f'{str(expected[key].dtype)[6:]} in the model' for key, value in state_dict.items()
            if key in expected and _dtype_kind(value) != _dtype_kind(expected[key])]


def load_state_dict_checked(module: nn.Module, state_dict: Mapping[str, torch.Tensor],
                            source: str, strict: bool, advice: str = '',
                            allow_non_finite: bool = False) -> LoadReport:
    """``module.load_state_dict`` (its pre-hooks run, e.g. DinoVim's position-embedding resize
    or LinearProbeClassifier's mapping of a released linear head) with the mismatches as one
    clear error. The keys are compared after the pre-hooks, as torch compares them.

    Args:
        module: the module to fill.
        state_dict: the tensors to load (not modified).
        source: how the error names the checkpoint, e.g. ``"checkpoint 'a.pth'"``.
        strict: also refuse missing and unexpected keys; otherwise only a state dict none of
            whose keys is the module's, and shape mismatches, are refused.
        advice: a sentence appended to the error (how to proceed or opt out).
        allow_non_finite: load tensors holding NaN or Inf (:func:`check_finite`).

    Returns:
        the missing and unexpected keys (empty when ``strict``).

    Raises:
        CheckpointError: listing the missing / unexpected keys (counts in full, the first
            ``_SHOWN_KEYS`` of each by name), the shape mismatches, and where the expected
            keys are when a prefix explains them (the module may then be partly loaded); or
            naming the non-finite tensors, before anything is loaded.
    """
    check_tensors(state_dict, source)
    if not allow_non_finite:
        check_finite(state_dict, source)
    expected_state = module.state_dict()
    expected = list(expected_state)
    other_kinds = _dtype_mismatches(state_dict, expected_state)
    if other_kinds:
        raise CheckpointError(
            f'{source} does not match {type(module).__name__}: {len(other_kinds)} tensors have '
            f'another kind of dtype: {"; ".join(other_kinds[:_SHOWN_KEYS])} (floating-point, '
            'integer, bool and complex tensors load only from their own kind)')
    to_load = OrderedDict(state_dict)  # pre-hooks may pop and add keys
    metadata = getattr(state_dict, '_metadata', None)
    if metadata is not None:
        to_load._metadata = metadata
    problems = []
    try:
        incompatible = module.load_state_dict(to_load, strict=False)
        # listed in the model's and the (pre-hooked) checkpoint's order, not torch's
        model_order = {key: i for i, key in enumerate(expected)}
        checkpoint_order = {key: i for i, key in enumerate(to_load)}
        missing = sorted(incompatible.missing_keys, key=model_order.__getitem__)
        unexpected = sorted(incompatible.unexpected_keys, key=checkpoint_order.__getitem__)
    except RuntimeError:
        # shapes compared here, after the pre-hooks have rewritten ``to_load``, rather than read
        # from torch's error text
        shapes = {key: tuple(value.shape) for key, value in module.state_dict().items()}
        mismatched = [f'size mismatch for {key}: {tuple(value.shape)} in the checkpoint, '
                      f'{shapes[key]} in the model' for key, value in to_load.items()
                      if key in shapes and hasattr(value, 'shape')
                      and tuple(value.shape) != shapes[key]]
        if not mismatched:
            raise
        problems.append(f'{len(mismatched)} tensors have another shape: '
                        + '; '.join(mismatched[:_SHOWN_KEYS]))
        missing = [k for k in expected if k not in state_dict]
        unexpected = []
    if not problems:
        if len(missing) == len(expected) and expected:
            problems.append(f'none of the {len(expected)} keys of {type(module).__name__} is '
                            f'in it (it has {len(state_dict)} keys, e.g. '
                            f'{_listed(list(state_dict))})')
        elif strict and (missing or unexpected):
            if missing:
                problems.append(f'{len(missing)} keys of the model are missing: '
                                f'{_listed(missing)}')
            if unexpected:
                problems.append(f'{len(unexpected)} keys are not in the model: '
                                f'{_listed(unexpected)}')
        else:
            return LoadReport(missing, unexpected)
    hint = prefix_hint(state_dict, expected) if missing else None
    raise CheckpointError(f'{source} does not match {type(module).__name__}: '
                          + '; '.join(problems) + (f'. Hint: {hint}' if hint else '')
                          + (f'. {advice}' if advice else ''))


def _path_or_checkpoint(checkpoint) -> Union[str, Mapping]:
    """A path (``os.PathLike`` as str) or URL, or a loaded checkpoint; anything else refused."""
    if isinstance(checkpoint, os.PathLike):
        return os.fspath(checkpoint)
    if not isinstance(checkpoint, (str, Mapping)):
        raise TypeError('checkpoint must be a path or URL (str or os.PathLike) or a loaded '
                        f'checkpoint (a dict), got {checkpoint!r}')
    return checkpoint


def _name(checkpoint: Union[str, Mapping], filename: Optional[str]) -> str:
    """'checkpoint PATH', or 'checkpoint URL (cached as PATH)' for a model-zoo file."""
    filename = checkpoint if isinstance(checkpoint, str) else filename
    return 'checkpoint' + (f' {describe(filename)}' if filename else '')


def find_checked(module: nn.Module, checkpoint: Union[str, Mapping],
                 prefix: Optional[str] = 'auto', network: str = 'teacher',
                 allow_non_finite: bool = False, map_location: str = 'cpu',
                 filename: Optional[str] = None) -> ModuleWeights:
    """The weights of ``module`` in ``checkpoint``, checked: the file (:mod:`.files`), the token
    layout of each module with one (:mod:`.layout`), finiteness (:func:`check_finite`).

    Args:
        module: the module the weights are for.
        checkpoint: path or URL (:func:`read_checkpoint`), or a loaded checkpoint (then
            ``filename`` names it in errors).
        prefix, network: see :func:`.backbone_weights.find_backbone_weights`.
        allow_non_finite: accept tensors holding NaN or Inf.
        map_location: as :func:`torch.load`'s.
    """
    checkpoint = _path_or_checkpoint(checkpoint)
    name = _name(checkpoint, filename)
    if isinstance(checkpoint, str):
        checkpoint = read_checkpoint(checkpoint, map_location=map_location)
    weights = find_backbone_weights(checkpoint, name, prefix, network)
    check_layouts(module, weights.layouts, weights.module_path, weights.state_dict, name)
    hand_recorded_grids(module, weights.state_dict, weights.layouts, weights.module_path)
    if not allow_non_finite:
        check_finite(weights.state_dict, name)
    return weights


def load_checkpoint_into(module: nn.Module, checkpoint: Union[str, Mapping],
                         prefix: Optional[str] = 'auto', network: str = 'teacher',
                         strict: bool = True, allow_non_finite: bool = False,
                         map_location: str = 'cpu', advice: str = '',
                         filename: Optional[str] = None) -> ModuleWeights:
    """Load the weights of ``module`` from ``checkpoint`` (:func:`find_checked`) with
    :func:`load_state_dict_checked`; ``strict=False`` logs missing and unexpected keys.

    Returns:
        the weights loaded, and where they were found.
    """
    checkpoint = _path_or_checkpoint(checkpoint)
    weights = find_checked(module, checkpoint, prefix, network, allow_non_finite, map_location,
                           filename)
    name = _name(checkpoint, filename)
    if weights.module_path:
        name += f' ({weights.module_path})'
    report = load_state_dict_checked(module, weights.state_dict, name, strict, advice,
                                     allow_non_finite=True)  # checked by find_checked
    if report.missing or report.unexpected:
        print_log(f'{name} in {type(module).__name__}: missing keys {report.missing}, '
                  f'unexpected keys {report.unexpected}', logger='current', level=30)
    return weights
