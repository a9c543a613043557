from dinomamba_mm.lazy_exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    'BackboneLayoutHook': '.backbone_layout_hook',
    'DINOTeacherEMAHook': '.dino_teacher_ema_hook',
    'DINOTeacherTempHook': '.dino_teacher_temp_hook',
    'FreezeLastLayerHook': '.freeze_last_layer_hook',
    'NonFiniteStepHook': '.non_finite_step_hook',
    'PerParameterGradClipHook': '.per_parameter_grad_clip_hook',
    'RandomStateHook': '.random_state_hook',
    'ResumableCheckpointHook': '.resumable_checkpoint_hook',
    'StrictLoadHook': '.strict_load_hook',
})
