"""tools/deployment/pytorch2onnx.py: a DinoVim classifier (config + checkpoint) exported to
ONNX runs in onnxruntime within 1e-4 of PyTorch; a checkpoint that does not fit is an error."""
import os.path as osp
import sys

import pytest
import torch

from dinomamba_mm.checkpoints import CheckpointError

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(REPO, 'tests'))
from helpers.tools import load_tool  # noqa: E402

pytest.importorskip('onnxruntime')
pytest.importorskip('onnxscript')
pytorch2onnx = load_tool('tools/deployment/pytorch2onnx.py')
CONFIG = osp.join(REPO, 'configs/demo/linear-probe_dinovim-demo_synthetic.py')
NO_BACKBONE_FILE = ['--cfg-options', 'model.backbone.checkpoint=None']


def test_classifier_round_trip(tmp_path):
    args = pytorch2onnx.parse_args([CONFIG, *NO_BACKBONE_FILE])
    model = pytorch2onnx.build_model(args)
    with torch.no_grad():
        for p in model.parameters():  # weights other than the initial ones, from a file
            p.add_(torch.randn_like(p) * 0.01)
    checkpoint = str(tmp_path / 'classifier.pth')
    torch.save({'state_dict': model.model.state_dict()}, checkpoint)
    output = str(tmp_path / 'classifier.onnx')
    diff = pytorch2onnx.main([CONFIG, checkpoint, '--shape', '32', '32', '--batch-size', '2',
                              '--output-file', output, *NO_BACKBONE_FILE])
    assert diff <= 1e-4 and osp.getsize(output) > 0


def test_checkpoint_of_another_model_is_refused(tmp_path):
    checkpoint = str(tmp_path / 'other.pth')
    torch.save({'state_dict': {'other.weight': torch.zeros(2)}}, checkpoint)
    with pytest.raises(CheckpointError, match='other.weight'):
        pytorch2onnx.main([CONFIG, checkpoint, '--shape', '32', '32', '--output-file',
                           str(tmp_path / 'x.onnx'), *NO_BACKBONE_FILE])


def test_checkpoint_with_non_finite_weights_is_refused(tmp_path):
    model = pytorch2onnx.build_model(pytorch2onnx.parse_args([CONFIG, *NO_BACKBONE_FILE]))
    state_dict = model.model.state_dict()
    name = next(k for k, v in state_dict.items() if v.is_floating_point())
    state_dict[name] = torch.full_like(state_dict[name], float('nan'))
    checkpoint = str(tmp_path / 'nan.pth')
    torch.save({'state_dict': state_dict}, checkpoint)
    output = tmp_path / 'nan.onnx'
    with pytest.raises(CheckpointError, match=f'tensors hold NaN or Inf values: \\[{name}'):
        pytorch2onnx.main([CONFIG, checkpoint, '--shape', '32', '32', '--output-file',
                           str(output), *NO_BACKBONE_FILE])
    assert not output.exists()


@pytest.mark.parametrize('missing', ['onnx', 'onnxruntime', 'onnxscript'])
def test_a_missing_export_package_names_the_extra(missing, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, missing, None)  # import / find_spec: not installed
    with pytest.raises(ImportError, match=f'not installed: {missing}. Install them with: pip '
                       'install "dinomamba_mm\\[deploy\\]"'):
        pytorch2onnx.main([CONFIG, '--output-file', str(tmp_path / 'model.onnx'),
                           *NO_BACKBONE_FILE])


def test_a_config_that_is_not_a_classifier_or_segmentor_is_refused(tmp_path):
    """A DINO config exported, then failed in the check (AttributeError: 'tuple' object has no
    attribute 'numpy'), leaving the file; a detector failed inside mmdet."""
    output = tmp_path / 'dino.onnx'
    config = osp.join(REPO, 'configs/demo/dino_dinovim-demo_synthetic.py')
    with pytest.raises(ValueError) as info:
        pytorch2onnx.main([config, '--shape', '32', '32', '--output-file', str(output)])
    assert str(info.value) == (
        f'{config} builds a DINO (dinomamba_mm.models.selfsup.dino), which pytorch2onnx does '
        "not export: it exports image classifiers (mmpretrain's ImageClassifier) and "
        "segmentors (mmseg's BaseSegmentor, e.g. EncoderDecoder), whose tensor forward gives "
        'one tensor of scores. Export a classifier or segmentor config with the same backbone')
    assert not output.exists()


@pytest.mark.parametrize('failure', ['export', 'tolerance'])
def test_a_failed_export_leaves_the_earlier_file(tmp_path, monkeypatch, failure):
    """An export that fails halfway (or whose output is off) left its file under the name
    asked for, replacing a good one."""
    output = tmp_path / 'model.onnx'
    output.write_bytes(b'an earlier good export')
    if failure == 'export':
        def export(model, img, path):
            with open(path, 'wb') as f:
                f.write(b'half a model')
            raise OSError(28, 'No space left on device')

        monkeypatch.setattr(pytorch2onnx, 'export', export)
        expected = pytest.raises(OSError, match='No space left')
    else:
        def export(model, img, path):
            with open(path, 'wb') as f:
                f.write(b'a model whose outputs are off')

        monkeypatch.setattr(pytorch2onnx, 'export', export)
        monkeypatch.setattr(pytorch2onnx, 'max_relative_difference', lambda *args: 0.5)
        expected = pytest.raises(SystemExit, match='differs from PyTorch by 5.00e-01 > '
                                                   f'--tolerance 0.0001: {output} not written')
    with expected:
        pytorch2onnx.main([CONFIG, '--shape', '32', '32', '--output-file', str(output),
                           *NO_BACKBONE_FILE])
    assert output.read_bytes() == b'an earlier good export'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['model.onnx']


def test_an_infinite_tolerance_is_refused(capsys):
    """--tolerance inf accepted any output."""
    with pytest.raises(SystemExit):
        pytorch2onnx.parse_args([CONFIG, '--tolerance', 'inf'])
    assert '--tolerance must be a number in (0, inf), got inf' in capsys.readouterr().err
