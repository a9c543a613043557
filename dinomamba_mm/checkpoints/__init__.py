"""Checkpoint files: written atomically, checked before loading, matched against the model."""
from .atomic_local_backend import AtomicLocalBackend
from .files import (check_checkpoint_file, checkpoint_file_problem, find_resumable_checkpoint,
                    is_local_path)
from .matching import LoadReport, load_state_dict_checked, prefix_hint, strip_module_prefix

__all__ = [
    'AtomicLocalBackend', 'check_checkpoint_file', 'checkpoint_file_problem',
    'find_resumable_checkpoint', 'is_local_path', 'LoadReport', 'load_state_dict_checked',
    'prefix_hint', 'strip_module_prefix'
]
