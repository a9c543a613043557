"""Every script under tools/ has a file name of its own: ``mim run dinomamba_mm NAME`` finds a
tool by its base name alone, so two tools with one name run the wrong one."""
import collections
import glob
import os.path as osp

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def test_tool_file_names_are_unique():
    paths = glob.glob(osp.join(REPO, 'tools', '**', '*.py'), recursive=True)
    by_name = collections.defaultdict(list)
    for path in paths:
        by_name[osp.basename(path)].append(osp.relpath(path, REPO))
    assert len(paths) > 10
    assert {name: found for name, found in by_name.items() if len(found) > 1} == {}
