"""Fixtures of the dense-prediction tests: a tiny synthetic dataset, one torch thread."""
import importlib.util
import os.path as osp
import sys

import pytest
import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from dense_helpers import DET_SIZE, NUM_TRAIN, NUM_VAL, REPO, SEG_SIZE  # noqa: E402


def _load_generator():
    path = osp.join(REPO, 'tools', 'data', 'make_synthetic.py')
    spec = importlib.util.spec_from_file_location('make_synthetic_for_dense_tests', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='session')
def tiny_synthetic(tmp_path_factory) -> str:
    """A 4 train / 2 val synthetic set: ADE layout at 64 px, COCO layout at 96 px."""
    root = str(tmp_path_factory.mktemp('dense_synthetic'))
    _load_generator().make_synthetic(root, seed=5, num_train=NUM_TRAIN, num_val=NUM_VAL,
                                     seg_size=SEG_SIZE, det_size=DET_SIZE,
                                     layouts=('ade', 'coco'))
    return root


@pytest.fixture
def one_thread():
    """Tiny models run faster on one thread on this shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def plain_config_text(monkeypatch):
    """The Runner logs and dumps its config through yapf (Config.pretty_text), which takes
    longer than 2 tiny iterations; the tests read neither, so skip the formatting."""
    from mmengine import Config
    monkeypatch.setattr(Config, 'pretty_text',
                        property(lambda self: repr(self.to_dict())))
