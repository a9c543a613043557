"""THE home of checkpoint I/O: files checked before loading (size, zip CRC, what the safe
unpickler refuses), the weights of a module found in any supported file, token layout and
finiteness checked, and one loader with one error type (:class:`CheckpointError`); the
initializers ``Pretrained`` and ``PaperCheckpoint``, and the model zoo's loader. It imports no
model class.

Our paths read checkpoints with :func:`read_checkpoint` (and hand mmengine's Runner the file
:func:`resolve_checkpoint` checked); mmengine's own ``CheckpointLoader`` is left as it is.
"""
from .backbone_weights import ModuleWeights, find_backbone_weights, strip_module_prefix
from .files import (CheckpointError, check_checkpoint_file, check_output_path,
                    check_safe_to_unpickle, checkpoint_file_problem, find_resumable_checkpoint,
                    load_local)
from .initializers import CheckedPretrainedInit, PaperCheckpointInit, checked_pretrained_cfg
from .layout import GRID_METADATA_KEY, LAYOUT_META_KEY, check_layouts, model_layouts
from .loading import (check_finite, find_checked, load_checkpoint_into, load_state_dict_checked,
                      prefix_hint, read_checkpoint, resolve_checkpoint)
from .paper_format import infer_arch, paper_to_ours

__all__ = [
    'CheckedPretrainedInit', 'CheckpointError', 'GRID_METADATA_KEY', 'LAYOUT_META_KEY',
    'ModuleWeights', 'PaperCheckpointInit', 'check_checkpoint_file', 'check_finite',
    'check_layouts', 'check_output_path', 'check_safe_to_unpickle', 'checked_pretrained_cfg',
    'checkpoint_file_problem', 'find_backbone_weights', 'find_checked',
    'find_resumable_checkpoint', 'infer_arch', 'load_checkpoint_into', 'load_local',
    'load_state_dict_checked', 'model_layouts', 'paper_to_ours', 'prefix_hint', 'read_checkpoint',
    'resolve_checkpoint', 'strip_module_prefix'
]
