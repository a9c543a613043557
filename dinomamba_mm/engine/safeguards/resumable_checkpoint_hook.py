"""mmengine's CheckpointHook whose every checkpoint can be resumed and none is half-written."""
import os.path as osp
from collections import deque
from typing import Optional

from mmengine.dist import is_main_process
from mmengine.hooks import CheckpointHook
from mmengine.runner import EpochBasedTrainLoop

from dinomamba_mm.compat import leave_default_statistics_out
from dinomamba_mm.engine.hook_options import checked_options
from dinomamba_mm.registry import HOOKS
from . import preemption_hook
from .run_guards import check_same_epoch_length
from .atomic_local_backend import AtomicLocalBackend  # noqa: F401  (registers 'atomic_local')

#: runtime-info key of the steps of the checkpoints kept (mmengine's CheckpointHook's, so that
#: either hook resumes the other's checkpoints)
KEPT_KEY = 'keep_ckpt_ids'


@HOOKS.register_module()
@checked_options
class ResumableCheckpointHook(CheckpointHook):
    """:class:`mmengine.hooks.CheckpointHook` (same arguments) with four guarantees:

    - Checkpoints are written atomically: ``backend_args`` defaults to
      ``dict(backend='atomic_local')`` (:class:`.AtomicLocalBackend`),
      so a save killed halfway leaves no partial ``epoch_N.pth`` / ``iter_N.pth``.
    - With ``max_keep_ckpts``, the oldest checkpoint is removed only after the new one is
      complete (mmengine removes it first: a save killed then, with ``max_keep_ckpts=1``, left
      no checkpoint at all).
    - Unresumable checkpoints are refused when training starts, not when resuming days later:
      under ``EpochBasedTrainLoop`` a per-iteration schedule (``by_epoch=False``) is an error,
      because ``EpochBasedTrainLoop`` resumes an epoch from its first batch and such
      checkpoints record the epoch they were saved in (even the one written after the last
      iteration of an epoch), so the resumed run would train that epoch again. Resuming a
      checkpoint saved that way (by another hook) is refused too, naming the epoch checkpoint
      to use instead.
    - Torch's safe unpickler (``torch.load`` with ``weights_only=True``, torch's default from
      2.6) reads the checkpoints: the message hub's history buffers are saved without the
      statistics functions mmengine 0.10.7 pickles by reference
      (:func:`dinomamba_mm.compat.leave_default_statistics_out`).

    Registered as ``dinomamba_mm.ResumableCheckpointHook``; the configs of this project use it
    as ``default_hooks.checkpoint``.

    Args:
        max_keep_ckpts (int): The most checkpoints kept (``iter_N.pth`` / ``epoch_N.pth``);
            -1 or 0 keeps all. Defaults to -1.
        backend_args (dict, optional): mmengine's file backend arguments; None stands for
            ``dict(backend='atomic_local')`` unless ``file_client_args`` is given.
            Defaults to None.
        *args: The other positional arguments of mmengine's ``CheckpointHook``.
        **kwargs: The other keyword arguments of mmengine's ``CheckpointHook``.
    """

    def __init__(self, *args, max_keep_ckpts: int = -1, backend_args: Optional[dict] = None,
                 **kwargs) -> None:
        if backend_args is None and kwargs.get('file_client_args') is None:
            backend_args = dict(backend='atomic_local')
        # mmengine keeps every checkpoint here: this hook removes the oldest after a save
        super().__init__(*args, max_keep_ckpts=-1, backend_args=backend_args, **kwargs)
        self.keep_ckpts = max_keep_ckpts
        self.kept_steps: deque = deque()
        self._loaded_meta: Optional[dict] = None

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        # called for load_from too, before a resume sets runner.iter: told apart in before_train
        info = checkpoint.get('message_hub', {}).get('runtime_info', {})
        self._loaded_meta = dict(checkpoint.get('meta', {}), max_iters=info.get('max_iters'),
                                 max_epochs=info.get('max_epochs'),
                                 inside_epoch=preemption_hook.CHECKPOINT_KEY in checkpoint)

    def before_train(self, runner) -> None:
        meta, self._loaded_meta = self._loaded_meta, None
        if isinstance(runner.train_loop, EpochBasedTrainLoop):
            if not self.by_epoch:
                raise ValueError(
                    f'{type(self).__name__}(by_epoch=False, interval={self.interval}) under '
                    'EpochBasedTrainLoop saves checkpoints that cannot be resumed: the loop '
                    'resumes an epoch from its first batch, so the epoch of the checkpoint '
                    'would be trained again. Save per epoch (by_epoch=True, interval in '
                    'epochs), or train with IterBasedTrainLoop')
            if meta and runner.iter and runner.iter == meta.get('iter'):
                self._check_resumed_at_epoch_start(runner, meta)
        super().before_train(runner)
        if self.keep_ckpts > 0:
            self.kept_steps = deque(runner.message_hub.get_info(KEPT_KEY, []))  # on resume
            self._remove_old_checkpoints(runner)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        leave_default_statistics_out(checkpoint['message_hub'])
        if self.keep_ckpts <= 0 or preemption_hook.META_KEY in checkpoint['meta']:
            return  # none removed, or not one of this hook's files
        # the step of the file being written (mmengine's Runner.save_checkpoint sets both); the
        # checkpoint records it among the kept ones, so that a run resumed from it removes it
        step = checkpoint['meta']['epoch' if self.by_epoch else 'iter']
        if not self.kept_steps or self.kept_steps[-1] != step:
            self.kept_steps.append(step)
        runner.message_hub.update_info(KEPT_KEY, list(self.kept_steps))
        checkpoint['message_hub']['runtime_info'][KEPT_KEY] = list(self.kept_steps)

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        super().after_train_iter(runner, batch_idx, data_batch, outputs)
        self._remove_old_checkpoints(runner)

    def after_train_epoch(self, runner) -> None:
        super().after_train_epoch(runner)
        self._remove_old_checkpoints(runner)

    def after_val_epoch(self, runner, metrics) -> None:
        super().after_val_epoch(runner, metrics)
        self._remove_old_checkpoints(runner)

    def _remove_old_checkpoints(self, runner) -> None:
        """Remove the oldest checkpoints beyond ``max_keep_ckpts``, the newest being complete."""
        if self.keep_ckpts <= 0 or len(self.kept_steps) <= self.keep_ckpts:
            return
        while len(self.kept_steps) > self.keep_ckpts:
            step = self.kept_steps.popleft()
            if is_main_process():
                path = self.file_backend.join_path(self.out_dir, self.filename_tmpl.format(step))
                if self.file_backend.isfile(path):
                    self.file_backend.remove(path)
                elif self.file_backend.isdir(path):  # deepspeed checkpoints are folders
                    self.file_backend.rmtree(path)
        runner.message_hub.update_info(KEPT_KEY, list(self.kept_steps))

    @staticmethod
    def _check_resumed_at_epoch_start(runner, meta: dict) -> None:
        epoch_length = len(runner.train_dataloader)
        epoch, iteration = runner.epoch, runner.iter
        if iteration == epoch * epoch_length:
            return
        saved_length = meta['max_iters'] // meta['max_epochs'] if meta['max_epochs'] else None
        check_same_epoch_length(runner, saved_length,
                                osp.basename(runner.cfg.get('load_from') or ''))
        if meta['inside_epoch'] and any(isinstance(hook, preemption_hook.PreemptionHook)
                                        for hook in runner.hooks):
            return  # PreemptionHook continues the epoch where the checkpoint left it
        if iteration == (epoch + 1) * epoch_length:
            where = (f'after the last iteration of epoch {epoch + 1} by a per-iteration '
                     f'CheckpointHook, which records epoch {epoch + 1} as not yet finished: '
                     f'the loop would train it again. Resume from epoch_{epoch + 1}.pth')
        else:
            fallback = (f'Resume from epoch_{epoch}.pth, the last epoch checkpoint' if epoch
                        else 'No epoch had finished: start the run again')
            where = (f'during epoch {epoch + 1} ({epoch_length} iterations per epoch): the loop '
                     'would restart that epoch from its first batch and train more iterations '
                     f'than max_iters. {fallback}')
        raise ValueError(f'cannot resume from iteration {iteration} under EpochBasedTrainLoop: '
                         f'the checkpoint was saved {where}')
