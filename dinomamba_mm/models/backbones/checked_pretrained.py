"""mmengine's ``Pretrained`` initializer, refusing a checkpoint that fits nothing."""
import copy
from typing import List, Optional, Union

from mmengine.logging import print_log
from mmengine.model.weight_init import PretrainedInit, update_init_info
from mmengine.runner.checkpoint import _load_checkpoint
from torch import nn

from dinomamba_mm.checkpoints import (check_checkpoint_file, load_state_dict_checked,
                                      strip_module_prefix)
from dinomamba_mm.registry import SCOPE, WEIGHT_INITIALIZERS

InitCfg = Optional[Union[dict, List[dict]]]


@WEIGHT_INITIALIZERS.register_module(name='Pretrained')
class CheckedPretrainedInit(PretrainedInit):
    """``init_cfg=dict(type='Pretrained', checkpoint=..., prefix=...)`` with clear errors.

    Loads as mmengine's ``Pretrained`` does (the ``prefix`` part of the checkpoint's
    ``state_dict``, else the whole of it without a leading ``module.``; non-strict: missing and
    unexpected keys are logged), but refuses, with a ``ValueError`` naming the checkpoint:

    - a file that is missing, empty, truncated or not a checkpoint;
    - a checkpoint none of whose keys is the module's, or without any ``prefix`` key (mmengine
      loads 0 of 35 tensors and logs a line; the hint names the prefix that would fit, e.g.
      ``teacher.backbone.``);
    - tensors of another shape (mmengine logs them and leaves them random).

    It is registered as ``Pretrained`` in the ``dinomamba_mm`` scope; DinoVim and LinearViT
    route their ``Pretrained`` init_cfg here (:func:`checked_pretrained_cfg`), so configs keep
    ``type='Pretrained'``.
    """

    def __call__(self, module: nn.Module) -> None:
        check_checkpoint_file(self.checkpoint)
        checkpoint = _load_checkpoint(self.checkpoint, map_location=self.map_location)
        state_dict = checkpoint.get('state_dict', checkpoint)
        source = f'checkpoint {self.checkpoint!r}'
        if self.prefix is None:
            print_log(f'load model from: {self.checkpoint}', logger='current')
            state_dict = strip_module_prefix(state_dict)
        else:
            prefix = self.prefix if self.prefix.endswith('.') else self.prefix + '.'
            print_log(f'load {prefix} in model from: {self.checkpoint}', logger='current')
            selected = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
            if not selected:
                heads = sorted({k.split('.')[0] + '.' for k in state_dict})
                raise ValueError(f'{source} has no key starting with the init_cfg prefix '
                                 f'{prefix!r}; its keys start with {heads[:10]}')
            state_dict, source = selected, f'{source} (prefix {prefix!r})'
        report = load_state_dict_checked(module, state_dict, source, strict=False,
                                         advice='Set the init_cfg prefix to the part in front '
                                         "of the module's keys")
        if report.missing or report.unexpected:
            print_log(f'{source} in {type(module).__name__}: missing keys {report.missing}, '
                      f'unexpected keys {report.unexpected}', logger='current', level=30)
        if hasattr(module, '_params_init_info'):
            update_init_info(module, init_info=self._get_init_info())


def checked_pretrained_cfg(init_cfg: InitCfg) -> InitCfg:
    """``init_cfg`` with every ``type='Pretrained'`` entry built from the ``dinomamba_mm`` scope
    (:class:`CheckedPretrainedInit`); mmengine still recognises the entries as pretrained and
    applies them last."""
    if init_cfg is None:
        return None
    cfgs = copy.deepcopy(init_cfg)
    for cfg in ([cfgs] if isinstance(cfgs, dict) else cfgs):
        if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained':
            cfg.setdefault('_scope_', SCOPE)
    return cfgs
