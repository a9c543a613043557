from .backbone_layout_hook import BackboneLayoutHook
from .dino_teacher_ema_hook import DINOTeacherEMAHook
from .dino_teacher_temp_hook import DINOTeacherTempHook
from .freeze_last_layer_hook import FreezeLastLayerHook
from .non_finite_step_hook import NonFiniteStepHook
from .per_parameter_grad_clip_hook import PerParameterGradClipHook
from .random_state_hook import RandomStateHook
from .resumable_checkpoint_hook import ResumableCheckpointHook
from .strict_load_hook import StrictLoadHook

__all__ = [
    'BackboneLayoutHook', 'DINOTeacherEMAHook', 'DINOTeacherTempHook', 'FreezeLastLayerHook',
    'NonFiniteStepHook', 'PerParameterGradClipHook', 'RandomStateHook',
    'ResumableCheckpointHook', 'StrictLoadHook'
]
