"""Model zoo: model-index.yml, metafiles, config URLs and the Hugging Face loader."""
import ast
import glob
import os
import os.path as osp
import re
import urllib.error

import pytest
import torch
import yaml
from mmengine.runner.checkpoint import CheckpointLoader

from dinomamba_mm import model_zoo

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
URL = re.compile(r'https?://huggingface\.co/[^\s\'"]+')


def test_model_index_parses_and_every_config_exists():
    from modelindex.load_model_index import load
    index = load(osp.join(ROOT, 'model-index.yml'))
    models = index.models
    assert len(models) == 26
    names = [m.name for m in models]
    assert len(names) == len(set(names)), 'model names must be unique'
    collections = {c.name for c in index.collections}
    for model in models:
        assert model.in_collection in collections, model.name
        assert osp.isfile(osp.join(ROOT, model.config)), model.config
        assert osp.splitext(osp.basename(model.config))[0] == model.name
        assert model.metadata.parameters > 0, model.name
        if model.in_collection in ('Dino-Mamba', 'Dino-Mamba Linear Probe'):
            assert model.metadata.flops > 0, model.name
        if model.weights is not None:
            assert model.weights in model_zoo.PAPER_CHECKPOINTS.values(), model.weights


def test_every_metafile_is_imported_by_the_index():
    with open(osp.join(ROOT, 'model-index.yml')) as f:
        imported = set(yaml.safe_load(f)['Import'])
    on_disk = {osp.relpath(p, ROOT) for p in glob.glob(osp.join(ROOT, 'configs/*/metafile.yml'))}
    assert imported == on_disk


def test_paper_results_are_marked_as_the_papers():
    """docs/paper.md section 5 figures, entered with 'Results Source: paper'."""
    expected = {'dinovim-t': 73.7, 'dinovim-s': 77.4, 'dinovim-b': 78.1,
                'dinomamba-reg-b': 78.5, 'linearvit-b': 74.7, 'vit-b': 78.2}
    with open(osp.join(ROOT, 'configs/dino/metafile.yml')) as f:
        models = yaml.safe_load(f)['Models']
    seen = {}
    for model in models:
        if model['In Collection'] != 'Dino-Mamba Linear Probe' or model['Results'] is None:
            continue
        assert model['Results Source'] == 'paper'
        key = model['Name'].split('-p16')[0]
        assert key not in seen, f'paper results entered twice for {key}'
        in1k = [r for r in model['Results'] if r['Dataset'] == 'ImageNet-1k']
        seen[key] = in1k[0]['Metrics']['Top 1 Accuracy']
    assert seen == expected


def test_every_huggingface_url_in_configs_is_a_known_paper_checkpoint():
    known = set(model_zoo.PAPER_CHECKPOINTS.values())
    found = 0
    for path in glob.glob(osp.join(ROOT, 'configs', '**', '*.py'), recursive=True):
        with open(path) as f:
            tree = ast.parse(f.read())  # joins implicitly concatenated string literals
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for url in URL.findall(node.value):
                    assert url in known, f'{path}: {url}'
                    found += 1
    assert found >= 4


def test_cache_names_differ_for_files_that_share_a_basename(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path))
    paths = {model_zoo.cache_path(u) for u in model_zoo.PAPER_CHECKPOINTS.values()}
    assert len(paths) == 4
    assert osp.join(str(tmp_path), 'checkpoints', 'Vim_Base_checkpoint.pth') in paths
    with pytest.raises(ValueError, match='not a Hugging Face file URL'):
        model_zoo.cache_path('https://huggingface.co/Timing1/Dino-Mamba')


def test_loader_reads_a_file_placed_by_hand_without_network(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path))

    def no_network(*args, **kwargs):
        raise AssertionError('must not download a cached file')

    monkeypatch.setattr(torch.hub, 'download_url_to_file', no_network)
    url = model_zoo.PAPER_CHECKPOINTS['dinovim-small']
    os.makedirs(osp.dirname(model_zoo.cache_path(url)))
    torch.save({'teacher': {'backbone.norm_f.weight': torch.ones(3)}},
               model_zoo.cache_path(url))
    loaded = CheckpointLoader.load_checkpoint(url, map_location='cpu')
    assert torch.equal(loaded['teacher']['backbone.norm_f.weight'], torch.ones(3))


def test_failed_download_names_the_url_and_where_to_put_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path))

    def unreachable(url, dst, *args, **kwargs):
        raise urllib.error.URLError('no route to host')

    monkeypatch.setattr(torch.hub, 'download_url_to_file', unreachable)
    url = model_zoo.PAPER_CHECKPOINTS['dinovim-base']
    with pytest.raises(RuntimeError) as error:
        CheckpointLoader.load_checkpoint(url)
    message = str(error.value)
    assert url in message
    assert model_zoo.cache_path(url) in message
