"""The paper's released files, where they are (the one place their addresses are written), and
how they are fetched.

The authors publish on Hugging Face (``TimingYang/Dino-Mamba``), one folder per model
(``Vim/Tiny``, ``Vim/Small``, ``Vim/Base``, ``Mambar/Base``) holding what their scripts write into
an output folder: ``checkpoint.pth``, the DINO checkpoint (``'student'`` / ``'teacher'`` state
dicts; main_dino's output), and ``checkpoint.pth.tar``, the linear head that their README
evaluates with ``eval_linear --evaluate`` (DINO's ``LinearClassifier`` state dict; eval_linear's
output). Every folder uses the same two names, so mmengine's URL loader, which caches a download
under the URL's basename, would hand the DinoVim-T file back for DinoVim-B. Our loader of Hugging
Face URLs (:func:`fetch`, :func:`load_from_huggingface`; our initialisers and tools reach it
through :func:`dinomamba_mm.checkpoints.read_checkpoint`) caches each file under its repository,
revision and path in torch's hub directory (:func:`cache_path`), turns a failed download into an
error saying which URL failed and where to put the file by hand (and, for a folder without a
linear head, that none was released), and a cached file that is no intact checkpoint (an
interrupted download, an HTML error page) or not the kind of file its URL names into an error
naming the URL and the file
to delete.

Configs, metafiles and docs spell these URLs out (YAML and mmengine configs cannot import them);
tests/test_model_zoo.py checks that every Hugging Face URL there is one of these.
"""
import os
import os.path as osp
import re
import urllib.error
from typing import Optional
from urllib.parse import urlparse

import torch
from mmengine.dist import barrier, get_dist_info

from .files import CheckpointError, checkpoint_file_problem, load_local

HUGGINGFACE_REPO = 'https://huggingface.co/TimingYang/Dino-Mamba'
HUGGINGFACE_PREFIXES = ('https://huggingface.co/', 'http://huggingface.co/')
#: model name -> folder of the Hugging Face repository
PAPER_FOLDERS = {
    'dinovim-tiny': 'Vim/Tiny',
    'dinovim-small': 'Vim/Small',
    'dinovim-base': 'Vim/Base',
    'dinomambareg-base': 'Mambar/Base',
}
#: the models whose backbone has register tokens (MambaR) instead of a class token
REGISTER_MODELS = ('dinomambareg-base', )
TEACHER_FILE = 'checkpoint.pth'
LINEAR_HEAD_FILE = 'checkpoint.pth.tar'


def paper_url(model: str, filename: str) -> str:
    """URL of ``filename`` in the Hugging Face folder of ``model`` (a key of PAPER_FOLDERS)."""
    if model not in PAPER_FOLDERS:
        raise KeyError(f'model {model!r} has no released files; released: {sorted(PAPER_FOLDERS)}')
    return f'{HUGGINGFACE_REPO}/resolve/main/{PAPER_FOLDERS[model]}/{filename}'


#: the DINO checkpoints (student, teacher, DINO head)
PAPER_CHECKPOINTS = {model: paper_url(model, TEACHER_FILE) for model in PAPER_FOLDERS}
#: the linear heads trained on the teachers' features (DINO LinearClassifier, 1000 classes)
PAPER_LINEAR_HEADS = {model: paper_url(model, LINEAR_HEAD_FILE) for model in PAPER_FOLDERS}


def cache_path(url: str) -> str:
    """Where a Hugging Face file is cached: its repository, revision and path in the repository
    under ``<torch hub dir>/checkpoints/huggingface/``.

    ``https://huggingface.co/TimingYang/Dino-Mamba/resolve/main/Vim/Base/checkpoint.pth`` ->
    ``.../huggingface/TimingYang/Dino-Mamba/main/Vim/Base/checkpoint.pth``: files of two
    repositories or two revisions never share a cache file.
    """
    parsed = urlparse(url)
    parts = parsed.path.strip('/').split('/')
    if parsed.netloc != 'huggingface.co' or len(parts) < 5 or parts[2] != 'resolve' or any(
            part in ('', '.', '..') for part in parts):
        raise ValueError(f'url {url!r} is not a Hugging Face file URL (expected '
                         'https://huggingface.co/<owner>/<repository>/resolve/<revision>/<path>)')
    owner, repository, _, revision, *in_repo = parts
    return osp.join(torch.hub.get_dir(), 'checkpoints', 'huggingface', owner, repository,
                    revision, *in_repo)


def describe(url: str) -> str:
    """How errors name a model-zoo file: its URL and, for a Hugging Face file, its cache
    path (the file to delete when it is the wrong one)."""
    try:
        return f'{url!r} (cached as {cache_path(url)!r})'
    except ValueError:
        return repr(url)


def download(url: str) -> str:
    """Download ``url`` into :func:`cache_path` unless it is there; return the local path."""
    local = cache_path(url)
    if osp.isfile(local):
        return local
    os.makedirs(osp.dirname(local), exist_ok=True)
    try:
        torch.hub.download_url_to_file(url, local, progress=True)
    except urllib.error.HTTPError as error:
        if error.code == 404 and url.endswith('/' + LINEAR_HEAD_FILE):
            raise FileNotFoundError(
                f'the Hugging Face folder {url.rsplit("/", 1)[0]}/ holds no linear head '
                f'({LINEAR_HEAD_FILE}, the file DINO\'s eval_linear writes): none was released '
                'for this model. Train one on the released teacher with the matching '
                '*_paper-teacher_* linear-probe config.') from error
        raise _download_error(url, local, error) from error
    except Exception as error:  # noqa: BLE001 (any network failure)
        raise _download_error(url, local, error) from error
    return local


def _download_error(url: str, local: str, error: Exception) -> RuntimeError:
    return RuntimeError(
        f'could not download {url} ({type(error).__name__}: {error}). Without network '
        f'access, download that file by hand and save it as {local} (the cache this '
        'loader reads), or set the config\'s checkpoint to a local path.')


def fetch(url: str) -> str:
    """The checked local copy of ``url`` (:func:`download`; rank 0 downloads first)."""
    rank, world_size = get_dist_info()
    if rank == 0:
        local = download(url)
    if world_size > 1:
        barrier()
        if rank > 0:
            local = download(url)
    problem = checkpoint_file_problem(local)
    if problem is not None:
        raise CheckpointError(
            f'the download of {url}, cached as {local!r}, {problem}. Delete that file so that '
            'the next run downloads it again')
    return local


def load_from_huggingface(filename: str, map_location=None) -> dict:
    """Our loader of Hugging Face URLs (rank 0 downloads first)."""
    local = fetch(filename)
    # downloaded files go through the safe unpickler only (no trusted-local fallback)
    checkpoint = load_local(local, map_location=map_location, weights_only=True)
    problem = paper_file_problem(filename, checkpoint)
    if problem:
        raise CheckpointError(
            f'the file cached as {local!r} for {filename} {problem}: it is not the file this '
            'URL names. Delete it so that the next run downloads it again')
    return checkpoint


def paper_file_problem(url: str, checkpoint) -> Optional[str]:
    """Why a loaded ``checkpoint`` cannot be the released file at ``url`` (a key of
    :data:`PAPER_CHECKPOINTS` or :data:`PAPER_LINEAR_HEADS`), or None (also for other URLs).

    A DINO checkpoint holds 'teacher' and 'student' state dicts with backbone keys, MambaR's
    (DinoMamba-Reg) with register position embeddings (``pos_embed_cls``) and Vim's without;
    a linear head holds the weight and bias of one linear layer.
    """
    model = next((m for m, u in PAPER_CHECKPOINTS.items() if u == url), None)
    if model is not None:
        teacher = checkpoint.get('teacher') if isinstance(checkpoint, dict) else None
        if not isinstance(teacher, dict) or not isinstance(checkpoint.get('student'), dict):
            return ("holds no DINO checkpoint (no 'teacher' and 'student' state dicts; its "
                    f'top-level keys: {sorted(map(str, checkpoint))[:8]})')
        registers = any(key.endswith('pos_embed_cls') for key in teacher)
        if registers != (model in REGISTER_MODELS):
            return (f'holds a {"MambaR (register tokens)" if registers else "Vim (class token)"} '
                    f'teacher, and {model} is {"a MambaR" if not registers else "a Vim"}')
        return None
    if url in PAPER_LINEAR_HEADS.values():
        state = checkpoint.get('state_dict') if isinstance(checkpoint, dict) else None
        names = sorted(re.sub(r'^module\.', '', key) for key in state or {})
        if names != ['linear.bias', 'linear.weight']:
            return ("holds no linear head of DINO's eval_linear (expected the state dict "
                    f"'linear.weight', 'linear.bias'; found {names[:8]})")
    return None
