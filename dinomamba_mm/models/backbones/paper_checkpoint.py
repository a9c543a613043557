"""``dinomamba_mm.PaperCheckpoint``: strict weight initializer for DinoVim / DinoMambaReg."""
from typing import Optional

import torch.nn as nn
from mmengine.logging import print_log
from mmengine.model.weight_init import update_init_info
from mmengine.runner.checkpoint import CheckpointLoader

from dinomamba_mm.checkpoints import check_checkpoint_file
from dinomamba_mm.registry import WEIGHT_INITIALIZERS
from .checkpoint_mapping import (PAPER_SOURCES, backbone_state_dict,
                                 load_state_dict_strict)
from .layout_record import check_layout, checkpoint_layout


@WEIGHT_INITIALIZERS.register_module(name='PaperCheckpoint')
class PaperCheckpointInit:
    """Load a Dino-Mamba paper checkpoint, or a converted one, into a DinoVim backbone, strictly.

    Use as the backbone's ``init_cfg``::

        init_cfg=dict(type='dinomamba_mm.PaperCheckpoint',
                      checkpoint=('https://huggingface.co/TimingYang/Dino-Mamba/resolve/main/'
                                  'Vim/Base/checkpoint.pth'),
                      source='teacher')

    ``checkpoint`` is a path or URL (mmengine's loaders, http(s) through its download cache)
    holding a raw paper checkpoint ('teacher' / 'student' state dicts), an mmengine checkpoint
    from ``tools/model_converters/dinomamba_to_mmpretrain.py`` or a bare backbone state dict.
    Keys go through :mod:`.checkpoint_mapping`; any missing or unexpected key raises a KeyError
    listing them (mmengine's ``Pretrained`` only warns). The paper's files give its features
    with ``token_layout='paper'`` (and ``img_size=112`` for MambaR); loading them, or any
    checkpoint recording another token layout, into another layout is an error.

    Args:
        checkpoint: path or URL.
        source: 'teacher' or 'student', for raw paper checkpoints.
        prefix: keys prefix of the backbone in converted / mmengine checkpoints (removed; keys
            without it are ignored when some have it).
        map_location: passed to the checkpoint loader.
    """

    def __init__(self, checkpoint: str, source: str = 'teacher',
                 prefix: Optional[str] = 'backbone.', map_location: str = 'cpu') -> None:
        if source not in PAPER_SOURCES:
            raise ValueError(f'source must be one of {sorted(PAPER_SOURCES)}, got {source!r}')
        self.checkpoint = checkpoint
        self.source = source
        self.prefix = prefix
        self.map_location = map_location

    def __call__(self, module: nn.Module) -> None:
        print_log(f'load {self.source} backbone from {self.checkpoint} (strict)',
                  logger='current')
        check_checkpoint_file(self.checkpoint)
        loaded = CheckpointLoader.load_checkpoint(self.checkpoint, map_location=self.map_location)
        state_dict = backbone_state_dict(loaded, self.source, self.prefix)
        check_layout(module, checkpoint_layout(loaded, self._module_path(loaded), state_dict),
                     self.checkpoint, self._module_path(loaded))
        load_state_dict_strict(module, state_dict)
        if hasattr(module, '_params_init_info'):
            update_init_info(module, init_info=self._get_init_info())

    def _module_path(self, loaded: dict) -> str:
        """Where the backbone sits in a (non-raw) checkpoint's state dict, for its record."""
        state_dict = loaded.get('state_dict', loaded)
        has_prefix = self.prefix and any(k.startswith(self.prefix) for k in state_dict)
        return self.prefix.rstrip('.') if has_prefix else ''

    def _get_init_info(self) -> str:
        return f'{self.__class__.__name__}: load {self.source} from {self.checkpoint}'
