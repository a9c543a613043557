"""Registries of dinomamba_mm: children of mmengine's roots in scope 'dinomamba_mm'.

Because they hang off mmengine's roots, a config in any OpenMMLab scope (mmpretrain, mmseg,
mmdet) reaches them as ``type='dinomamba_mm.Name'`` once ``dinomamba_mm`` is imported
(``custom_imports=dict(imports=['dinomamba_mm'], allow_failed_imports=False)``).

Two things differ from a plain :class:`mmengine.registry.Registry` (see :class:`PluginRegistry`):

- a lookup imports only the module that defines the name, so that an mmseg config building
  ``DinoVim`` does not import the mmpretrain model zoo that ``LinearViT`` or ``DINO`` subclass;
- a name this scope does not define resolves in the scope the run started in. mmengine stamps
  ``_scope_='dinomamba_mm'`` on the objects of a config inherited through
  ``_base_ = 'dinomamba_mm::...'`` and builds them, and everything they build in turn, in this
  scope; our configs are mmpretrain, mmseg or mmdet configs (their ``default_scope``), so their
  ``ImageClassifier``, ``EncoderDecoder`` or ``CocoDataset`` come from that scope.
"""
from importlib import import_module
from typing import Dict, Optional, Type

from mmengine.registry import DATA_SAMPLERS as MMENGINE_DATA_SAMPLERS
from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import EVALUATOR as MMENGINE_EVALUATOR
from mmengine.registry import FUNCTIONS as MMENGINE_FUNCTIONS
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import INFERENCERS as MMENGINE_INFERENCERS
from mmengine.registry import LOG_PROCESSORS as MMENGINE_LOG_PROCESSORS
from mmengine.registry import LOOPS as MMENGINE_LOOPS
from mmengine.registry import METRICS as MMENGINE_METRICS
from mmengine.registry import MODEL_WRAPPERS as MMENGINE_MODEL_WRAPPERS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import \
    OPTIM_WRAPPER_CONSTRUCTORS as MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import OPTIMIZERS as MMENGINE_OPTIMIZERS
from mmengine.registry import PARAM_SCHEDULERS as MMENGINE_PARAM_SCHEDULERS
from mmengine.registry import \
    RUNNER_CONSTRUCTORS as MMENGINE_RUNNER_CONSTRUCTORS
from mmengine.registry import RUNNERS as MMENGINE_RUNNERS
from mmengine.registry import STRATEGIES as MMENGINE_STRATEGIES
from mmengine.registry import TASK_UTILS as MMENGINE_TASK_UTILS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import VISBACKENDS as MMENGINE_VISBACKENDS
from mmengine.registry import VISUALIZERS as MMENGINE_VISUALIZERS
from mmengine.registry import \
    WEIGHT_INITIALIZERS as MMENGINE_WEIGHT_INITIALIZERS
from mmengine.registry import DefaultScope, Registry

SCOPE = 'dinomamba_mm'


def _run_scope() -> Optional[str]:
    """The default scope of the run: the newest one that is not ours.

    mmengine pushes a temporary :class:`DefaultScope` for every object built from a config
    with ``_scope_`` and drops it afterwards; the scope the Runner (or ``init_default_scope``)
    set stays below it in ``DefaultScope._instance_dict``, which mmengine keeps in creation
    order and offers no public iterator over (mmengine 0.10.7).
    """
    for instance in reversed(list(DefaultScope._instance_dict.values())):
        if instance.scope_name != SCOPE:
            return instance.scope_name
    return None


class PluginRegistry(Registry):
    """A registry of this package: imports on demand, and defers to the run's scope.

    mmengine's ``locations`` import all modules of a registry at its first lookup; this one
    imports only the module that registers the name looked up (``modules``), because some of
    our modules subclass mmpretrain models (whose package imports mmdet) and the others must
    not pay for them.

    Inside a build that mmengine switched to scope ``dinomamba_mm`` (objects of a config
    inherited through ``dinomamba_mm::``), a name this registry does not hold is looked up in
    the same registry of the run's own scope (the config's ``default_scope``: mmpretrain,
    mmseg or mmdet), and through it in mmengine's root: as in a build in that scope, mmdet's
    ``LoadAnnotations`` wins over mmcv's.

    Args:
        name (str): Registry name, as mmengine's root of the same kind.
        parent (Registry): mmengine's root registry of this kind.
        modules (dict): ``{name: module}`` for every name that ``module`` registers here.
            Defaults to no names.
    """

    def __init__(self, name: str, parent: Registry,
                 modules: Optional[Dict[str, str]] = None) -> None:
        super().__init__(name, parent=parent, scope=SCOPE)
        self.modules = dict(modules or {})

    def import_from_location(self) -> None:
        """Import nothing up front: :meth:`get` imports the module of the name it looks up."""

    def get(self, key: str) -> Optional[Type]:
        """The object registered as ``key``; see the class docstring for the search order.

        Args:
            key (str): ``'Name'`` or ``'scope.Name'``.
        """
        scope, name = self.split_scope_key(key)
        if scope in (None, self.scope) and name in self.modules:
            import_module(self.modules[name])
        if scope is None and name not in self.module_dict:
            run_registry = self._run_registry()
            if run_registry is not None:
                return run_registry.get(name)
        return super().get(key)

    def _run_registry(self) -> Optional[Registry]:
        """The registry of the run's scope, inside a build mmengine switched to ours."""
        current = DefaultScope.get_current_instance()
        if current is None or current.scope_name != self.scope:
            return None
        run_scope = _run_scope()
        if run_scope is None:
            return None
        try:
            import_module(f'{run_scope}.registry')
        except ImportError:
            return None
        return self._get_root_registry()._search_child(run_scope)


RUNNERS = PluginRegistry('runner', MMENGINE_RUNNERS)
RUNNER_CONSTRUCTORS = PluginRegistry('runner constructor', MMENGINE_RUNNER_CONSTRUCTORS)
LOOPS = PluginRegistry('loop', MMENGINE_LOOPS)
STRATEGIES = PluginRegistry('strategy', MMENGINE_STRATEGIES)
HOOKS = PluginRegistry('hook', MMENGINE_HOOKS, {
    'BackboneLayoutHook': 'dinomamba_mm.engine.hooks.backbone_layout_hook',
    'DINOTeacherEMAHook': 'dinomamba_mm.engine.hooks.dino_teacher_ema_hook',
    'DINOTeacherTempHook': 'dinomamba_mm.engine.hooks.dino_teacher_temp_hook',
    'FreezeLastLayerHook': 'dinomamba_mm.engine.hooks.freeze_last_layer_hook',
    'NonFiniteStepHook': 'dinomamba_mm.engine.hooks.non_finite_step_hook',
    'PerParameterGradClipHook': 'dinomamba_mm.engine.hooks.per_parameter_grad_clip_hook',
    'RandomStateHook': 'dinomamba_mm.engine.hooks.random_state_hook',
    'ResumableCheckpointHook': 'dinomamba_mm.engine.hooks.resumable_checkpoint_hook',
    'StrictLoadHook': 'dinomamba_mm.engine.hooks.strict_load_hook',
})

DATASETS = PluginRegistry('dataset', MMENGINE_DATASETS)
DATA_SAMPLERS = PluginRegistry('data sampler', MMENGINE_DATA_SAMPLERS)
TRANSFORMS = PluginRegistry('transform', MMENGINE_TRANSFORMS, {
    'DINOMultiCrop': 'dinomamba_mm.datasets.transforms.dino_multi_crop',
    'RandomGaussianBlur': 'dinomamba_mm.datasets.transforms.random_gaussian_blur',
})
FUNCTIONS = PluginRegistry('function', MMENGINE_FUNCTIONS, {
    'seed_worker_from_loader': 'dinomamba_mm.datasets.worker_seed',
})

MODELS = PluginRegistry('model', MMENGINE_MODELS, {
    'DinoVim': 'dinomamba_mm.models.backbones.dinovim',
    'DinoMambaReg': 'dinomamba_mm.models.backbones.dinovim',
    'FrozenBackbone': 'dinomamba_mm.models.backbones.frozen_backbone',
    'LinearViT': 'dinomamba_mm.models.backbones.linear_vit',
    'LinearProbeClassifier': 'dinomamba_mm.models.classifiers.linear_probe_classifier',
    'DINO': 'dinomamba_mm.models.selfsup.dino',
    'DINOLossHead': 'dinomamba_mm.models.heads.dino_loss_head',
    'DINOProjectionHead': 'dinomamba_mm.models.heads.dino_projection_head',
    'LinearProbeNeck': 'dinomamba_mm.models.necks.linear_probe_neck',
    'ClassTokenMapModel': 'dinomamba_mm.analysis.class_token_map_model',
})
MODEL_WRAPPERS = PluginRegistry('model_wrapper', MMENGINE_MODEL_WRAPPERS)
WEIGHT_INITIALIZERS = PluginRegistry('weight initializer', MMENGINE_WEIGHT_INITIALIZERS, {
    'PaperCheckpoint': 'dinomamba_mm.models.backbones.paper_checkpoint',
    'Pretrained': 'dinomamba_mm.models.backbones.checked_pretrained',
})

OPTIMIZERS = PluginRegistry('optimizer', MMENGINE_OPTIMIZERS)
OPTIM_WRAPPERS = PluginRegistry('optim_wrapper', MMENGINE_OPTIM_WRAPPERS)
OPTIM_WRAPPER_CONSTRUCTORS = PluginRegistry(
    'optimizer wrapper constructor', MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS, {
        'LayerDecayOptimWrapperConstructor':
        'dinomamba_mm.engine.optimizers.layer_decay_optim_wrapper_constructor',
        'TrainableOptimWrapperConstructor':
        'dinomamba_mm.engine.optimizers.trainable_optim_wrapper_constructor',
    })
PARAM_SCHEDULERS = PluginRegistry('parameter scheduler', MMENGINE_PARAM_SCHEDULERS)

METRICS = PluginRegistry('metric', MMENGINE_METRICS, {
    'BinaryAUC': 'dinomamba_mm.evaluation.metrics.binary_auc',
    'ClassSubsetAccuracy': 'dinomamba_mm.evaluation.metrics.class_subset_accuracy',
    'ReaLAccuracy': 'dinomamba_mm.evaluation.metrics.real_accuracy',
})
EVALUATOR = PluginRegistry('evaluator', MMENGINE_EVALUATOR)

TASK_UTILS = PluginRegistry('task util', MMENGINE_TASK_UTILS)
VISUALIZERS = PluginRegistry('visualizer', MMENGINE_VISUALIZERS)
VISBACKENDS = PluginRegistry('vis_backend', MMENGINE_VISBACKENDS)
LOG_PROCESSORS = PluginRegistry('log_processor', MMENGINE_LOG_PROCESSORS)
INFERENCERS = PluginRegistry('inferencer', MMENGINE_INFERENCERS)
