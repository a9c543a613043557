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

from dinomamba_mm.checkpoints import model_zoo, read_checkpoint

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
URL = re.compile(r'https?://huggingface\.co/[^\s\'"]+')


def test_model_index_parses_and_every_config_exists():
    from modelindex.load_model_index import load
    index = load(osp.join(ROOT, 'model-index.yml'))
    models = index.models
    assert len(models) == 34
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
        # a released file, or words saying why there is none (so that mim download explains)
        released = {*model_zoo.PAPER_CHECKPOINTS.values(), *model_zoo.PAPER_LINEAR_HEADS.values()}
        assert model.weights in released or model.weights.startswith('no weights: '), model.name


def test_every_metafile_is_imported_by_the_index():
    with open(osp.join(ROOT, 'model-index.yml')) as f:
        imported = set(yaml.safe_load(f)['Import'])
    on_disk = {osp.relpath(p, ROOT) for p in glob.glob(osp.join(ROOT, 'configs/*/metafile.yml'))}
    assert imported == on_disk


def test_paper_results_are_marked_as_the_papers():
    """docs/paper.md section 5 figures, entered with 'Results Source: paper'."""
    expected = {'dinovim-tiny': 73.7, 'dinovim-small': 77.4, 'dinovim-base': 78.1,
                'dinomambareg-base': 78.5, 'linearvit-base': 74.7, 'vit-base': 78.2}
    with open(osp.join(ROOT, 'configs/dino/metafile.yml')) as f:
        models = yaml.safe_load(f)['Models']
    seen = {}
    for model in models:
        if model['In Collection'] != 'Dino-Mamba Linear Probe' or not model['Results']:
            continue
        assert model['Results Source'] == 'paper'
        key = model['Name'].split('-p16')[0]
        assert key not in seen, f'paper results entered twice for {key}'
        in1k = [r for r in model['Results'] if r['Dataset'] == 'ImageNet-1k']
        seen[key] = in1k[0]['Metrics']['Top 1 Accuracy']
    assert seen == expected


def test_every_huggingface_url_in_configs_is_a_known_paper_checkpoint():
    known = {*model_zoo.PAPER_CHECKPOINTS.values(), *model_zoo.PAPER_LINEAR_HEADS.values()}
    found = 0
    for path in glob.glob(osp.join(ROOT, 'configs', '**', '*.py'), recursive=True):
        with open(path) as f:
            tree = ast.parse(f.read())  # joins implicitly concatenated string literals
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for url in URL.findall(node.value):
                    assert url in known, f'{path}: {url}'
                    found += 1
    for model in _metafile_models():
        for url in URL.findall(str(model)):
            assert url in known, f"{model['Name']}: {url}"
            found += 1
    assert found >= 8


def test_the_hugging_face_repository_is_named_in_one_place_only():
    """Docs, configs and code outside model_zoo.py may only point at its repository (and
    configs / metafiles at its files: the test above)."""
    paths = [osp.join(ROOT, 'README.md'), *glob.glob(osp.join(ROOT, 'docs', '*.md')),
             *glob.glob(osp.join(ROOT, 'configs', '**', '*.*'), recursive=True),
             *glob.glob(osp.join(ROOT, 'dinomamba_mm', '**', '*.py'), recursive=True)]
    for path in paths:
        if path == model_zoo.__file__:
            continue
        with open(path) as f:
            for url in URL.findall(f.read()):
                assert url.startswith(model_zoo.HUGGINGFACE_REPO + '/'), f'{path}: {url}'


def test_cache_names_differ_for_files_that_share_a_basename(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path))
    paths = {model_zoo.cache_path(u) for u in model_zoo.PAPER_CHECKPOINTS.values()}
    assert len(paths) == 4
    assert osp.join(str(tmp_path), 'checkpoints', 'Vim_Base_checkpoint.pth') in paths
    with pytest.raises(ValueError, match='not a Hugging Face file URL'):
        model_zoo.cache_path(model_zoo.HUGGINGFACE_REPO)


def test_loader_reads_a_file_placed_by_hand_without_network(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path))

    def no_network(*args, **kwargs):
        raise AssertionError('must not download a cached file')

    monkeypatch.setattr(torch.hub, 'download_url_to_file', no_network)
    url = model_zoo.PAPER_CHECKPOINTS['dinovim-small']
    os.makedirs(osp.dirname(model_zoo.cache_path(url)))
    torch.save({'teacher': {'backbone.norm_f.weight': torch.ones(3)}},
               model_zoo.cache_path(url))
    loaded = read_checkpoint(url)
    assert torch.equal(loaded['teacher']['backbone.norm_f.weight'], torch.ones(3))


def test_failed_download_names_the_url_and_where_to_put_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path))

    def unreachable(url, dst, *args, **kwargs):
        raise urllib.error.URLError('no route to host')

    monkeypatch.setattr(torch.hub, 'download_url_to_file', unreachable)
    url = model_zoo.PAPER_CHECKPOINTS['dinovim-base']
    with pytest.raises(RuntimeError) as error:
        read_checkpoint(url)
    message = str(error.value)
    assert url in message
    assert model_zoo.cache_path(url) in message


class _FakeResponse:
    """What requests.get returns for a file Hugging Face serves (streamed)."""

    def __init__(self, body: bytes):
        self.body = body
        self.headers = {'content-length': str(len(body))}

    def iter_content(self, chunk_size=1024):
        for start in range(0, len(self.body), chunk_size):
            yield self.body[start:start + chunk_size]


@pytest.fixture
def mim_download(monkeypatch):
    """mim's own `mim download` code path, in-process, on this checkout, without network: the
    released files are served from memory, any other http(s) address fails to connect."""
    download = pytest.importorskip('mim.commands.download')
    import mim.commands.search as search
    import mim.utils.utils as mim_utils
    import requests
    for module in (download, search, mim_utils):
        monkeypatch.setattr(module, 'is_installed', lambda package: package == 'dinomamba_mm',
                            raising=False)
    for module in (download, search):
        monkeypatch.setattr(module, 'get_installed_path', lambda package: ROOT)
    served = {url: f'file at {url}'.encode() for url in
              [*model_zoo.PAPER_CHECKPOINTS.values(), *model_zoo.PAPER_LINEAR_HEADS.values()]}
    real_get = requests.get

    def get(url, **kwargs):
        if url in served:
            return _FakeResponse(served[url])
        if url.startswith(('http://', 'https://')):
            raise requests.ConnectionError(f'no network in this test: {url}')
        return real_get(url, **kwargs)  # requests' own answer to a non-URL

    monkeypatch.setattr(requests, 'get', get)
    return download.download, served


def _metafile_models():
    with open(osp.join(ROOT, 'model-index.yml')) as f:
        metafiles = yaml.safe_load(f)['Import']
    for metafile in metafiles:
        with open(osp.join(ROOT, metafile)) as f:
            yield from yaml.safe_load(f)['Models']


def test_mim_download_fetches_every_released_file(mim_download, tmp_path):
    download, served = mim_download
    released = [m for m in _metafile_models() if m['Weights'] in served]
    assert {m['Weights'] for m in released} == set(served)
    for model in released:
        dest = tmp_path / model['Name']
        download('dinomamba_mm', [model['Name'].lower()], str(dest))
        name = model['Weights'].rsplit('/', 1)[-1]
        assert (dest / name).read_bytes() == served[model['Weights']]
        assert (dest / f"{model['Name'].lower()}.py").is_file()


def test_mim_download_of_a_model_without_weights_says_why(mim_download, tmp_path):
    download, served = mim_download
    unreleased = [m for m in _metafile_models() if m['Weights'] not in served]
    assert unreleased
    for model in unreleased:
        with pytest.raises(Exception) as error:
            download('dinomamba_mm', [model['Name'].lower()], str(tmp_path))
        chain = []
        cause = error.value
        while cause is not None:
            chain.append(str(cause))
            cause = cause.__context__
        assert any('no weights' in text and 'published' in text for text in chain), chain
    assert list(tmp_path.iterdir()) == []
