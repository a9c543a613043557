"""Export a classifier or a segmentor (config + checkpoint) to ONNX and check it with onnxruntime.

What is exported is the model's tensor forward, ``model(img, mode='tensor')``, at one input
shape: the class scores of an mmpretrain ``ImageClassifier`` (backbone, neck, head), the
segmentation logits of an mmseg ``EncoderDecoder`` (e.g. DinoVim + UperNet), both before the
data preprocessor (feed normalised images). The model goes through ``torch.export``, the SSD scan
op is lowered to ATen ops (``dinomamba_mm.ops.ssd.export_decompositions``) and torch's dynamo
ONNX exporter writes the file. onnxruntime then runs it on a random image and the tool prints the
largest difference to PyTorch relative to the largest PyTorch output; above ``--tolerance`` it
exits with status 1. The file is written and checked in a hidden folder next to
``--output-file`` and moved there only when it passed: a failed export or check leaves an earlier
file of that name as it was. Models other than classifiers and segmentors (a DINO or a detector
config) are refused before anything is exported.

Needs onnx, onnxruntime and onnxscript: ``pip install "dinomamba_mm[deploy]"``.

Example:
  python tools/deployment/pytorch2onnx.py configs/demo/upernet_dinovim-demo_synthetic-ade.py \\
      work_dirs/upernet/iter_200.pth --shape 256 256 --output-file upernet.onnx
"""
import argparse
import importlib.util
import os
import os.path as osp
import shutil
import tempfile
from typing import List, Optional

import numpy as np
import torch
from mmengine.config import Config, DictAction
from mmengine.registry import MODELS, init_default_scope

from dinomamba_mm.argument_checks import check_number
from dinomamba_mm.checkpoints import load_checkpoint_into
from dinomamba_mm.ops.ssd import export_decompositions


EXPORT_PACKAGES = ('onnx', 'onnxruntime', 'onnxscript')


def check_export_packages() -> None:
    """ImportError naming the install command when a package the export needs is missing
    (torch's ONNX exporter would fail later, naming only one module)."""
    missing = [name for name in EXPORT_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f'pytorch2onnx needs {", ".join(EXPORT_PACKAGES)}; not installed: '
                          f'{", ".join(missing)}. Install them with: pip install '
                          '"dinomamba_mm[deploy]" (in a source checkout: pip install -r '
                          'requirements/deploy.txt)')


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Export a model to ONNX and check it with '
                                                 'onnxruntime')
    parser.add_argument('config', help='model config file')
    parser.add_argument('checkpoint', nargs='?', help='checkpoint file (none: random weights)')
    parser.add_argument('--output-file', default='model.onnx', help='ONNX file to write')
    parser.add_argument('--shape', type=int, nargs=2, default=[224, 224], metavar=('H', 'W'),
                        help='input height and width')
    parser.add_argument('--batch-size', type=int, default=1, help='input batch size')
    parser.add_argument('--tolerance', type=float, default=1e-4,
                        help='largest accepted relative difference of onnxruntime to PyTorch')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config entries, e.g. model.backbone.checkpoint=None')
    args = parser.parse_args(argv)
    if min(args.shape) <= 0 or args.batch_size <= 0:
        parser.error(f'--shape {args.shape} and --batch-size {args.batch_size} must be positive')
    try:
        check_number('--tolerance', args.tolerance, 0, exclusive_minimum=True)
    except ValueError as error:
        parser.error(str(error))
    return args


class TensorForward(torch.nn.Module):
    """``model(img, mode='tensor')`` as a one-argument module."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.model(img, mode='tensor')


def build_model(args: argparse.Namespace) -> torch.nn.Module:
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    model = MODELS.build(cfg.model)
    check_exportable(model, args.config)
    if args.checkpoint:  # the whole model's weights, checked (file, layout, finite), strictly
        load_checkpoint_into(model, args.checkpoint, prefix=None)
    return TensorForward(model.eval())


def check_exportable(model: torch.nn.Module, config: str) -> None:
    """Refuse a model whose tensor forward is not one tensor of scores."""
    from mmpretrain.models.classifiers import ImageClassifier
    from mmseg.models.segmentors import BaseSegmentor
    if not isinstance(model, (ImageClassifier, BaseSegmentor)):
        raise ValueError(
            f'{config} builds a {type(model).__name__} ({type(model).__module__}), which '
            "pytorch2onnx does not export: it exports image classifiers (mmpretrain's "
            "ImageClassifier) and segmentors (mmseg's BaseSegmentor, e.g. EncoderDecoder), "
            'whose tensor forward gives one tensor of scores. Export a classifier or segmentor '
            'config with the same backbone')


def export(model: torch.nn.Module, img: torch.Tensor, output_file: str) -> None:
    with torch.no_grad():
        program = torch.export.export(model, (img, ))
        program = program.run_decompositions(export_decompositions())
        torch.onnx.export(program, (img, ), dynamo=True, verbose=False).save(output_file)


def max_relative_difference(output_file: str, model: torch.nn.Module,
                            img: torch.Tensor) -> float:
    """max |onnxruntime - torch| / max |torch| over the output."""
    import onnxruntime
    session = onnxruntime.InferenceSession(output_file, providers=['CPUExecutionProvider'])
    ours = session.run(None, {session.get_inputs()[0].name: img.numpy()})[0]
    with torch.no_grad():
        ref = model(img).numpy()
    return float(np.abs(ours - ref).max() / np.abs(ref).max())


def export_checked(model: torch.nn.Module, img: torch.Tensor, output_file: str,
                   tolerance: float) -> float:
    """Export and check in a hidden folder beside ``output_file``, then move the file (and its
    external data, if any, first) there; on any failure remove the folder, so that an earlier
    file of that name stays as it was.

    Returns:
        the largest relative difference of onnxruntime to PyTorch.
    """
    parent, name = osp.split(osp.abspath(output_file))
    staging = tempfile.mkdtemp(prefix=f'.{name}.', dir=parent)
    try:
        staged = osp.join(staging, name)
        export(model, img, staged)
        diff = max_relative_difference(staged, model, img)
        print(f'{output_file}: input {tuple(img.shape)}, max relative difference of '
              f'onnxruntime to PyTorch {diff:.2e} (tolerance {tolerance:g})')
        if not diff <= tolerance:
            raise SystemExit(f'onnxruntime differs from PyTorch by {diff:.2e} > --tolerance '
                             f'{tolerance:g}: {output_file} not written')
        for item in sorted(os.listdir(staging), key=lambda item: item == name):
            os.replace(osp.join(staging, item), osp.join(parent, item))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return diff


def main(argv: Optional[List[str]] = None) -> float:
    args = parse_args(argv)
    check_export_packages()
    model = build_model(args)
    img = torch.randn(args.batch_size, 3, *args.shape, generator=torch.Generator().manual_seed(0))
    return export_checked(model, img, args.output_file, args.tolerance)


if __name__ == '__main__':
    main()
