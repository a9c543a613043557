"""Suite-wide fixtures."""
import pytest
from mmengine.registry import DefaultScope


@pytest.fixture(autouse=True)
def isolated_default_scope():
    """Undo any mmengine default scope a test sets (init_default_scope, Runner, ...).

    The default scope is process-global: left set by one test, it redirects registry lookups of
    every later test (e.g. ``MODELS.build(dict(type='DINO'))`` searched in mmpretrain's scope).
    """
    before = dict(DefaultScope._instance_dict)
    yield
    DefaultScope._instance_dict.clear()
    DefaultScope._instance_dict.update(before)
