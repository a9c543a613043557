"""LinearProbeClassifier: the paper's released teacher + the linear head eval_linear writes.

Files are written here in the paper code's formats (main_dino's checkpoint.pth, eval_linear's
checkpoint.pth.tar, tests/helpers/paper_files.py). The oracle is the paper's eval_linear written
out: concatenate the final-normed class tokens of the last n blocks of the teacher (loaded on its
own) and apply ``x @ W.T + b``.
"""
import os.path as osp
import sys
import urllib.error

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmpretrain import get_model
from mmpretrain.apis import ImageClassificationInferencer
from PIL import Image

from dinomamba_mm.checkpoints import CheckpointError, model_zoo
from dinomamba_mm.models.backbones import FrozenBackbone

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(ROOT, 'tests'))
from helpers.paper_files import paper_backbone, paper_dino_checkpoint, paper_linear_head  # noqa
from helpers.tiny_cls_data import write_tiny_cls_dataset  # noqa: E402
from helpers.tools import load_tool  # noqa: E402

ARCH = dict(embed_dims=32, num_layers=4, headdim=8, d_state=8)
BLOCKS, CLASSES = 2, 2
BACKBONE = dict(type='dinomamba_mm.DinoVim', arch=ARCH, img_size=32, token_layout='paper',
                out_type='cls_token', out_source='mixer', out_indices=list(range(-BLOCKS, 0)),
                drop_path_rate=0.)


def classifier_config(teacher: str, in_channels: int = BLOCKS * ARCH['embed_dims'],
                      data_root: str = '') -> Config:
    pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
    return Config(dict(
        default_scope='mmpretrain',
        custom_imports=dict(imports=['dinomamba_mm'], allow_failed_imports=False),
        model=dict(
            type='dinomamba_mm.LinearProbeClassifier',
            data_preprocessor=dict(num_classes=CLASSES, mean=[0., 0., 0.], std=[1., 1., 1.]),
            backbone=dict(type='dinomamba_mm.FrozenBackbone', checkpoint=teacher,
                          backbone=BACKBONE),
            neck=dict(type='dinomamba_mm.LinearProbeNeck', in_type='cls_token'),
            head=dict(type='LinearClsHead', num_classes=CLASSES, in_channels=in_channels,
                      topk=(1, ), loss=dict(type='CrossEntropyLoss'))),
        test_dataloader=dict(
            batch_size=4, num_workers=0,
            dataset=dict(type='CustomDataset', data_root=data_root, ann_file='ann.txt',
                         data_prefix='', with_label=True, pipeline=pipeline),
            sampler=dict(type='DefaultSampler', shuffle=False)),
        test_evaluator=dict(type='Accuracy', topk=(1, )),
        test_cfg=dict(),
        default_hooks=dict(backbone_layout=dict(type='dinomamba_mm.BackboneLayoutHook'))))


@pytest.fixture
def paper_files(tmp_path):
    """(teacher checkpoint.pth, eval_linear checkpoint.pth.tar, weight, bias) in one folder."""
    teacher = paper_backbone(0, patches=4, dim=ARCH['embed_dims'], depth=ARCH['num_layers'],
                             state=ARCH['d_state'], headdim=ARCH['headdim'])
    teacher_path = str(tmp_path / 'checkpoint.pth')
    torch.save(paper_dino_checkpoint(teacher), teacher_path)
    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(CLASSES, BLOCKS * ARCH['embed_dims'], generator=gen) * 0.1
    bias = torch.randn(CLASSES, generator=gen)
    head_path = str(tmp_path / 'checkpoint.pth.tar')
    torch.save(paper_linear_head(weight, bias), head_path)
    return teacher_path, head_path, weight, bias


def oracle_logits(teacher_path, weight, bias, images: torch.Tensor) -> torch.Tensor:
    backbone = FrozenBackbone(BACKBONE, checkpoint=teacher_path)
    backbone.init_weights()
    with torch.no_grad():
        features = torch.cat(backbone(images), dim=1)
    return features @ weight.T + bias


def test_get_model_loads_teacher_and_head_strictly(paper_files):
    teacher_path, head_path, weight, bias = paper_files
    model = get_model(classifier_config(teacher_path), pretrained=head_path)
    torch.testing.assert_close(model.head.fc.weight, weight)
    images = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(images, mode='tensor')
    torch.testing.assert_close(logits, oracle_logits(teacher_path, weight, bias, images))
    # every key of the model was filled: a strict load of the same file passes
    head = torch.load(head_path, weights_only=True)['state_dict']
    model.load_state_dict(head, strict=True)


def test_inferencer_predicts_with_the_released_head(paper_files, tmp_path):
    teacher_path, head_path, weight, bias = paper_files
    pixels = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    inferencer = ImageClassificationInferencer(classifier_config(teacher_path),
                                               pretrained=head_path)
    result = inferencer(pixels)[0]
    images = torch.from_numpy(pixels).permute(2, 0, 1)[None].float()
    expected = oracle_logits(teacher_path, weight, bias, images).softmax(dim=1)[0]
    np.testing.assert_allclose(result['pred_scores'], expected.numpy(), rtol=1e-5, atol=1e-6)


def test_tools_test_scores_the_released_head_without_training(paper_files, tmp_path):
    teacher_path, head_path, weight, bias = paper_files
    data = write_tiny_cls_dataset(str(tmp_path / 'data'), num_images=8, num_classes=CLASSES)
    config = str(tmp_path / 'classifier.py')
    classifier_config(teacher_path, data_root=data).dump(config)
    metrics = load_tool('tools/test.py').main([config, head_path, '--work-dir',
                                               str(tmp_path / 'work')])
    correct = 0
    with open(osp.join(data, 'ann.txt')) as f:
        for line in f:
            name, label = line.split()
            pixels = np.asarray(Image.open(osp.join(data, name)).convert('RGB'))[..., ::-1]
            image = torch.from_numpy(pixels.copy()).permute(2, 0, 1)[None].float()
            correct += int(oracle_logits(teacher_path, weight, bias, image).argmax() == int(label))
    assert metrics['accuracy/top1'] == pytest.approx(100. * correct / 8)


def test_a_head_of_another_width_is_a_clear_error(paper_files):
    teacher_path, head_path, _, _ = paper_files
    config = classifier_config(teacher_path, in_channels=3 * ARCH['embed_dims'])
    with pytest.raises(ValueError) as error:
        get_model(config, pretrained=head_path)
    message = str(error.value)
    assert '(2, 64)' in message and '(2, 96)' in message and 'another backbone' in message


def test_a_released_head_with_nan_is_refused_by_get_model(paper_files, tmp_path):
    teacher_path, _, weight, bias = paper_files
    head_path = str(tmp_path / 'nan_head.pth.tar')
    torch.save(paper_linear_head(weight.index_fill(1, torch.tensor([5]), float('nan')), bias),
               head_path)
    with pytest.raises(CheckpointError, match=r'NaN or Inf values: \[linear.weight\]'):
        get_model(classifier_config(teacher_path), pretrained=head_path)


def test_a_hugging_face_folder_without_a_head_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path))

    def not_found(url, dst, *args, **kwargs):
        raise urllib.error.HTTPError(url, 404, 'Not Found', {}, None)

    monkeypatch.setattr(torch.hub, 'download_url_to_file', not_found)
    url = model_zoo.PAPER_LINEAR_HEADS['dinomambareg-base']
    with pytest.raises(FileNotFoundError) as error:
        model_zoo.download(url)
    message = str(error.value)
    assert 'Mambar/Base/ holds no linear head' in message
    assert 'checkpoint.pth.tar' in message and 'none was released' in message
