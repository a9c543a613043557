"""UperNet on DinoVim through mmengine's Runner on the synthetic ADE layout: the backbone starts
exactly at a (paper-format) teacher checkpoint, 2 training iterations move it, mIoU comes out,
and images whose sides are not multiples of 16 are padded by the data preprocessor."""
import os.path as osp
import sys

import numpy as np
import torch
from dense_helpers import SEG_SIZE, tiny_ade_cfg
from mmengine.config import ConfigDict
from mmengine.hooks import Hook
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))
from helpers.paper_files import ours_to_paper  # noqa: E402


class _BackboneAtTrainStart(Hook):
    """Copies the backbone's state when training starts (after init_weights)."""

    def before_train(self, runner) -> None:
        self.state = {k: v.detach().clone()
                      for k, v in runner.model.backbone.state_dict().items()}


def _teacher_checkpoint(cfg, path: str) -> dict:
    """A DINO checkpoint in the paper's layout whose teacher backbone has fresh random weights;
    returns those weights in our key layout."""
    init_default_scope('mmseg')
    from mmseg.registry import MODELS
    donor = MODELS.build(cfg.model.backbone)
    with torch.no_grad():
        for param in donor.parameters():
            param.normal_()
    ours = {k: v.clone() for k, v in donor.state_dict().items()}
    paper = {f'backbone.{k}': v for k, v in ours_to_paper(ours).items()}
    torch.save({'teacher': paper, 'student': {}}, path)
    return ours


def test_upernet_trains_from_the_teacher_and_reports_miou(tiny_synthetic, tmp_path,
                                                          one_thread, plain_config_text):
    cfg = tiny_ade_cfg(tiny_synthetic, str(tmp_path / 'work'))
    cfg.model.backbone.token_layout = 'paper'  # as the paper checkpoints need
    checkpoint = str(tmp_path / 'teacher.pth')
    expected = _teacher_checkpoint(cfg, checkpoint)
    cfg.model.backbone.init_cfg = dict(type='dinomamba_mm.PaperCheckpoint',
                                       checkpoint=checkpoint, source='teacher')

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
    assert set(metrics) >= {'mIoU', 'aAcc', 'mAcc'}
    assert 0.0 <= metrics['mIoU'] <= 100.0


def test_test_images_of_any_size_are_padded_not_rejected(tiny_synthetic, tmp_path,
                                                         one_thread):
    """A 70x45 image (no side a multiple of 16) runs whole and slide inference and gives a
    70x45 prediction: SegDataPreProcessor pads it to 80x48, the segmentor crops back."""
    from mmseg.registry import MODELS
    from mmseg.structures import SegDataSample
    cfg = tiny_ade_cfg(tiny_synthetic, str(tmp_path / 'work'))
    init_default_scope('mmseg')
    model = MODELS.build(cfg.model).eval()
    height, width = 70, 45
    image = torch.from_numpy(
        np.random.default_rng(0).integers(0, 256, (3, height, width), dtype=np.uint8))
    sample = SegDataSample(metainfo=dict(ori_shape=(height, width), img_shape=(height, width)))
    for mode in ('whole', 'slide'):
        model.test_cfg = ConfigDict(mode=mode, crop_size=(SEG_SIZE, SEG_SIZE),
                                    stride=(43, 43))
        with torch.no_grad():
            result = model.test_step(dict(inputs=[image], data_samples=[sample.clone()]))
        assert result[0].pred_sem_seg.data.shape == (1, height, width), mode
