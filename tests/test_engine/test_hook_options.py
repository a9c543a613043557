"""Every hook registered by dinomamba_mm refuses an option it does not know when it is built,
naming the hook, the option and the accepted ones (a misspelt ResumableCheckpointHook option
was accepted and failed at the first save, an interval later; the others raised Python's
TypeError, which names neither the accepted options nor a close one)."""
import pytest

import dinomamba_mm  # noqa: F401
from dinomamba_mm.registry import HOOKS

CHECKPOINT_OPTIONS = [
    'max_keep_ckpts', 'backend_args', 'interval', 'by_epoch', 'save_optimizer',
    'save_param_scheduler', 'out_dir', 'save_last', 'save_best', 'rule', 'greater_keys',
    'less_keys', 'file_client_args', 'filename_tmpl', 'published_keys', 'save_begin']
# the oracle: each hook's documented arguments (its docstring's Args), written out by hand
OPTIONS = {
    # DINO's schedules
    'DINOTeacherEMAHook': ['base_momentum', 'final_momentum'],
    'DINOTeacherTempHook': ['warmup_teacher_temp', 'teacher_temp', 'warmup_epochs'],
    'FreezeLastLayerHook': ['freeze_epochs', 'module_name'],
    'PerParameterGradClipHook': ['max_norm'],
    # safeguards
    'NonFiniteStepHook': ['max_consecutive_skips'],
    'StrictLoadHook': ['allow_non_finite'],
    'RandomStateHook': [],
    'BackboneLayoutHook': [],
    'SafeUnpickleHook': [],
    'PreemptionHook': [],
    # mmengine's CheckpointHook's arguments
    'ResumableCheckpointHook': CHECKPOINT_OPTIONS,
}


def test_every_registered_hook_is_covered():
    HOOKS.import_from_location()
    assert sorted(HOOKS.module_dict) == sorted(OPTIONS)


@pytest.mark.parametrize('name', sorted(OPTIONS))
def test_an_unknown_option_is_refused_when_built(name):
    with pytest.raises(TypeError) as info:
        HOOKS.build(dict(type=f'dinomamba_mm.{name}', bogus_option=1))
    assert str(info.value) == (f"{name} has no option 'bogus_option'; its options are "
                               f"{OPTIONS[name] or 'none'}")


@pytest.mark.parametrize('name, misspelt, meant', [
    ('ResumableCheckpointHook', 'max_keep_ckpt', 'max_keep_ckpts'),
    ('ResumableCheckpointHook', 'intervall', 'interval'),
    ('DINOTeacherEMAHook', 'base_momentun', 'base_momentum'),
    ('NonFiniteStepHook', 'max_consecutive_skip', 'max_consecutive_skips'),
])
def test_a_misspelt_option_names_the_one_meant(name, misspelt, meant):
    with pytest.raises(TypeError, match=f"^{name} has no option '{misspelt}' "
                                        f"\\(did you mean '{meant}'\\?\\); its options are"):
        HOOKS.build(dict(type=f'dinomamba_mm.{name}', **{misspelt: 3}))


def test_known_options_still_build():
    hook = HOOKS.build(dict(type='dinomamba_mm.ResumableCheckpointHook', interval=2,
                            max_keep_ckpts=3, save_best='accuracy/top1', rule='greater'))
    assert (hook.interval, hook.keep_ckpts, hook.save_best) == (2, 3, ['accuracy/top1'])
    assert HOOKS.build(dict(type='dinomamba_mm.DINOTeacherEMAHook',
                            final_momentum=0.999)).final_momentum == 0.999
    assert HOOKS.build(dict(type='dinomamba_mm.StrictLoadHook',
                            allow_non_finite=True)).allow_non_finite is True
