"""Refuse a ``load_from`` / resume checkpoint that does not fit the model."""
from mmengine.hooks import Hook
from mmengine.model import BaseTTAModel, is_model_wrapper

from dinomamba_mm.checkpoints import load_state_dict_checked, strip_module_prefix
from dinomamba_mm.registry import HOOKS
from .run_guards import add_custom_hook

OPT_OUT = ('Pass --no-strict-load to tools/train.py / tools/test.py (or drop '
           'dinomamba_mm.StrictLoadHook from custom_hooks) to load it anyway, the missing '
           'tensors keeping their initial values')


@HOOKS.register_module()
class StrictLoadHook(Hook):
    """Make ``load_from`` and resumed checkpoints load strictly.

    mmengine's Runner loads them non-strictly: keys the model lacks, keys the checkpoint lacks
    and tensors of another shape are only logged, so ``tools/test.py`` scores a randomly
    initialised model and exits 0 when given another model's checkpoint (another width, a
    DINO checkpoint for a classifier, an mmpretrain ViT). In ``after_load_checkpoint`` (after
    the other hooks, before the Runner copies the weights) this hook loads the checkpoint's
    ``state_dict`` into the model strictly, keys revised as mmengine revises them (a leading
    ``module.`` removed; DDP and test-time-augmentation wrappers unwrapped), and raises a
    ``ValueError`` listing the missing and unexpected keys and the shape mismatches, with a
    hint when a key prefix explains them (e.g. ``teacher.backbone.``), or naming the tensors
    that hold NaN or Inf.

    ``tools/train.py`` and ``tools/test.py`` add it to ``custom_hooks`` unless given
    ``--no-strict-load``; add it to a config to get the same under other tools.

    Args:
        allow_non_finite (bool): load tensors holding NaN or Inf (``tools/test.py
            --allow-non-finite``).
    """

    priority = 'LOWEST'  # after hooks that edit the loaded checkpoint

    def __init__(self, allow_non_finite: bool = False) -> None:
        self.allow_non_finite = allow_non_finite

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        model = runner.model
        while is_model_wrapper(model) or isinstance(model, BaseTTAModel):
            model = model.module
        name = runner.cfg.get('load_from') or 'resumed from the work dir'
        state_dict = strip_module_prefix(checkpoint.get('state_dict', checkpoint))
        load_state_dict_checked(model, state_dict, source=f'checkpoint {name!r}', strict=True,
                                advice=OPT_OUT, allow_non_finite=self.allow_non_finite)


def add_strict_load_hook(cfg, allow_non_finite: bool = False) -> None:
    """Append :class:`StrictLoadHook` to ``cfg.custom_hooks`` unless it is there already."""
    add_custom_hook(cfg, dict(type='dinomamba_mm.StrictLoadHook')
                    | (dict(allow_non_finite=True) if allow_non_finite else {}))
