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
through :func:`dinomamba_mm.checkpoints.read_checkpoint`) caches each file under a name derived
from its path in the repository (``Vim_Base_checkpoint.pth``) in torch's hub directory, turns a
failed download into an error saying which URL failed and where to put the file by hand (and, for a
folder without a linear head, that none was released), and a cached file that is no intact
checkpoint (an interrupted download, an HTML error page) into an error naming the URL and the file
to delete.

Configs, metafiles and docs spell these URLs out (YAML and mmengine configs cannot import them);
tests/test_model_zoo.py checks that every Hugging Face URL there is one of these.
"""
import os
import os.path as osp
import urllib.error
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
    """Where a Hugging Face file is cached: ``<torch hub dir>/checkpoints/<path_in_repo>``.

    ``.../resolve/<revision>/Vim/Base/checkpoint.pth`` -> ``Vim_Base_checkpoint.pth``.
    """
    path = urlparse(url).path
    marker = '/resolve/'
    if marker not in path:
        raise ValueError(f'url {url!r} is not a Hugging Face file URL '
                         '(expected https://huggingface.co/<repo>/resolve/<revision>/<path>)')
    in_repo = path.split(marker, 1)[1].split('/', 1)[-1]
    return osp.join(torch.hub.get_dir(), 'checkpoints', in_repo.replace('/', '_'))


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
    # downloaded files go through the safe unpickler only (no trusted-local fallback)
    return load_local(fetch(filename), map_location=map_location, weights_only=True)
