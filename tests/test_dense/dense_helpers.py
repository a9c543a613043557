"""Tiny versions of the demo configs for the dense-prediction tests."""
import os.path as osp

from mmengine import Config

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
ADE_DEMO = osp.join(REPO, 'configs', 'demo', 'upernet_dinovim-demo_synthetic-ade.py')
COCO_DEMO = osp.join(REPO, 'configs', 'demo',
                     'cascade-mask-rcnn_dinovim-demo_synthetic-coco.py')
SEG_SIZE, DET_SIZE = 64, 96
NUM_TRAIN, NUM_VAL = 4, 2


def _cpu_loaders(cfg: Config, data_root: str, batch_size: int) -> None:
    for name in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        loader = cfg[name]
        loader.num_workers = 0
        loader.persistent_workers = False
        loader.dataset.data_root = data_root
    cfg.train_dataloader.batch_size = batch_size


def _set_scales(pipeline, scale, crop=None) -> None:
    for step in pipeline:
        if step['type'] in ('RandomResize', 'Resize'):
            step['scale'] = scale
        if crop is not None and step['type'] == 'RandomCrop':
            step['crop_size'] = crop


def tiny_ade_cfg(data_root: str, work_dir: str, max_iters: int = 2) -> Config:
    """configs/demo/upernet_dinovim-demo_synthetic-ade.py at 64 px, 2 images a step, no val in
    training, no workers."""
    cfg = Config.fromfile(ADE_DEMO)
    cfg.work_dir = work_dir
    crop = (SEG_SIZE, SEG_SIZE)
    _cpu_loaders(cfg, osp.join(data_root, 'ade'), batch_size=2)
    _set_scales(cfg.train_dataloader.dataset.pipeline, (4 * SEG_SIZE, SEG_SIZE), crop)
    _set_scales(cfg.val_dataloader.dataset.pipeline, (4 * SEG_SIZE, SEG_SIZE))
    cfg.test_dataloader = cfg.val_dataloader
    cfg.model.data_preprocessor.size = crop
    cfg.model.backbone.img_size = crop
    cfg.model.test_cfg = dict(mode='slide', crop_size=crop, stride=(43, 43))
    cfg.train_cfg.max_iters = max_iters
    cfg.train_cfg.val_interval = 10**6
    cfg.default_hooks.logger.interval = 1
    cfg.default_hooks.checkpoint.interval = 10**6
    cfg.log_level = 'WARNING'
    return cfg


def tiny_coco_cfg(data_root: str, work_dir: str, max_iters: int = 2) -> Config:
    """configs/demo/cascade-mask-rcnn_dinovim-demo_synthetic-coco.py at 96 px with fewer proposals
    and sampled RoIs, 2 images a step, no val in training, no workers."""
    cfg = Config.fromfile(COCO_DEMO)
    cfg.work_dir = work_dir
    size = (DET_SIZE, DET_SIZE)
    _cpu_loaders(cfg, osp.join(data_root, 'coco'), batch_size=2)
    _set_scales(cfg.train_dataloader.dataset.pipeline, size, size)
    _set_scales(cfg.val_dataloader.dataset.pipeline, size)
    ann_file = osp.join(data_root, 'coco', 'annotations', 'instances_val2017.json')
    cfg.val_evaluator.ann_file = ann_file
    cfg.test_evaluator = cfg.val_evaluator
    cfg.test_dataloader = cfg.val_dataloader
    cfg.model.backbone.img_size = size
    cfg.model.train_cfg.rpn_proposal.update(nms_pre=200, max_per_img=100)
    for stage in cfg.model.train_cfg.rcnn:
        stage.sampler.num = 64
    cfg.model.test_cfg.rpn.update(nms_pre=200, max_per_img=50)
    cfg.model.test_cfg.rcnn.max_per_img = 20
    cfg.train_cfg.max_iters = max_iters
    cfg.train_cfg.val_interval = 10**6
    cfg.default_hooks.logger.interval = 1
    cfg.default_hooks.checkpoint.interval = 10**6
    cfg.log_level = 'WARNING'
    return cfg
