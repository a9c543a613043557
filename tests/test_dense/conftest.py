"""Fixtures of the dense-prediction tests: a tiny synthetic dataset."""
import importlib.util
import os.path as osp
import sys

import pytest

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
