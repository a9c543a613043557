from .dino_teacher_ema_hook import DINOTeacherEMAHook
from .dino_teacher_temp_hook import DINOTeacherTempHook
from .freeze_last_layer_hook import FreezeLastLayerHook
from .per_parameter_grad_clip_hook import PerParameterGradClipHook

__all__ = [
    'DINOTeacherEMAHook', 'DINOTeacherTempHook', 'FreezeLastLayerHook', 'PerParameterGradClipHook'
]
