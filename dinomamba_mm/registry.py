"""Registries of dinomamba_mm: children of mmengine's roots in scope 'dinomamba_mm'.

Because they hang off mmengine's roots, a config in any OpenMMLab scope (mmpretrain, mmseg,
mmdet) reaches them as ``type='dinomamba_mm.Name'`` once ``dinomamba_mm`` is imported
(``custom_imports=dict(imports=['dinomamba_mm'], allow_failed_imports=False)``).

A class is registered by its decorator alone. Each registry imports its ``locations`` (the
packages that hold its classes) at its first lookup, whichever scope the lookup comes from, so
``import dinomamba_mm`` imports none of them.
"""
from importlib import import_module
from typing import List, Optional, Type

import mmengine.registry as root
from mmengine.registry import DefaultScope, Registry

SCOPE = 'dinomamba_mm'


def run_scope() -> Optional[str]:
    """The default scope of the run: the newest one that is not ours.

    mmengine pushes a :class:`DefaultScope` for every object built from a config with
    ``_scope_`` and drops it afterwards; the scope the Runner (or ``init_default_scope``) set
    stays below it. mmengine 0.10.7 keeps the instances in creation order in the private
    ``DefaultScope._instance_dict`` and has no public way to list them
    (``get_current_instance`` gives only the newest, ours inside such a build);
    tests/test_registry.py checks this behaviour.
    """
    for instance in reversed(list(DefaultScope._instance_dict.values())):
        if instance.scope_name != SCOPE:
            return instance.scope_name
    return None


class PluginRegistry(Registry):
    """A registry of this package that defers the names it lacks to the run's scope.

    mmengine builds the objects of a config inherited through ``_base_ = 'dinomamba_mm::...'``
    (it stamps them ``_scope_='dinomamba_mm'``), and everything they build in turn, in this
    scope. Our configs are mmpretrain, mmseg or mmdet configs (their ``default_scope``), so inside
    such a build a name this registry does not hold is looked up in the same registry of the
    run's scope, and through it in mmengine's root: as in a build in that scope, mmdet's
    ``LoadAnnotations`` wins over mmcv's.

    Args:
        name (str): Registry name, as mmengine's root of the same kind.
        parent (Registry): mmengine's root registry of this kind.
        locations (list[str]): Packages whose import registers this registry's classes.
            Defaults to none.
    """

    def __init__(self, name: str, parent: Registry, locations: Optional[List[str]] = None):
        super().__init__(name, parent=parent, scope=SCOPE, locations=locations or [])

    def get(self, key: str) -> Optional[Type]:
        """The object registered as ``key`` (``'Name'`` or ``'scope.Name'``)."""
        scope, name = self.split_scope_key(key)
        if scope is None:
            self.import_from_location()
            if name not in self.module_dict:
                run_registry = self._run_registry()
                if run_registry is not None:
                    return run_registry.get(name)
        return super().get(key)

    def _run_registry(self) -> Optional[Registry]:
        """The registry of the run's scope, inside a build mmengine switched to ours."""
        current = DefaultScope.get_current_instance()
        if current is None or current.scope_name != self.scope:
            return None
        scope = run_scope()
        if scope is None:
            return None
        try:
            import_module(f'{scope}.registry')
        except ImportError:
            return None
        return self._get_root_registry()._search_child(scope)


# ``locations``: dinomamba_mm.checkpoints holds the initialisers, the checkpoint hooks and
# FrozenBackbone; tests/test_registry.py checks that the locations reach every registered class.

RUNNERS = PluginRegistry('runner', root.RUNNERS)
RUNNER_CONSTRUCTORS = PluginRegistry('runner constructor', root.RUNNER_CONSTRUCTORS)
LOOPS = PluginRegistry('loop', root.LOOPS)
STRATEGIES = PluginRegistry('strategy', root.STRATEGIES)
HOOKS = PluginRegistry('hook', root.HOOKS,
                       ['dinomamba_mm.engine.hooks', 'dinomamba_mm.checkpoints'])

DATASETS = PluginRegistry('dataset', root.DATASETS, ['dinomamba_mm.datasets'])
DATA_SAMPLERS = PluginRegistry('data sampler', root.DATA_SAMPLERS)
TRANSFORMS = PluginRegistry('transform', root.TRANSFORMS, ['dinomamba_mm.datasets'])
FUNCTIONS = PluginRegistry('function', root.FUNCTIONS, ['dinomamba_mm.datasets'])

MODELS = PluginRegistry('model', root.MODELS, [
    'dinomamba_mm.models', 'dinomamba_mm.analysis', 'dinomamba_mm.checkpoints'])
MODEL_WRAPPERS = PluginRegistry('model_wrapper', root.MODEL_WRAPPERS)
WEIGHT_INITIALIZERS = PluginRegistry('weight initializer', root.WEIGHT_INITIALIZERS,
                                     ['dinomamba_mm.checkpoints'])

OPTIMIZERS = PluginRegistry('optimizer', root.OPTIMIZERS)
OPTIM_WRAPPERS = PluginRegistry('optim_wrapper', root.OPTIM_WRAPPERS)
OPTIM_WRAPPER_CONSTRUCTORS = PluginRegistry('optimizer wrapper constructor',
                                            root.OPTIM_WRAPPER_CONSTRUCTORS,
                                            ['dinomamba_mm.engine.optimizers'])
PARAM_SCHEDULERS = PluginRegistry('parameter scheduler', root.PARAM_SCHEDULERS)

METRICS = PluginRegistry('metric', root.METRICS, ['dinomamba_mm.evaluation'])
EVALUATOR = PluginRegistry('evaluator', root.EVALUATOR)

TASK_UTILS = PluginRegistry('task util', root.TASK_UTILS)
VISUALIZERS = PluginRegistry('visualizer', root.VISUALIZERS)
VISBACKENDS = PluginRegistry('vis_backend', root.VISBACKENDS)
LOG_PROCESSORS = PluginRegistry('log_processor', root.LOG_PROCESSORS)
INFERENCERS = PluginRegistry('inferencer', root.INFERENCERS)
