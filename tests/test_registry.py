"""Configs of the three OpenMMLab scopes reach every dinomamba_mm module via custom_imports."""
import json
import os.path as osp
import subprocess
import sys

import pytest

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))

# Runs in a fresh interpreter: nothing imports dinomamba_mm except the config's custom_imports.
PROBE = r'''
import json, sys
from mmengine.config import Config
from mmengine.registry import DefaultScope, init_default_scope
import importlib

scope, cfg_path = sys.argv[1], sys.argv[2]
assert 'dinomamba_mm' not in sys.modules
cfg = Config.fromfile(cfg_path)          # custom_imports happens here
assert 'dinomamba_mm' in sys.modules
init_default_scope(scope)
registry_module = importlib.import_module(f'{scope}.registry')
ours = importlib.import_module('dinomamba_mm.registry')

found = {}
for name in ('MODELS', 'METRICS', 'HOOKS', 'TRANSFORMS', 'DATASETS',
             'OPTIM_WRAPPER_CONSTRUCTORS', 'PARAM_SCHEDULERS', 'LOOPS'):
    theirs = getattr(registry_module, name)
    for module_name, cls in getattr(ours, name).module_dict.items():
        found[f'{name}.{module_name}'] = theirs.get(f'dinomamba_mm.{module_name}') is cls

backbone = registry_module.MODELS.build(cfg.model)
found['built'] = type(backbone).__module__ + '.' + type(backbone).__name__
found['params'] = sum(p.numel() for p in backbone.parameters())
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
    proc = subprocess.run([sys.executable, '-c', PROBE, scope, str(cfg_path)],
                          capture_output=True, text=True, cwd=str(tmp_path),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [l for l in proc.stdout.splitlines() if l.startswith('RESULT ')][-1]
    found = json.loads(line[len('RESULT '):])
    assert found.pop('built') == 'dinomamba_mm.models.backbones.dinovim.DinoVim'
    assert found.pop('params') > 0
    missing = [name for name, ok in found.items() if not ok]
    assert not missing, f'not reachable from {scope}: {missing}'
    # The registries a later issue relies on are populated, not just reachable.
    kinds = {name.split('.')[0] for name in found}
    assert {'MODELS', 'HOOKS', 'TRANSFORMS', 'METRICS'} <= kinds


def test_configs_inherit_from_the_installed_package(tmp_path):
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
    proc = subprocess.run([sys.executable, '-c', probe, str(cfg_path)], capture_output=True,
                          text=True, cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [l for l in proc.stdout.splitlines() if l.startswith('RESULT ')][-1]
    assert json.loads(line[len('RESULT '):]) == ['dinomamba_mm.DinoVim', 'tiny',
                                                 'data/synthetic/cls']
