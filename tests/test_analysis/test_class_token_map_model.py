"""ClassTokenMapModel in an mmseg-style test step feeding the BinaryAUC evaluator."""
import numpy as np
import pytest
import torch
from mmengine.evaluator import Evaluator
from mmengine.structures import PixelData
from mmseg.structures import SegDataSample

import dinomamba_mm.analysis  # noqa: F401  (registers ClassTokenMapModel)
from dinomamba_mm.analysis import extract_class_token_maps
from dinomamba_mm.registry import MODELS

BACKBONE = dict(type='mmpretrain.VisionTransformer',
                arch=dict(embed_dims=32, num_layers=2, num_heads=4, feedforward_channels=64),
                img_size=32, patch_size=8)


def _batch():
    rng = np.random.default_rng(0)
    inputs, samples = [], []
    for height, width in ((24, 30), (24, 30)):
        inputs.append(torch.from_numpy(rng.integers(0, 256, (3, height, width), dtype=np.uint8)))
        sample = SegDataSample(metainfo=dict(img_shape=(height, width),
                                             ori_shape=(height, width)))
        label = np.zeros((height, width), dtype=np.int64)
        label[4:16, 6:18] = 3
        sample.gt_sem_seg = PixelData(data=torch.from_numpy(label)[None])
        samples.append(sample)
    return dict(inputs=inputs, data_samples=samples)


def test_test_step_writes_maps_and_evaluates():
    torch.manual_seed(0)
    model = MODELS.build(dict(
        type='dinomamba_mm.ClassTokenMapModel', backbone=BACKBONE, map_type='attention',
        layer_indices=[0, -1],
        data_preprocessor=dict(type='mmseg.SegDataPreProcessor', mean=[123.7, 116.3, 103.5],
                               std=[58.4, 57.1, 57.4], pad_val=0, seg_pad_val=255,
                               test_cfg=dict(size_divisor=8))))
    model.eval()
    outputs = model.test_step(_batch())
    assert outputs[0].pred_map.shape == (2, 4, 3, 4)  # padded input 24 x 32, patches of 8
    assert outputs[0].map_layer_ids == [0, 1]
    assert outputs[0].map_names == ['head0', 'head1', 'head2', 'head3']
    assert tuple(outputs[0].map_extent) == (24, 32)
    preprocessed = model.data_preprocessor(_batch(), False)
    expected = extract_class_token_maps(model.backbone, preprocessed['inputs'], [0, 1],
                                        'attention')
    torch.testing.assert_close(outputs[1].pred_map, expected.maps[1])

    evaluator = Evaluator(dict(type='dinomamba_mm.BinaryAUC', mode='binned'))
    evaluator.process(outputs)
    metrics = evaluator.evaluate(2)
    assert metrics['binary_auc/num_images'] == 2
    assert 0 <= metrics['binary_auc/layer1_head3'] <= 1
    assert set(k for k in metrics if k.startswith('binary_auc/layer')) == {
        'binary_auc/layer0', 'binary_auc/layer1',
        *(f'binary_auc/layer{layer}_head{h}' for layer in (0, 1) for h in range(4))}


def test_only_predict_mode():
    model = MODELS.build(dict(type='dinomamba_mm.ClassTokenMapModel', backbone=BACKBONE))
    with pytest.raises(ValueError, match="mode must be 'predict'"):
        model(torch.zeros(1, 3, 32, 32), mode='loss')
