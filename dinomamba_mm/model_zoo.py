"""The paper's released checkpoints and how they are fetched.

The authors publish DINO checkpoints (``checkpoint.pth`` with 'student' and 'teacher' state dicts) on
Hugging Face. Every one of them is called ``checkpoint.pth``, so mmengine's URL loader, which caches
a download under the URL's basename, would hand the DinoVim-T file back for DinoVim-B. Importing this
module registers a loader for Hugging Face URLs that caches each file under a name derived from its
path in the repository (``Vim_Base_checkpoint.pth``) in torch's hub directory, and that turns a
failed download into an error saying which URL failed and where to put the file by hand.
"""
import os
import os.path as osp
from urllib.parse import urlparse

import torch
from mmengine.dist import barrier, get_dist_info
from mmengine.runner.checkpoint import CheckpointLoader

HUGGINGFACE_REPO = 'https://huggingface.co/Timing1/Dino-Mamba'
PAPER_CHECKPOINTS = {
    'dinovim-tiny': f'{HUGGINGFACE_REPO}/resolve/main/Vim/Tiny/checkpoint.pth',
    'dinovim-small': f'{HUGGINGFACE_REPO}/resolve/main/Vim/Small/checkpoint.pth',
    'dinovim-base': f'{HUGGINGFACE_REPO}/resolve/main/Vim/Base/checkpoint.pth',
    'dinomambareg-base': f'{HUGGINGFACE_REPO}/resolve/main/Mambar/Base/checkpoint.pth',
}


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
    except Exception as error:  # noqa: BLE001 (any network / HTTP failure)
        raise RuntimeError(
            f'could not download {url} ({type(error).__name__}: {error}). Without network '
            f'access, download that file by hand and save it as {local} (the cache this '
            'loader reads), or set the config\'s checkpoint to a local path.') from error
    return local


@CheckpointLoader.register_scheme(
    prefixes=['https://huggingface.co/', 'http://huggingface.co/'], force=True)
def load_from_huggingface(filename: str, map_location=None) -> dict:
    """mmengine checkpoint loader for Hugging Face URLs (rank 0 downloads first)."""
    rank, world_size = get_dist_info()
    if rank == 0:
        local = download(filename)
    if world_size > 1:
        barrier()
        if rank > 0:
            local = download(filename)
    # Downloaded files go through the safe unpickler only (no trusted-local fallback).
    return torch.load(local, map_location=map_location, weights_only=True)
