"""Keep the checkpoints of a run readable by torch's safe unpickler."""
from mmengine.hooks import Hook

from dinomamba_mm.compat import leave_default_statistics_out
from dinomamba_mm.registry import HOOKS


@HOOKS.register_module()
class SafeUnpickleHook(Hook):
    """Save the message hub of every checkpoint without the references torch's safe unpickler
    refuses (:func:`dinomamba_mm.compat.leave_default_statistics_out`; torch >= 2.6 with
    mmengine <= 0.10.7), whichever hook saves it: a run of mmengine's own ``CheckpointHook`` can
    then be resumed. ``tools/train.py`` adds it; :class:`ResumableCheckpointHook` does the same
    on its own.
    """

    priority = 'VERY_LOW'

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        leave_default_statistics_out(checkpoint['message_hub'])
