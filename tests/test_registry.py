"""The 'dinomamba_mm' scope: reachable from every OpenMMLab scope, complete, and light to import.

Each check runs in a fresh interpreter, where nothing has imported the modules it looks for.
"""
import json
import os.path as osp
import subprocess
import sys

import pytest

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def run_probe(code: str, *args: str, cwd: str) -> dict:
    """Run ``code`` in a fresh interpreter; return the JSON it printed after 'RESULT '."""
    proc = subprocess.run([sys.executable, '-c', code, *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [line for line in proc.stdout.splitlines() if line.startswith('RESULT ')][-1]
    return json.loads(line[len('RESULT '):])


# Nothing imports dinomamba_mm except the config's custom_imports.
REACH_PROBE = r'''
import importlib, json, sys
import mmengine.registry
from mmengine.config import Config
from mmengine.registry import init_default_scope

scope, cfg_path = sys.argv[1], sys.argv[2]
assert 'dinomamba_mm' not in sys.modules
cfg = Config.fromfile(cfg_path)          # custom_imports happens here
assert 'dinomamba_mm' in sys.modules
init_default_scope(scope)
registry_module = importlib.import_module(f'{scope}.registry')
ours = importlib.import_module('dinomamba_mm.registry')

found = {}
for name in ('MODELS', 'METRICS', 'HOOKS', 'TRANSFORMS', 'FUNCTIONS', 'WEIGHT_INITIALIZERS',
             'OPTIM_WRAPPER_CONSTRUCTORS'):
    theirs = getattr(registry_module, name, getattr(mmengine.registry, name))
    for module_name in getattr(ours, name).modules:
        found[f'{name}.{module_name}'] = theirs.get(f'dinomamba_mm.{module_name}') is \
            getattr(ours, name).get(module_name)

backbone = registry_module.MODELS.build(cfg.model)
found['built'] = type(backbone).__module__ + '.' + type(backbone).__name__
print('RESULT ' + json.dumps(found))
'''

CONFIG = '''
custom_imports = dict(imports=['dinomamba_mm'], allow_failed_imports=False)
default_scope = '{scope}'
model = dict(type='dinomamba_mm.DinoVim',
             arch=dict(embed_dims=32, num_layers=2, d_state=8, headdim=8),
             img_size=32, patch_size=16)
'''


@pytest.mark.parametrize('scope', ['mmpretrain', 'mmseg', 'mmdet'])
def test_scope_reaches_every_registered_module(scope, tmp_path):
    cfg_path = tmp_path / 'cfg.py'
    cfg_path.write_text(CONFIG.replace('{scope}', scope))
    found = run_probe(REACH_PROBE, scope, str(cfg_path), cwd=str(tmp_path))
    assert found.pop('built') == 'dinomamba_mm.models.backbones.dinovim.DinoVim'
    missing = [name for name, ok in found.items() if not ok]
    assert not missing, f'not reachable from {scope}: {missing}'
    kinds = {name.split('.')[0] for name in found}
    assert {'MODELS', 'HOOKS', 'TRANSFORMS', 'METRICS', 'FUNCTIONS'} <= kinds


COMPLETENESS_PROBE = r'''
import importlib, json, pkgutil
import dinomamba_mm
from dinomamba_mm.registry import PluginRegistry
registry = importlib.import_module('dinomamba_mm.registry')
for info in pkgutil.walk_packages(dinomamba_mm.__path__, 'dinomamba_mm.'):
    if not info.name.endswith('triton_kernels'):  # needs TRITON_INTERPRET or a GPU to load
        importlib.import_module(info.name)
result = {}
for name, value in vars(registry).items():
    if isinstance(value, PluginRegistry):
        result[name] = dict(
            registered={key: obj.__module__ for key, obj in value.module_dict.items()},
            declared=value.modules)
print('RESULT ' + json.dumps(result))
'''


def test_every_registered_name_is_declared_with_its_module(tmp_path):
    """The lazy lookup imports ``modules[name]``: after importing every module of the package,
    each registry holds exactly the declared names, each from the declared module."""
    result = run_probe(COMPLETENESS_PROBE, cwd=str(tmp_path))
    for registry_name, entry in result.items():
        assert entry['registered'] == entry['declared'], registry_name
    assert len(result['MODELS']['declared']) >= 9


LIGHT_IMPORT_PROBE = r'''
import json, sys
import dinomamba_mm
print('RESULT ' + json.dumps(sorted(
    name for name in ('mmcv', 'mmpretrain', 'mmseg', 'mmdet', 'triton', 'sklearn',
                      'matplotlib', 'torchvision', 'dinomamba_mm.models')
    if name in sys.modules)))
'''


def test_import_loads_no_framework_and_no_heavy_library(tmp_path):
    assert run_probe(LIGHT_IMPORT_PROBE, cwd=str(tmp_path)) == []


MMSEG_CONFIG_PROBE = r'''
import json, sys
from mmengine.config import Config
from mmengine.registry import MODELS, OPTIM_WRAPPER_CONSTRUCTORS, WEIGHT_INITIALIZERS

cfg = Config.fromfile(sys.argv[1])
backbone = cfg.model.backbone
backbone.init_cfg = None
MODELS.build(backbone)
WEIGHT_INITIALIZERS.get('dinomamba_mm.PaperCheckpoint')
print('RESULT ' + json.dumps(sorted(
    name for name in ('mmdet', 'mmpretrain.models', 'mmseg.models') if name in sys.modules)))
'''


def test_the_plugin_parts_of_an_mmseg_config_import_no_mmdet(tmp_path):
    """Parsing an ADE20K config and building its DinoVim and checkpoint initialiser imports
    neither mmdet nor the mmpretrain model zoo (which imports mmdet). mmseg's own
    ``mmseg.models`` does import mmdet (its MaskFormer heads), so a whole mmseg model does."""
    config = osp.join(ROOT, 'configs', 'ade20k',
                      'upernet_dinovim-t-p16_paper-teacher_8xb2-amp-160k_ade20k-512x512.py')
    assert run_probe(MMSEG_CONFIG_PROBE, config, cwd=str(tmp_path)) == []


def test_configs_inherit_from_the_installed_package(tmp_path, mim_links):
    """``_base_ = 'dinomamba_mm::...'`` resolves through the package's .mim folder once the
    package is imported (as tools/train.py does before parsing), from any working directory:
    run in a fresh interpreter in tmp_path, where no egg-info of the checkout is on sys.path.
    """
    cfg_path = tmp_path / 'child.py'
    cfg_path.write_text(
        "_base_ = ['dinomamba_mm::_base_/models/dino_dinovim-base.py',\n"
        "          'dinomamba_mm::_base_/datasets/synthetic_cls.py']\n"
        "model = dict(backbone=dict(arch='tiny'))\n")
    probe = ('import json, sys; import dinomamba_mm; from mmengine.config import Config; '
             'cfg = Config.fromfile(sys.argv[1]); '
             'print("RESULT", json.dumps([cfg.model.backbone.type, cfg.model.backbone.arch, '
             'cfg.train_dataloader.dataset.data_root]))')
    assert run_probe(probe, str(cfg_path), cwd=str(tmp_path)) == [
        'dinomamba_mm.DinoVim', 'tiny', 'data/synthetic/cls']
