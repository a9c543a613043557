"""Model zoo: model-index.yml, metafiles, config URLs and the Hugging Face loader."""
import ast
import glob
import os
import os.path as osp
import re
import subprocess
import sys
import urllib.error

import pytest
import torch
import yaml

from dinomamba_mm.checkpoints import model_zoo, read_checkpoint

sys.path.insert(0, osp.join(osp.dirname(osp.abspath(__file__))))
from helpers.paper_files import (paper_backbone, paper_dino_checkpoint,  # noqa: E402
                                 paper_linear_head)

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
URL = re.compile(r'https?://huggingface\.co/[^\s\'"]+')


def test_model_index_parses_and_every_config_exists():
    from modelindex.load_model_index import load
    index = load(osp.join(ROOT, 'model-index.yml'))
    models = index.models
    assert len(models) == 46
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
        # a released linear head (loaded with the teacher its config names), or no Weights
        # field at all, as in mmpretrain (get_model(NAME, pretrained=True) then says so)
        assert model.weights is None or model.weights in model_zoo.PAPER_LINEAR_HEADS.values(), \
            model.name
        if model.weights is not None:
            assert 'paper-linear-head' in model.name, model.name


def test_every_metafile_is_imported_by_the_index():
    with open(osp.join(ROOT, 'model-index.yml')) as f:
        imported = set(yaml.safe_load(f)['Import'])
    on_disk = {osp.relpath(p, ROOT) for p in glob.glob(osp.join(ROOT, 'configs/*/metafile.yml'))}
    assert imported == on_disk


#: docs/paper.md section 5: ImageNet-1k top-1 of every model, and the robustness results
PAPER_RESULTS = {
    'dinovim-tiny': {'ImageNet-1k': 73.7}, 'dinovim-small': {'ImageNet-1k': 77.4},
    'dinovim-base': {'ImageNet-1k': 78.1, 'ImageNet-Sketch': 27.6, 'ImageNet-A': 14.2,
                     'ImageNet-R': 33.1, 'ImageNet-ReaL': 84.3},
    'dinomambareg-base': {'ImageNet-1k': 78.5},
    'linearvit-base': {'ImageNet-1k': 74.7, 'ImageNet-Sketch': 21.6, 'ImageNet-A': 9.6,
                       'ImageNet-R': 32.7, 'ImageNet-ReaL': 81.3},
    'vit-base': {'ImageNet-1k': 78.2, 'ImageNet-Sketch': 25.5, 'ImageNet-A': 15.4,
                 'ImageNet-R': 38.0, 'ImageNet-ReaL': 84.6},
}
#: the data set each result is for -> how the config that tests on it ends
TEST_SET_SUFFIX = {'ImageNet-1k': '_in1k.py', 'ImageNet-Sketch': '_imagenet-sketch.py',
                   'ImageNet-A': '_imagenet-a.py', 'ImageNet-R': '_imagenet-r.py',
                   'ImageNet-ReaL': '_imagenet-real.py'}


def test_paper_results_are_marked_as_the_papers_on_the_configs_that_test_on_their_sets():
    """Each figure once, with 'Results Source: paper', on the config whose test set it is
    (the robustness figures sat on the ImageNet-1k configs)."""
    seen = {}
    for model in _metafile_models():
        if model['In Collection'] != 'Dino-Mamba Linear Probe' or not model.get('Results'):
            continue
        assert model['Results Source'] == 'paper'
        key = model['Name'].split('-p16')[0]
        for result in model['Results']:
            dataset = result['Dataset']
            assert model['Config'].endswith(TEST_SET_SUFFIX[dataset]), (model['Name'], dataset)
            with open(osp.join(ROOT, model['Config'])) as f:
                assert ('_base_/datasets/' + TEST_SET_SUFFIX[dataset][1:] in f.read()
                        or dataset == 'ImageNet-1k'), model['Config']
            assert dataset not in seen.setdefault(key, {}), f'{key} {dataset} entered twice'
            seen[key][dataset] = result['Metrics']['Top 1 Accuracy']
    assert seen == PAPER_RESULTS


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


def test_cache_paths_name_the_repository_and_the_revision(tmp_path, monkeypatch):
    """Two files that share a basename, two repositories or two revisions never share a cache
    file (the cache name was the path in the repository only)."""
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path))
    url = model_zoo.PAPER_CHECKPOINTS['dinovim-base']
    assert model_zoo.cache_path(url) == osp.join(
        str(tmp_path), 'checkpoints', 'huggingface', 'TimingYang', 'Dino-Mamba', 'main', 'Vim',
        'Base', 'checkpoint.pth')
    others = [url.replace('/resolve/main/', '/resolve/v1.0/'),
              url.replace('TimingYang/Dino-Mamba', 'Timing1/Dino-Mamba'),
              *model_zoo.PAPER_CHECKPOINTS.values(), *model_zoo.PAPER_LINEAR_HEADS.values()]
    paths = {model_zoo.cache_path(u) for u in others}
    assert len(paths) == len(set(others)) == 10
    for bad in (model_zoo.HUGGINGFACE_REPO, url.replace('/Vim/', '/../../'),
                url.replace('huggingface.co', 'example.org')):
        with pytest.raises(ValueError, match='is not a Hugging Face file URL'):
            model_zoo.cache_path(bad)


@pytest.mark.parametrize('url, content, problem', [
    (model_zoo.PAPER_CHECKPOINTS['dinovim-base'], 'head', 'holds no DINO checkpoint'),
    (model_zoo.PAPER_CHECKPOINTS['dinomambareg-base'], 'vim',
     'holds a Vim (class token) teacher, and dinomambareg-base is a MambaR'),
    (model_zoo.PAPER_CHECKPOINTS['dinovim-small'], 'mambar',
     'holds a MambaR (register tokens) teacher, and dinovim-small is a Vim'),
    (model_zoo.PAPER_LINEAR_HEADS['dinovim-tiny'], 'vim', 'holds no linear head'),
])
def test_a_cached_file_of_another_kind_names_the_file_to_delete(tmp_path, monkeypatch, url,
                                                                 content, problem):
    """The file cached for a URL is not the one it names (placed by hand, or cached under the
    old names): an error naming the cache path, instead of 0 tensors loaded."""
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path))
    cached = model_zoo.cache_path(url)
    os.makedirs(osp.dirname(cached))
    files = dict(head=lambda: paper_linear_head(torch.zeros(10, 4), torch.zeros(10)),
                 vim=lambda: paper_dino_checkpoint(paper_backbone(0, patches=4, depth=1)),
                 mambar=lambda: paper_dino_checkpoint(paper_backbone(0, registers=2,
                                                                     patches=4, depth=1)))
    torch.save(files[content](), cached)
    with pytest.raises(ValueError) as error:
        read_checkpoint(url)
    assert str(error.value) == (f'the file cached as {cached!r} for {url} {problem}' +
                                str(error.value).split(problem, 1)[1])
    assert str(error.value).endswith('it is not the file this URL names. Delete it so that the '
                                     'next run downloads it again')


def test_loader_reads_a_file_placed_by_hand_without_network(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path))

    def no_network(*args, **kwargs):
        raise AssertionError('must not download a cached file')

    monkeypatch.setattr(torch.hub, 'download_url_to_file', no_network)
    url = model_zoo.PAPER_CHECKPOINTS['dinovim-small']
    os.makedirs(osp.dirname(model_zoo.cache_path(url)))
    teacher = paper_backbone(0, patches=4, depth=1)
    torch.save(paper_dino_checkpoint(teacher), model_zoo.cache_path(url))
    loaded = read_checkpoint(url)
    assert torch.equal(loaded['teacher']['backbone.norm_f.weight'], teacher['norm_f.weight'])


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


def test_mim_download_fetches_a_released_file_and_its_config(mim_download, tmp_path):
    """One entry of each kind with weights: a head on ImageNet-1k, one on a robustness set."""
    download, served = mim_download
    released = [m for m in _metafile_models() if m.get('Weights')]
    assert {m['Weights'] for m in released} == set(model_zoo.PAPER_LINEAR_HEADS.values())
    for model in (released[0], released[-1]):
        dest = tmp_path / model['Name']
        download('dinomamba_mm', [model['Name'].lower()], str(dest))
        name = model['Weights'].rsplit('/', 1)[-1]
        assert (dest / name).read_bytes() == served[model['Weights']]
        assert (dest / f"{model['Name'].lower()}.py").is_file()


def _chain(error: BaseException) -> list:
    """The messages of an exception and of those it was raised while handling (what the
    traceback prints)."""
    chain = []
    while error is not None:
        chain.append(f'{type(error).__name__}: {error}')
        error = error.__context__
    return chain


def test_mim_download_of_a_released_file_without_network(mim_download, tmp_path,
                                                         monkeypatch):
    """docs/model_zoo.md: openmim 0.3.9 raises a TypeError of its own ('exceptions must derive
    from BaseException'); the traceback above it names the URL that could not be fetched."""
    download, _ = mim_download
    import requests

    def offline(url, **kwargs):
        raise requests.ConnectionError(f"HTTPSConnectionPool(host='huggingface.co', port=443): "
                                       f'Max retries exceeded with url: {url}')

    monkeypatch.setattr(requests, 'get', offline)
    name = 'dinovim-tiny-p16_paper-teacher_paper-linear-head_in1k'
    with pytest.raises(TypeError, match='exceptions must derive from BaseException') as error:
        download('dinomamba_mm', [name], str(tmp_path))
    url = model_zoo.PAPER_LINEAR_HEADS['dinovim-tiny']
    assert any(text.startswith('ConnectionError') and url in text
               for text in _chain(error.value)), _chain(error.value)
    assert [p.name for p in tmp_path.iterdir()] == []


def test_mim_download_of_an_entry_without_weights_and_the_documented_way(
        mim_download, tmp_path, mim_links):
    """openmim 0.3.9 reads the missing Weights field as NaN and stops before saving the config
    (mmpretrain's own entries without weights, e.g. hivit-tiny-p16_16xb64_in1k, alike); the
    command docs/model_zoo.md gives instead saves it, as mim would have."""
    download, _ = mim_download
    name = 'dinovim-tiny-p16_paper-teacher_8xb128-linear-coslr-100e_in1k'
    with pytest.raises(AttributeError, match="'float' object has no attribute 'split'"):
        download('dinomamba_mm', [name], str(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == []
    with open(osp.join(ROOT, 'docs', 'model_zoo.md')) as f:
        command = re.search(r'python -c "(import os.path as p, dinomamba_mm; from mmengine '
                            r'import Config; [^"]+)"', f.read()).group(1)
    config = next(m['Config'] for m in _metafile_models() if m['Name'] == name)
    command = command.replace('ade20k/NAME.py', config[len('configs/'):]).replace(
        "'NAME.py'", repr(str(tmp_path / f'{name}.py')))
    subprocess.run([sys.executable, '-c', command], check=True, cwd=str(tmp_path),
                   env=dict(os.environ, PYTHONPATH=ROOT))
    from mmengine.config import Config
    assert Config.fromfile(str(tmp_path / f'{name}.py')).model.backbone.checkpoint == \
        model_zoo.PAPER_CHECKPOINTS['dinovim-tiny']


#: 16-wide, 8-block backbones (replacing the configs' arch): the configs read the last 8
#: (4 for DinoVim-S) blocks
TINY_ARCH = dict(embed_dims=16, num_layers=8, headdim=8, d_state=4)


@pytest.fixture
def seeded_cache(tmp_path, monkeypatch):
    """Every released file, in the paper's formats with 16-wide backbones, in the model-zoo
    cache; downloading anything fails. Returns {url: what was saved}."""
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path))

    def no_network(url, *args, **kwargs):
        raise urllib.error.URLError(f'no network in this test: {url}')

    monkeypatch.setattr(torch.hub, 'download_url_to_file', no_network)
    saved = {}
    for seed, model in enumerate(model_zoo.PAPER_FOLDERS):
        registers = 12 if model in model_zoo.REGISTER_MODELS else 0
        teacher = paper_backbone(seed, registers=registers, patches=49 if registers else 196,
                                 dim=16, depth=8, state=4, headdim=8)
        blocks = 4 if model == 'dinovim-small' else 8
        gen = torch.Generator().manual_seed(seed)
        head = paper_linear_head(torch.randn(1000, blocks * 16, generator=gen) * 0.1,
                                 torch.randn(1000, generator=gen))
        for url, content in ((model_zoo.PAPER_CHECKPOINTS[model], paper_dino_checkpoint(teacher)),
                             (model_zoo.PAPER_LINEAR_HEADS[model], head)):
            os.makedirs(osp.dirname(model_zoo.cache_path(url)), exist_ok=True)
            torch.save(content, model_zoo.cache_path(url))
            saved[url] = content
    return saved


#: one entry of each kind: a DINO run, a dense model, a probe to train on the released teacher
#: (their Weights was the teacher's DINO file), the released heads on ImageNet-1k and ImageNet-A
ONE_OF_EACH_KIND = ('dino_dinomambareg-base-p16_8xb64-amp-coslr-100e_in1k',
                    'cascade-mask-rcnn_dinovim-tiny-p16_paper-teacher_16xb4-amp-lsj-100e_coco',
                    'dinovim-base-p16_paper-teacher_8xb128-linear-coslr-100e_in1k',
                    'dinovim-small-p16_paper-teacher_paper-linear-head_in1k',
                    'dinovim-base-p16_paper-teacher_paper-linear-head_imagenet-a')


@pytest.mark.parametrize('which', [
    'one of each kind', pytest.param('every entry', marks=pytest.mark.slow)])
def test_get_model_builds_each_entry_or_says_it_has_no_weights(seeded_cache, mim_links, which):
    """mmpretrain's get_model(NAME, pretrained=True) for the entries of model-index.yml, from
    the seeded cache (all 46: 45 s, slow). The paper-teacher probes loaded 0 of 365 teacher
    tensors and a random head (their Weights was the teacher's DINO file); the entries without
    weights failed with "checkpoint 'no weights: ...' does not exist"."""
    from mmpretrain import get_model

    from dinomamba_mm.checkpoints.model_index import register_models
    from dinomamba_mm.models.backbones import FrozenBackbone
    names = register_models()
    entries = {m['Name']: m for m in _metafile_models()}
    assert sorted(names) == sorted(entries)
    released = sorted(n for n in names if entries[n].get('Weights'))
    assert len(released) == 8  # the four heads, for ImageNet-1k and DinoVim-B's robustness sets
    images = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    for name in names if which == 'every entry' else ONE_OF_EACH_KIND:
        if name not in released:
            with pytest.raises(ValueError) as error:
                get_model(name, pretrained=True)
            assert str(error.value).startswith(f'no weights: no checkpoint of {name!r} is '
                                               'published'), name
            assert str(released) in str(error.value)
            continue
        blocks = 4 if name.startswith('dinovim-small') else 8
        model = get_model(name, pretrained=True, head=dict(in_channels=blocks * 16),
                          backbone=dict(backbone=dict(arch=dict(TINY_ARCH, _delete_=True))))
        head = seeded_cache[entries[name]['Weights']]['state_dict']
        assert torch.equal(model.head.fc.weight, head['module.linear.weight'])
        assert torch.equal(model.head.fc.bias, head['module.linear.bias'])
        # the teacher, as the documented loader (FrozenBackbone.init_weights) reads the file
        frozen = model.backbone
        oracle = FrozenBackbone(_backbone_cfg(model), checkpoint=frozen.checkpoint)
        oracle.init_weights()
        for key, value in oracle.backbone.state_dict().items():
            assert torch.equal(frozen.backbone.state_dict()[key], value), (name, key)
        with torch.no_grad():
            model(images, mode='tensor')  # runs: every weight was loaded


def _backbone_cfg(model) -> dict:
    return dict(model._config.model.backbone.backbone.to_dict())


def test_a_teacher_probe_built_from_its_config_says_its_teacher_was_not_loaded(mim_links):
    """get_model(CONFIG, pretrained=True) of a probe to train: the config's load_from is None,
    so mmpretrain loads nothing and never calls init_weights(); its random teacher ran."""
    from mmpretrain import get_model
    config = osp.join(ROOT, 'configs', 'dino', 'benchmarks',
                      'dinovim-tiny-p16_paper-teacher_8xb128-linear-coslr-100e_in1k.py')
    model = get_model(config, pretrained=True, head=dict(in_channels=8 * 16),
                      backbone=dict(backbone=dict(arch=dict(TINY_ARCH, _delete_=True))))
    with pytest.raises(RuntimeError, match='were never loaded from checkpoint=.*Vim/Tiny'):
        model(torch.zeros(1, 3, 32, 32), mode='tensor')
