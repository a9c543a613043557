"""The 'dinomamba_mm' scope: reachable from every OpenMMLab scope, complete, and light to import.

Each check runs in a fresh interpreter, where nothing has imported the modules it looks for.
"""
import json
import os
import os.path as osp
import subprocess
import sys
import sysconfig

import pytest

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def run_probe(code: str, *args: str, cwd: str) -> dict:
    """Run ``code`` in a fresh interpreter; return the JSON it printed after 'RESULT '."""
    proc = subprocess.run([sys.executable, '-c', code, *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [line for line in proc.stdout.splitlines() if line.startswith('RESULT ')][-1]
    return json.loads(line[len('RESULT '):])


REGISTERED_PROBE = r"""
import importlib, json, pkgutil
import dinomamba_mm
from dinomamba_mm import registry
for info in pkgutil.walk_packages(dinomamba_mm.__path__, 'dinomamba_mm.'):
    if not info.name.endswith('triton_kernels'):  # needs TRITON_INTERPRET or a GPU to load
        importlib.import_module(info.name)
print('RESULT ' + json.dumps({
    name: dict(classes={key: obj.__module__ for key, obj in value.module_dict.items()},
               locations=value._locations)
    for name, value in vars(registry).items() if isinstance(value, registry.PluginRegistry)}))
"""


@pytest.fixture(scope='module')
def registered(tmp_path_factory):
    """``{registry: {classes: {name: module}, locations}}`` once every module is imported."""
    return run_probe(REGISTERED_PROBE, cwd=str(tmp_path_factory.mktemp('registered')))


def test_every_registered_class_lives_under_its_registry_locations(registered):
    """A registry imports its ``locations`` at its first lookup and nothing else."""
    assert len(registered['MODELS']['classes']) >= 9
    outside = {
        f'{registry_name}.{name}': module
        for registry_name, entry in registered.items()
        for name, module in entry['classes'].items()
        if not any(module.startswith(location + '.') for location in entry['locations'])}
    assert not outside, f'registered outside their registry\'s locations: {outside}'


# Nothing imports dinomamba_mm except the config's custom_imports.
REACH_PROBE = r"""
import importlib, json, sys
import mmengine.registry
from mmengine.config import Config
from mmengine.registry import init_default_scope

scope, cfg_path, expected = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
assert 'dinomamba_mm' not in sys.modules
cfg = Config.fromfile(cfg_path)          # custom_imports happens here
assert 'dinomamba_mm' in sys.modules
init_default_scope(scope)
registry_module = importlib.import_module(f'{scope}.registry')
ours = importlib.import_module('dinomamba_mm.registry')

found = {}
for registry_name, names in expected.items():
    theirs = getattr(registry_module, registry_name, getattr(mmengine.registry, registry_name))
    for name in names:
        obj = theirs.get(f'dinomamba_mm.{name}')
        found[f'{registry_name}.{name}'] = obj is not None and obj is \
            getattr(ours, registry_name).module_dict.get(name)

backbone = registry_module.MODELS.build(cfg.model)
found['built'] = type(backbone).__module__ + '.' + type(backbone).__name__
print('RESULT ' + json.dumps(found))
"""

CONFIG = """
custom_imports = dict(imports=['dinomamba_mm'], allow_failed_imports=False)
default_scope = '{scope}'
model = dict(type='dinomamba_mm.DinoVim',
             arch=dict(embed_dims=32, num_layers=2, d_state=8, headdim=8),
             img_size=32, patch_size=16)
"""


@pytest.mark.parametrize('scope', ['mmpretrain', 'mmseg', 'mmdet'])
def test_scope_reaches_every_registered_class(scope, registered, tmp_path):
    """From another scope, ``'dinomamba_mm.Name'`` finds every class, imported on demand."""
    cfg_path = tmp_path / 'cfg.py'
    cfg_path.write_text(CONFIG.replace('{scope}', scope))
    expected = {name: sorted(entry['classes'])
                for name, entry in registered.items() if entry['classes']}
    assert {'MODELS', 'HOOKS', 'TRANSFORMS', 'METRICS', 'FUNCTIONS'} <= set(expected)
    found = run_probe(REACH_PROBE, scope, str(cfg_path), json.dumps(expected),
                      cwd=str(tmp_path))
    assert found.pop('built') == 'dinomamba_mm.models.backbones.dinovim.DinoVim'
    missing = [name for name, ok in found.items() if not ok]
    assert not missing, f'not reachable from {scope}: {missing}'


RUN_SCOPE_PROBE = r"""
import json
from mmengine.registry import DefaultScope, init_default_scope
from dinomamba_mm.registry import MODELS, run_scope

result = [run_scope()]
init_default_scope('mmseg')
with DefaultScope.overwrite_default_scope('dinomamba_mm'):
    result.append(run_scope())
    with DefaultScope.overwrite_default_scope('dinomamba_mm'):
        result.append(run_scope())
        result.append(MODELS.get('EncoderDecoder').__module__)
    with DefaultScope.overwrite_default_scope('mmdet'):
        result.append(run_scope())
result.append(MODELS.get('EncoderDecoder'))
print('RESULT ' + json.dumps(result))
"""


def test_the_run_scope_is_found_below_our_scope(tmp_path):
    """Inside a build that mmengine switched to our scope, names we lack resolve in the scope
    the run set; this checks the mmengine behaviour that ``run_scope`` reads (0.10.7)."""
    assert run_probe(RUN_SCOPE_PROBE, cwd=str(tmp_path)) == [
        None, 'mmseg', 'mmseg', 'mmseg.models.segmentors.encoder_decoder', 'mmdet', None]


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


FRAMEWORKS = ('mmdet', 'mmpretrain.models', 'mmseg.models', 'mmdet.models', 'triton',
              'sklearn', 'matplotlib', 'transformers')

MMSEG_CONFIG_PROBE = r"""
import json, sys
from mmengine.config import Config
from mmengine.registry import MODELS, WEIGHT_INITIALIZERS

cfg = Config.fromfile(sys.argv[1])
backbone = cfg.model.backbone
backbone.init_cfg = None
MODELS.build(backbone)
WEIGHT_INITIALIZERS.get('dinomamba_mm.PaperCheckpoint')
print('RESULT ' + json.dumps(sorted(name for name in json.loads(sys.argv[2])
                                    if name in sys.modules)))
"""

MMSEG_PROBE = r"""
import json, sys
import mmseg.models
print('RESULT ' + json.dumps(sorted(name for name in json.loads(sys.argv[1])
                                    if name in sys.modules)))
"""


def test_the_plugin_parts_of_an_mmseg_config_import_nothing_mmseg_does_not(tmp_path):
    """Parsing an ADE20K config and building its DinoVim and checkpoint initialiser imports no
    framework or heavy library that mmseg's own model package does not import already (it does
    import mmdet and mmpretrain's models, so an mmseg run pays nothing for ours)."""
    config = osp.join(ROOT, 'configs', 'ade20k',
                      'upernet_dinovim-tiny-p16_paper-teacher_8xb2-amp-160k_ade20k-512x512.py')
    ours = run_probe(MMSEG_CONFIG_PROBE, config, json.dumps(FRAMEWORKS), cwd=str(tmp_path))
    mmseg = run_probe(MMSEG_PROBE, json.dumps(FRAMEWORKS), cwd=str(tmp_path))
    assert set(ours) <= set(mmseg), sorted(set(ours) - set(mmseg))


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



def site_packages_without(folder, prefixes) -> str:
    """A copy of this interpreter's site-packages (links) without the distributions whose
    names start with one of ``prefixes``: what a machine without them has installed."""
    site = sysconfig.get_paths()['purelib']
    os.makedirs(folder)
    for entry in os.listdir(site):
        if not entry.lower().startswith(tuple(prefixes)) and not entry.endswith('.pth'):
            os.symlink(osp.join(site, entry), osp.join(folder, entry))
    return folder


def run_without(code: str, prefixes, tmp_path) -> dict:
    """``run_probe`` in an interpreter whose site-packages lack ``prefixes`` (``python -S``:
    no .pth file either, so this checkout is the only dinomamba_mm)."""
    site = site_packages_without(str(tmp_path / 'site'), prefixes)
    proc = subprocess.run([sys.executable, '-S', '-c', code], capture_output=True, text=True,
                          cwd=str(tmp_path), timeout=600,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, site])))
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [line for line in proc.stdout.splitlines() if line.startswith('RESULT ')][-1]
    return json.loads(line[len('RESULT '):])


OPENMMLAB = ('mmengine', 'mmcv', 'mmpretrain', 'mmseg', 'mmdet')

SSD_ALONE_PROBE = r'''
import json, sys, torch
from dinomamba_mm.ops.ssd import ssd_scan
from dinomamba_mm.ops.ssd.naive import ssd_scan_naive
torch.manual_seed(0)
x = torch.randn(2, 37, 3, 4, dtype=torch.float64)
dt = torch.rand(2, 37, 3, dtype=torch.float64)
A = -torch.rand(3, dtype=torch.float64)
B, C = torch.randn(2, 2, 37, 1, 5, dtype=torch.float64)
error = (ssd_scan(x, dt, A, B, C, chunk_size=8) - ssd_scan_naive(x, dt, A, B, C)).abs().max()
print('RESULT ' + json.dumps([float(error), sorted(
    m for m in sys.modules if m.split('.')[0] in ('mmengine', 'mmcv', 'mmpretrain', 'mmseg',
                                                   'mmdet') or m == 'dinomamba_mm.registry')]))
'''


def test_the_ssd_op_imports_and_runs_without_openmmlab(tmp_path):
    """As mamba_ssm's ops: torch (and triton) alone, no mmengine, no mmcv installed."""
    error, loaded = run_without(SSD_ALONE_PROBE, OPENMMLAB, tmp_path)
    assert error < 1e-12 and loaded == []


MISSING_MMCV_PROBE = r'''
import json
import dinomamba_mm
from dinomamba_mm.registry import HOOKS, MODELS
result = [HOOKS.get('NonFiniteStepHook').__name__]
try:
    MODELS.get('DinoVim')
except ImportError as error:
    result.append(str(error))
print('RESULT ' + json.dumps(result))
'''


def test_import_needs_no_mmcv_and_the_first_lookup_that_does_names_the_install_command(
        tmp_path):
    hook, error = run_without(MISSING_MMCV_PROBE, ('mmcv', ), tmp_path)
    assert hook == 'NonFiniteStepHook'  # the safeguards need no mmcv
    assert 'mmcv is not installed' in error
    assert '`python -m dinomamba_mm.install_mmcv`' in error


NO_COMPILED_OPS_PROBE = r'''
import importlib.abc, json, sys, warnings


class NoCompiledOps(importlib.abc.MetaPathFinder):
    """mmcv without its compiled ops (mmcv-lite, or ops built for another torch)."""
    def find_spec(self, fullname, path=None, target=None):
        if fullname == 'mmcv._ext' or fullname.startswith('mmcv.ops'):
            raise ModuleNotFoundError(f'No module named {fullname!r}', name=fullname)


sys.meta_path.insert(0, NoCompiledOps())
import torch
warnings.simplefilter('ignore')  # mmcv.cnn.bricks.transformer: "install mmcv, not mmcv-lite"
from dinomamba_mm.registry import MODELS
backbone = MODELS.build(dict(type='DinoVim', arch=dict(embed_dims=32, num_layers=2, d_state=8,
                                                       headdim=8), img_size=32, patch_size=16))
(out, ) = backbone(torch.randn(2, 3, 32, 32))
print('RESULT ' + json.dumps([list(out.shape), bool(torch.isfinite(out).all()),
                              [m for m in sys.modules if m.startswith('mmcv.ops')]]))
'''


def test_dinovim_needs_no_compiled_mmcv_op(tmp_path):
    """mmcv.cnn's PatchEmbed and DropPath import without mmcv._ext (mmcv-lite, or a wheel whose
    ops do not load): only mmcv.cnn.bricks.transformer's optional import of mmcv.ops fails."""
    shape, finite, ops = run_probe(NO_COMPILED_OPS_PROBE, cwd=str(tmp_path))
    assert shape == [2, 32] and finite and ops == []


PACKAGE_MAP_PROBE = r'''
import json, os.path as osp
import dinomamba_mm
from mmengine.config.utils import MODULE2PACKAGE
from mmengine.utils import get_installed_path, is_installed
target = MODULE2PACKAGE['dinomamba_mm']
print('RESULT ' + json.dumps([target, is_installed(target),
                              get_installed_path(target) == osp.dirname(dinomamba_mm.__file__)]))
'''


def test_our_package_map_entry_resolves_to_this_package(tmp_path):
    """mmengine 0.10.7 locates a name that is no installed distribution at the folder of the
    module importlib finds: our entry reaches the package imported, whatever the install
    (here a checkout on PYTHONPATH while the editable install of another one is in
    site-packages), with mmengine's own get_installed_path."""
    assert run_probe(PACKAGE_MAP_PROBE, cwd=str(tmp_path)) == ['dinomamba_mm.registry', True,
                                                               True]


MODELS_ALONE_PROBE = r'''
import json, sys
import dinomamba_mm.models  # noqa: F401
print('RESULT ' + json.dumps(sorted(m for m in sys.modules if m.startswith('dinomamba_mm.engine'))))
'''


def test_the_models_do_not_import_the_engine(tmp_path):
    """The training safeguards (and the schedules) are the Runner's business: a model never
    needs them."""
    assert run_probe(MODELS_ALONE_PROBE, cwd=str(tmp_path)) == []
