"""mamba_ssm's Triton SSD ops on CPU tensors under Triton's interpreter, for the tests only.

mamba-ssm is a test dependency installed without its CUDA extension (tools/setup_env.sh); only
its ``mamba_ssm.ops.triton`` files are used. What it takes to run them here:
* ``mamba_ssm/__init__.py`` imports the CUDA extension: the package is entered without it
  (:func:`enter_without_extension`);
* its kernels call triton.language's own @jit helpers (tl.sigmoid, ...), which run in the
  interpreter only if triton itself was imported under TRITON_INTERPRET=1: the tests run each
  case in a fresh Python started with it;
* it launches inside ``torch.cuda.device(x.device.index)``, None on CPU: made a no-op there, and
  it reads the SM count of the device: given one (:func:`cpu_device_context`);
* its autotuners would time every config (CUDA events): each keeps its first config
  (:func:`ssd_combined`).
"""
import contextlib
import importlib
import importlib.util
import sys
import types

import pytest
import torch

OPS = ('ssd_bmm', 'ssd_chunk_state', 'ssd_state_passing', 'ssd_chunk_scan', 'ssd_combined')


def enter_without_extension() -> None:
    """Make ``mamba_ssm.*`` importable without running ``mamba_ssm/__init__.py``."""
    spec = importlib.util.find_spec('mamba_ssm')
    if spec is None:
        pytest.fail('mamba-ssm is a test dependency: tools/setup_env.sh installs it')
    if 'mamba_ssm' not in sys.modules:
        package = types.ModuleType('mamba_ssm')
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec  # find_spec('mamba_ssm') keeps answering once it is entered
        sys.modules['mamba_ssm'] = package


def ssd_combined() -> types.ModuleType:
    """``mamba_ssm.ops.triton.ssd_combined``, each autotuned kernel with its first config only."""
    from triton.runtime.autotuner import Autotuner
    enter_without_extension()
    combined = importlib.import_module('mamba_ssm.ops.triton.ssd_combined')
    for name in OPS:
        for kernel in vars(sys.modules[f'mamba_ssm.ops.triton.{name}']).values():
            if isinstance(kernel, Autotuner):
                kernel.configs = kernel.configs[:1]
    return combined


@contextlib.contextmanager
def cpu_device_context():
    """torch.cuda.device(None), what mamba_ssm enters for a CPU tensor, as a no-op, and the
    properties of a 108-SM device (it sizes a grid by the SM count)."""
    device, properties = torch.cuda.device, torch.cuda.get_device_properties
    torch.cuda.device = lambda index: contextlib.nullcontext() if index is None else device(index)
    torch.cuda.get_device_properties = lambda *_: types.SimpleNamespace(multi_processor_count=108)
    try:
        yield
    finally:
        torch.cuda.device, torch.cuda.get_device_properties = device, properties
