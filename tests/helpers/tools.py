"""Import a script under tools/ (not a package) as a module, for tests of its functions."""
import importlib.util
import os.path as osp
from types import ModuleType

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def load_tool(relative_path: str) -> ModuleType:
    """``load_tool('tools/test.py')``: the script executed as a fresh module."""
    path = osp.join(ROOT, relative_path)
    name = 'tool_' + osp.splitext(relative_path)[0].replace('/', '_')
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
