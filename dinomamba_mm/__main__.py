"""``python -m dinomamba_mm TOOL [ARGS ...]``: run one of the package's tools by its file name.

The tools are the scripts of the source tree's ``tools/`` folder, which an install puts in
``dinomamba_mm/.mim/tools`` (the files openmim's ``mim run dinomamba_mm TOOL`` runs):
``python -m dinomamba_mm train CONFIG`` runs tools/train.py from any folder, with neither a
checkout nor openmim. ``python -m dinomamba_mm`` lists the tools.
"""
import glob
import os.path as osp
import runpy
import sys
from typing import Dict, List, Optional

TOOLS_DIR = osp.join(osp.dirname(osp.abspath(__file__)), '.mim', 'tools')


def find_tools(tools_dir: str = TOOLS_DIR) -> Dict[str, str]:
    """{file name without ``.py``: path} of the scripts under ``tools_dir``, sub-folders
    included (each tool has a file name of its own)."""
    paths = sorted(glob.glob(osp.join(tools_dir, '**', '*.py'), recursive=True))
    return {osp.splitext(osp.basename(path))[0]: path for path in paths}


def main(argv: Optional[List[str]] = None) -> None:
    """Run ``argv[0]``'s script as ``__main__`` with the remaining arguments."""
    argv = sys.argv[1:] if argv is None else argv
    tools = find_tools()
    if not tools:
        raise SystemExit(f'dinomamba_mm: no tools in {TOOLS_DIR}: installing the package '
                         '(pip install dinomamba_mm-*.whl, or pip install -e . in a checkout) '
                         'puts them there')
    if not argv or argv[0] in ('-h', '--help'):
        print('usage: python -m dinomamba_mm TOOL [ARGS ...]  (TOOL --help: its options)\n'
              f'tools: {" ".join(tools)}')
        raise SystemExit(0 if argv else 2)
    name, *args = argv
    if name not in tools:
        raise SystemExit(f'dinomamba_mm: no tool named {name!r}; the tools: {" ".join(tools)}')
    path = tools[name]
    sys.argv = [path, *args]
    sys.path.insert(0, osp.dirname(path))  # as for `python path`: the tool's own folder
    runpy.run_path(path, run_name='__main__')


if __name__ == '__main__':
    main()
