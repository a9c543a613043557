"""Cascade Mask R-CNN on DinoVim through mmengine's Runner on the synthetic COCO layout: the
backbone starts exactly at a ViT-style teacher checkpoint, 2 training iterations move it, box
and mask AP come out, and odd image sizes are padded by the data preprocessor."""
import numpy as np
import torch
from dense_helpers import tiny_coco_cfg
from mmengine.hooks import Hook
from mmengine.registry import init_default_scope
from mmengine.runner import Runner


class _BackboneAtTrainStart(Hook):
    """Copies the backbone's state when training starts (after init_weights)."""

    def before_train(self, runner) -> None:
        self.state = {k: v.detach().clone()
                      for k, v in runner.model.backbone.state_dict().items()}


def test_cascade_trains_from_the_teacher_and_reports_box_and_mask_ap(
        tiny_synthetic, tmp_path, one_thread, plain_config_text):
    cfg = tiny_coco_cfg(tiny_synthetic, str(tmp_path / 'work'))
    init_default_scope('mmdet')
    from mmdet.registry import MODELS
    donor = MODELS.build(cfg.model.backbone)
    with torch.no_grad():
        for param in donor.parameters():
            param.normal_()
    expected = {k: v.clone() for k, v in donor.state_dict().items()}
    checkpoint = str(tmp_path / 'dino.pth')  # an mmengine DINO checkpoint: teacher.backbone.*
    torch.save({'state_dict': {f'teacher.backbone.{k}': v for k, v in expected.items()}},
               checkpoint)
    cfg.model.backbone.init_cfg = dict(type='dinomamba_mm.PaperCheckpoint',
                                       checkpoint=checkpoint, prefix='teacher.backbone.')

    runner = Runner.from_cfg(cfg)
    snapshot = _BackboneAtTrainStart()
    runner.register_hook(snapshot)
    runner.train()

    assert snapshot.state.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(snapshot.state[key], value), f'{key} was not loaded exactly'
    trained = runner.model.backbone.state_dict()
    moved = [k for k, v in expected.items() if not torch.equal(trained[k], v)]
    assert len(moved) == len(expected), sorted(set(expected) - set(moved))

    metrics = runner.val()
    for key in ('coco/bbox_mAP', 'coco/bbox_mAP_50', 'coco/segm_mAP', 'coco/segm_mAP_50'):
        assert 0.0 <= metrics[key] <= 1.0, key


def test_odd_sized_images_are_padded_to_the_stride(tiny_synthetic, tmp_path, one_thread):
    """A 75x100 image (75 not a multiple of 16) is padded to 96x128 by DetDataPreprocessor
    (pad_size_divisor=32) and gives boxes and masks in the 75x100 frame."""
    from mmdet.registry import MODELS
    from mmdet.structures import DetDataSample
    cfg = tiny_coco_cfg(tiny_synthetic, str(tmp_path / 'work'))
    init_default_scope('mmdet')
    model = MODELS.build(cfg.model).eval()
    height, width = 75, 100
    image = torch.from_numpy(
        np.random.default_rng(0).integers(0, 256, (3, height, width), dtype=np.uint8))
    sample = DetDataSample(metainfo=dict(ori_shape=(height, width), img_shape=(height, width),
                                         scale_factor=(1.0, 1.0)))
    with torch.no_grad():
        result = model.test_step(dict(inputs=[image], data_samples=[sample]))[0]
    instances = result.pred_instances
    assert instances.masks.shape[1:] == (height, width)
    boxes = instances.bboxes
    assert ((boxes[:, 0::2] >= 0) & (boxes[:, 0::2] <= width)).all()
    assert ((boxes[:, 1::2] >= 0) & (boxes[:, 1::2] <= height)).all()
