"""Record the token layout of DinoVim backbones in saved checkpoints, check it in loaded ones."""
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from dinomamba_mm.models.backbones import DinoVim
from dinomamba_mm.models.backbones.layout_record import (LAYOUT_META_KEY, check_layout,
                                                         checkpoint_layout, model_layouts)
from dinomamba_mm.registry import HOOKS


@HOOKS.register_module()
class BackboneLayoutHook(Hook):
    """Keep ``meta['backbone_layouts']`` (see ``models/backbones/layout_record.py``) in checkpoints.

    Before the runner saves a checkpoint, records the token layout and position-embedding grid of
    every DinoVim / DinoMambaReg of the model under its module path; after the runner loads one
    (``load_from``, resume), checks each backbone that the checkpoint holds weights for against its
    record: another token layout is an error naming both, no record a warning. The configs of
    this package set it in ``default_hooks`` (key ``backbone_layout``).
    """

    priority = 'VERY_LOW'

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint.setdefault('meta', {})[LAYOUT_META_KEY] = model_layouts(runner.model)

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        state_dict = checkpoint.get('state_dict', checkpoint)
        source = f'checkpoint {runner.cfg.get("load_from") or "(resumed)"}'
        for path, module in model.named_modules():
            if not isinstance(module, DinoVim):
                continue
            if not any(key.startswith(f'{path}.') for key in state_dict):
                continue  # holds no weights of this backbone (e.g. a linear head only)
            check_layout(module, checkpoint_layout(checkpoint, path), source, path)
