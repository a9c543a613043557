"""Registries of dinomamba_mm: children of mmengine's roots in scope 'dinomamba_mm'.

Because they hang off mmengine's roots, a config in any OpenMMLab scope (mmpretrain, mmseg,
mmdet) reaches them as ``type='dinomamba_mm.Name'`` once ``dinomamba_mm`` is imported
(``custom_imports=dict(imports=['dinomamba_mm'], allow_failed_imports=False)``).

A class is registered by its decorator alone. Each registry imports its ``locations`` (the
packages that hold its classes) at its first lookup, whichever scope the lookup comes from, so
``import dinomamba_mm`` imports none of them, and mmcv (which mmpretrain, mmseg and mmdet need)
is first needed there: a missing one is an ImportError naming the command that installs it.
"""
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
    tests/test_registry.py checks this behaviour (docs/faq.md, "Private APIs").
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
            Defaults to this module, for a registry that holds none of ours: mmengine looks
            for ``dinomamba_mm.utils.register_all_modules`` in a registry without locations of
            a scope in its package map, and warns that "dinomamba_mm is not installed" when
            there is none.
    """

    def __init__(self, name: str, parent: Registry, locations: Optional[List[str]] = None):
        super().__init__(name, parent=parent, scope=SCOPE, locations=locations or [__name__])

    def get(self, key: str) -> Optional[Type]:
        """The object registered as ``key`` (``'Name'`` or ``'scope.Name'``)."""
        scope, name = self.split_scope_key(key)
        if scope is None:
            self.import_from_location()
            run_scope_name = None if name in self.module_dict else self._run_scope()
            if run_scope_name is not None:
                # mmengine's root imports {scope}.registry and searches that scope's registry
                found = self.parent.get(f'{run_scope_name}.{name}')
                if found is not None:
                    return found
        return super().get(key)

    def import_from_location(self) -> None:
        """Import the locations (once), or say how to install mmcv when they need it."""
        try:
            super().import_from_location()
        except ImportError as error:
            if (error.name or '').split('.')[0] != 'mmcv':
                raise
            from .install_mmcv import mmcv_problem
            raise ImportError(f'the {self.name} registry of {SCOPE} imports '
                              f'{", ".join(self._locations)}: {mmcv_problem()}') from error

    def _run_scope(self) -> Optional[str]:
        """The run's scope, inside a build mmengine switched to ours."""
        current = DefaultScope.get_current_instance()
        if current is None or current.scope_name != self.scope:
            return None
        return run_scope()


# ``locations``: dinomamba_mm.checkpoints holds the initialisers and dinomamba_mm.analysis the
# class-token map models; tests/test_registry.py checks that the locations reach every
# registered class.

RUNNERS = PluginRegistry('runner', root.RUNNERS)
RUNNER_CONSTRUCTORS = PluginRegistry('runner constructor', root.RUNNER_CONSTRUCTORS)
LOOPS = PluginRegistry('loop', root.LOOPS)
STRATEGIES = PluginRegistry('strategy', root.STRATEGIES)
HOOKS = PluginRegistry('hook', root.HOOKS,
                       ['dinomamba_mm.engine.hooks', 'dinomamba_mm.engine.safeguards'])

DATASETS = PluginRegistry('dataset', root.DATASETS, ['dinomamba_mm.datasets'])
DATA_SAMPLERS = PluginRegistry('data sampler', root.DATA_SAMPLERS)
TRANSFORMS = PluginRegistry('transform', root.TRANSFORMS, ['dinomamba_mm.datasets'])
FUNCTIONS = PluginRegistry('function', root.FUNCTIONS, ['dinomamba_mm.engine.safeguards'])

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
