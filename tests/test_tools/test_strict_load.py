"""tools/test.py and tools/train.py refuse a checkpoint of another model instead of scoring or
training random weights, and name a bad checkpoint file before building anything.

The checkpoints are written here from models built by hand: the right one, one of another width,
a DINO checkpoint and an mmpretrain ViT classifier's.
"""
import os.path as osp
import re
import sys

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmengine.runner import Runner

import dinomamba_mm  # noqa: F401
from dinomamba_mm.registry import MODELS

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(ROOT, 'tests'))
from helpers.tiny_cls_data import write_tiny_cls_dataset  # noqa: E402
from helpers.tools import load_tool  # noqa: E402

test_tool = load_tool('tools/test.py')
train_tool = load_tool('tools/train.py')


def backbone(width):
    return dict(type='dinomamba_mm.DinoVim', img_size=32, patch_size=8,
                arch=dict(embed_dims=width, num_layers=2, headdim=8, d_state=4))


def classifier(width=16, backbone_cfg=None):
    return dict(type='ImageClassifier', backbone=backbone_cfg or backbone(width),
                head=dict(type='LinearClsHead', num_classes=2, in_channels=width,
                          loss=dict(type='CrossEntropyLoss')))


CONFIG = '''
default_scope = 'mmpretrain'
custom_imports = dict(imports=['dinomamba_mm'], allow_failed_imports=False)
model = {model}
data_preprocessor = dict(num_classes=2, mean=[127.5] * 3, std=[127.5] * 3)
test_dataloader = dict(
    batch_size=4, num_workers=0, sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type='CustomDataset', data_root='{data}', ann_file='ann.txt', data_prefix='',
                 with_label=True, pipeline=[dict(type='LoadImageFromFile'),
                                            dict(type='PackInputs')]))
test_evaluator = dict(type='Accuracy', topk=(1, ))
test_cfg = dict()
'''


def save(path, model_cfg):
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(model_cfg)
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, str(path))
    return str(path)


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp('strict')
    data = write_tiny_cls_dataset(str(root / 'data'), num_images=4, size=32)
    config = root / 'config.py'
    config.write_text(CONFIG.format(model=classifier(), data=data))
    dino = dict(type='dinomamba_mm.DINO', backbone=dict(backbone(16), out_type='cls_token'),
                neck=dict(type='dinomamba_mm.DINOProjectionHead', in_channels=16,
                          out_channels=8, hidden_channels=16, bottleneck_channels=8),
                head=dict(type='dinomamba_mm.DINOLossHead', out_channels=8))
    vit = classifier(backbone_cfg=dict(type='VisionTransformer', img_size=32, patch_size=8,
                                       arch=dict(embed_dims=16, num_layers=2, num_heads=2,
                                                 feedforward_channels=32)))
    return dict(config=str(config), root=root,
                right=save(root / 'right.pth', classifier()),
                wider=save(root / 'wider.pth', classifier(32)),
                dino=save(root / 'dino.pth', dino),
                vit=save(root / 'vit.pth', vit))


def run_test(setup, checkpoint, *options):
    return test_tool.main([setup['config'], checkpoint, '--work-dir',
                           str(setup['root'] / 'work'), *options])


def test_the_right_checkpoint_is_scored(setup):
    assert 0 <= run_test(setup, setup['right'])['accuracy/top1'] <= 100


@pytest.mark.parametrize('name, expected', [
    ('wider', ['does not match ImageClassifier: ', 'tensors have another shape: size mismatch '
               'for backbone.cls_token: (1, 1, 32) in the checkpoint, (1, 1, 16) in the model']),
    ('dino', ['does not match ImageClassifier: 2 keys of the model are missing: '
              '[head.fc.weight, head.fc.bias]; 54 keys are not in the model: [momentum, '
              'neck.mlp.0.weight', "Hint: the checkpoint holds 35 of the 37 expected keys "
              "under the prefix 'teacher.'"]),
    # ViT and DinoVim share the embeddings' names and shapes, not the blocks'
    ('vit', ['does not match ImageClassifier: 31 keys of the model are missing: '
             '[backbone.layers.0.norm.weight, backbone.layers.0.mixer.dt_bias',
             '26 keys are not in the model: [backbone.layers.0.ln1.weight']),
])
def test_another_models_checkpoint_is_an_error(setup, name, expected):
    """tools/test.py used to score these with random weights and exit 0."""
    with pytest.raises(ValueError) as info:
        run_test(setup, setup[name])
    message = str(info.value)
    assert message.startswith(f"checkpoint '{setup[name]}' does not match ImageClassifier: ")
    for part in expected:
        assert part in message
    assert message.endswith('Pass --no-strict-load to tools/train.py / tools/test.py (or drop '
                            'dinomamba_mm.StrictLoadHook from custom_hooks) to load it anyway, '
                            'the missing tensors keeping their initial values')


def test_no_strict_load_opts_out(setup):
    assert 'accuracy/top1' in run_test(setup, setup['dino'], '--no-strict-load')


@pytest.mark.parametrize('content, problem', [
    (None, 'does not exist'), (b'', 'is empty (0 bytes)'),
    (b'not a checkpoint', "is not a PyTorch checkpoint but text, starting with 'not a")])
def test_a_bad_file_is_named_before_anything_is_built(setup, monkeypatch, content, problem):
    path = setup['root'] / f'bad_{len(content or b"x")}.pth'
    if content is not None:
        path.write_bytes(content)

    def no_build(*args, **kwargs):
        raise AssertionError('the runner (model, data) was built before the check')

    monkeypatch.setattr(Runner, 'from_cfg', classmethod(no_build))
    error = FileNotFoundError if content is None else ValueError
    with pytest.raises(error, match=re.escape(f"checkpoint '{path}' {problem}")):
        run_test(setup, str(path))
    with pytest.raises(error, match=re.escape(f"load_from checkpoint '{path}' {problem}")):
        train_tool.main([setup['config'], '--work-dir', str(setup['root'] / 'train'),
                         '--cfg-options', f'load_from={path}'])
    with pytest.raises(error, match=re.escape(f"--resume checkpoint '{path}' {problem}")):
        train_tool.main([setup['config'], '--work-dir', str(setup['root'] / 'train'),
                         '--resume', str(path)])


def test_train_adds_the_hook_unless_told_not_to(setup):
    def hooks(*options):
        args = train_tool.parse_args([setup['config'], *options])
        cfg = train_tool.merge_args(Config.fromfile(setup['config']), args)
        return [h['type'] for h in cfg.get('custom_hooks', [])]

    assert hooks() == ['dinomamba_mm.StrictLoadHook', 'dinomamba_mm.SafeUnpickleHook',
                       'dinomamba_mm.PreemptionHook']
    assert hooks('--no-strict-load') == ['dinomamba_mm.SafeUnpickleHook',
                                         'dinomamba_mm.PreemptionHook']


def test_a_checkpoint_with_flipped_bytes_is_not_scored(setup):
    """64 flipped bytes inside a tensor were loaded and scored, rc 0."""
    sys.path.insert(0, osp.join(ROOT, 'tests', 'test_checkpoints'))
    from test_checks import flip_bytes_in_a_tensor
    path = setup['root'] / 'flipped.pth'
    path.write_bytes(open(setup['right'], 'rb').read())
    record = flip_bytes_in_a_tensor(str(path))
    with pytest.raises(ValueError, match=re.escape(f"'{path}' is corrupt: its record "
                                                   f"{record!r} fails its CRC check")):
        run_test(setup, str(path))


def test_a_checkpoint_with_a_nan_head_is_refused_unless_allowed(setup):
    """A NaN head was scored at 0 % with rc 0."""
    checkpoint = torch.load(setup['right'])
    checkpoint['state_dict']['head.fc.weight'][0, 0] = float('nan')
    path = str(setup['root'] / 'nan.pth')
    torch.save(checkpoint, path)
    with pytest.raises(ValueError, match=r'1 tensors hold NaN or Inf values: \[head.fc.weight\]'):
        run_test(setup, path)
    assert 'accuracy/top1' in run_test(setup, path, '--allow-non-finite')
