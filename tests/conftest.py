"""Suite-wide fixtures."""
import logging
import os
import os.path as osp

import pytest
import torch
from mmengine.logging import MMLogger
from mmengine.registry import DefaultScope

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
MIM_ITEMS = ('configs', 'tools', 'model-index.yml')


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


@pytest.fixture(scope='session')
def mim_links():
    """``dinomamba_mm/.mim/{configs,tools,model-index.yml}``, where ``dinomamba_mm::`` configs
    resolve: an install creates them (setup.py); a plain checkout on PYTHONPATH (a git worktree,
    CI) gets links to the checkout for the session, removed afterwards."""
    mim = osp.join(ROOT, 'dinomamba_mm', '.mim')
    made_dir = not osp.isdir(mim)
    os.makedirs(mim, exist_ok=True)
    made = []
    for item in MIM_ITEMS:
        link = osp.join(mim, item)
        if not osp.lexists(link):
            os.symlink(osp.join('..', '..', item), link)
            made.append(link)
    yield mim
    for link in made:
        os.remove(link)
    if made_dir:
        os.rmdir(mim)


class _Messages(logging.Handler):

    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def logged():
    """The messages of the current MMLogger (print_log(..., logger='current')) while the test
    runs, in order: its console handler holds the stdout of its creation, out of capsys' reach."""
    logger = MMLogger.get_current_instance()
    handler = _Messages()
    logger.addHandler(handler)
    yield handler.messages
    logger.removeHandler(handler)
