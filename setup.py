"""Install dinomamba_mm.

The runtime pins live in requirements/runtime.txt, the extras in the other files of
requirements/: deploy (ONNX export), demo, benchmarks, tests (the test tools and every other
extra), mim. mmcv is not among the runtime pins: as for mmpretrain, mmseg and mmdet, it comes from
``mim install`` (requirements/mminstall.txt, the ``mim`` extra), which picks the wheel built for
the installed torch and CUDA, or from ``python -m dinomamba_mm.install_mmcv`` where no such wheel
exists (a cached wheel, else a build with compiled ops); the whole environment (torch pair, mmcv built for the installed
torch, the OpenMMLab stack) is set up by ``tools/setup_env.sh`` (``make env``).
Like mmpretrain, configs/, tools/ and model-index.yml are made part of the package under
``dinomamba_mm/.mim`` so that ``_base_ = 'dinomamba_mm::...'`` works from an installed package.
"""
import os
import os.path as osp
import shutil
import sys

from setuptools import find_packages, setup

HERE = osp.dirname(osp.abspath(__file__))
MIM_ITEMS = ('configs', 'tools', 'model-index.yml')


def read_version() -> str:
    namespace: dict = {}
    with open(osp.join(HERE, 'dinomamba_mm', 'version.py')) as f:
        exec(compile(f.read(), 'version.py', 'exec'), namespace)
    return namespace['__version__']


def read_requirements(name: str) -> list:
    """The requirements of ``requirements/<name>``, with those of its ``-r other.txt`` lines."""
    requirements = []
    with open(osp.join(HERE, 'requirements', name)) as f:
        for line in f:
            line = line.split('#')[0].strip()
            if line.startswith('-r '):
                requirements += read_requirements(line[len('-r '):].strip())
            elif line:
                requirements.append(line)
    return requirements


def add_mim_extension() -> None:
    """Expose configs/, tools/ and model-index.yml as ``dinomamba_mm/.mim/...``.

    Editable installs get symlinks (edits are seen at once); wheels and plain installs get copies.
    """
    editable = any(arg in sys.argv for arg in ('develop', 'editable_wheel'))
    building = any(arg in sys.argv
                   for arg in ('bdist_wheel', 'sdist', 'install', 'build'))
    if not (editable or building):
        return
    mim_root = osp.join(HERE, 'dinomamba_mm', '.mim')
    os.makedirs(mim_root, exist_ok=True)
    for item in MIM_ITEMS:
        src = osp.join(HERE, item)
        dst = osp.join(mim_root, item)
        if not osp.exists(src):
            continue
        if osp.islink(dst) or osp.isfile(dst):
            os.remove(dst)
        elif osp.isdir(dst):
            shutil.rmtree(dst)
        if editable:
            os.symlink(osp.relpath(src, mim_root), dst)
        elif osp.isdir(src):
            shutil.copytree(src, dst,
                            ignore=shutil.ignore_patterns('__pycache__', '*.py[cod]'))
        else:
            shutil.copyfile(src, dst)


if __name__ == '__main__':
    add_mim_extension()
    setup(
        name='dinomamba_mm',
        version=read_version(),
        description='Vision Mamba (Mamba-2) backbones with DINO self-supervised '
        'pretraining for OpenMMLab (mmpretrain, mmsegmentation, mmdetection)',
        long_description=open(osp.join(HERE, 'README.md')).read()
        if osp.exists(osp.join(HERE, 'README.md')) else '',
        long_description_content_type='text/markdown',
        keywords='vision mamba, ssd, mamba-2, dino, self-supervised, openmmlab',
        # the project has no public repository yet: the paper it reproduces is its public page
        url='https://arxiv.org/abs/2511.18380',
        packages=find_packages(exclude=('configs', 'tools', 'tests', 'docs')),
        include_package_data=True,
        package_data={'dinomamba_mm': ['.mim/**/*', '.mim/*']},
        python_requires='>=3.9',
        license='Apache License 2.0',
        install_requires=read_requirements('runtime.txt'),
        extras_require={
            # ONNX export and its check (tools/deployment/pytorch2onnx.py)
            'deploy': read_requirements('deploy.txt'),
            'demo': read_requirements('demo.txt'),
            'benchmarks': read_requirements('benchmarks.txt'),
            'tests': read_requirements('tests.txt'),
            'mim': read_requirements('mminstall.txt'),
            # GPU users only: mamba_ssm builds against CUDA; nothing requires it.
            'mamba': ['mamba-ssm'],
        },
        zip_safe=False,
    )
