"""Registries of dinomamba_mm: children of mmengine's roots in scope 'dinomamba_mm'.

Because they hang off mmengine's roots, a config in any OpenMMLab scope (mmpretrain, mmseg,
mmdet) reaches them as ``type='dinomamba_mm.Name'`` once ``dinomamba_mm`` is imported
(``custom_imports=dict(imports=['dinomamba_mm'], allow_failed_imports=False)``).
"""
from mmengine.registry import DATA_SAMPLERS as MMENGINE_DATA_SAMPLERS
from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import EVALUATOR as MMENGINE_EVALUATOR
from mmengine.registry import FUNCTIONS as MMENGINE_FUNCTIONS
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import LOOPS as MMENGINE_LOOPS
from mmengine.registry import METRICS as MMENGINE_METRICS
from mmengine.registry import MODEL_WRAPPERS as MMENGINE_MODEL_WRAPPERS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import \
    OPTIM_WRAPPER_CONSTRUCTORS as MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import OPTIMIZERS as MMENGINE_OPTIMIZERS
from mmengine.registry import PARAM_SCHEDULERS as MMENGINE_PARAM_SCHEDULERS
from mmengine.registry import RUNNERS as MMENGINE_RUNNERS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import WEIGHT_INITIALIZERS as MMENGINE_WEIGHT_INITIALIZERS
from mmengine.registry import Registry

SCOPE = 'dinomamba_mm'

RUNNERS = Registry('runner', parent=MMENGINE_RUNNERS, scope=SCOPE)
LOOPS = Registry('loop', parent=MMENGINE_LOOPS, scope=SCOPE,
                 locations=['dinomamba_mm.engine'])
HOOKS = Registry('hook', parent=MMENGINE_HOOKS, scope=SCOPE,
                 locations=['dinomamba_mm.engine'])

DATASETS = Registry('dataset', parent=MMENGINE_DATASETS, scope=SCOPE,
                    locations=['dinomamba_mm.datasets'])
DATA_SAMPLERS = Registry('data sampler', parent=MMENGINE_DATA_SAMPLERS,
                         scope=SCOPE, locations=['dinomamba_mm.datasets'])
TRANSFORMS = Registry('transform', parent=MMENGINE_TRANSFORMS, scope=SCOPE,
                      locations=['dinomamba_mm.datasets'])
FUNCTIONS = Registry('function', parent=MMENGINE_FUNCTIONS, scope=SCOPE,
                     locations=['dinomamba_mm.datasets'])

MODELS = Registry('model', parent=MMENGINE_MODELS, scope=SCOPE,
                  locations=['dinomamba_mm.models'])
MODEL_WRAPPERS = Registry('model_wrapper', parent=MMENGINE_MODEL_WRAPPERS,
                          scope=SCOPE, locations=['dinomamba_mm.models'])
WEIGHT_INITIALIZERS = Registry('weight initializer',
                               parent=MMENGINE_WEIGHT_INITIALIZERS,
                               scope=SCOPE, locations=['dinomamba_mm.models'])

OPTIMIZERS = Registry('optimizer', parent=MMENGINE_OPTIMIZERS, scope=SCOPE,
                      locations=['dinomamba_mm.engine'])
OPTIM_WRAPPERS = Registry('optim_wrapper', parent=MMENGINE_OPTIM_WRAPPERS,
                          scope=SCOPE, locations=['dinomamba_mm.engine'])
OPTIM_WRAPPER_CONSTRUCTORS = Registry(
    'optimizer wrapper constructor',
    parent=MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS, scope=SCOPE,
    locations=['dinomamba_mm.engine'])
PARAM_SCHEDULERS = Registry('parameter scheduler',
                            parent=MMENGINE_PARAM_SCHEDULERS, scope=SCOPE,
                            locations=['dinomamba_mm.engine'])

METRICS = Registry('metric', parent=MMENGINE_METRICS, scope=SCOPE,
                   locations=['dinomamba_mm.evaluation'])
EVALUATOR = Registry('evaluator', parent=MMENGINE_EVALUATOR, scope=SCOPE,
                     locations=['dinomamba_mm.evaluation'])

