"""Record the token layout of backbones in saved checkpoints, check it in loaded ones."""
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from dinomamba_mm.checkpoints import LAYOUT_META_KEY, check_layouts, model_layouts
from dinomamba_mm.registry import HOOKS


@HOOKS.register_module()
class BackboneLayoutHook(Hook):
    """Keep ``meta['backbone_layouts']`` (see :mod:`dinomamba_mm.checkpoints.layout`) in
    checkpoints.

    Before the runner saves a checkpoint, records the token layout and position-embedding grid of
    every backbone with a ``token_layout`` (DinoVim / DinoMambaReg) under its module path; after
    the runner loads one (``load_from``, resume), checks each such backbone that the checkpoint
    holds weights for against its record: another token layout is an error naming both, no
    record a warning. The configs of this package set it in ``default_hooks`` (key
    ``backbone_layout``).
    """

    priority = 'VERY_LOW'

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint.setdefault('meta', {})[LAYOUT_META_KEY] = model_layouts(runner.model)

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        meta = checkpoint.get('meta') or {}
        check_layouts(model, meta.get(LAYOUT_META_KEY) or {}, '',
                      checkpoint.get('state_dict', checkpoint),
                      f'checkpoint {runner.cfg.get("load_from") or "(resumed)"}')
