"""A tiny DinoVim through torch.compile (train step and eval), torch.export (fixed size and
dynamic height / width) and ONNX (onnxruntime against eager PyTorch); the SSD op's fake and
autograd registrations through torch.library.opcheck."""
import copy

import pytest
import torch

from dinomamba_mm.models.backbones import DinoVim
from dinomamba_mm.ops.ssd import export_decompositions

ARCH = dict(embed_dims=32, num_layers=2, headdim=8, d_state=8, chunk_size=16)


def _model(**kwargs):
    torch.manual_seed(0)
    return DinoVim(arch=ARCH, img_size=32, patch_size=8, out_type='cls_token', **kwargs)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


def test_scan_op_registrations_pass_opcheck():
    """Fake shapes and strides, autograd registration and schema of the custom op, for a
    bidirectional call with gradients (dt shared by both directions through a stride-0
    expansion) and a single-direction one with a final state."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g, requires_grad=True)

    x, B, C = rand(2, 2, 37, 4, 3), rand(2, 2, 37, 2, 5), rand(2, 2, 37, 2, 5)
    dt, A, D = rand(2, 37, 4), (-torch.rand(2, 4) - 0.5).requires_grad_(), rand(2, 4)
    op = torch.ops.dinomamba_mm.ssd_scan.default
    bidirectional = (x, dt.expand(2, -1, -1, -1), A, B, C, D, None, None, None, [False, True],
                     16, True, [0.0, float('inf')], False, 'torch')
    single = (rand(1, 2, 37, 4, 3), rand(1, 2, 37, 4), rand(1, 4), rand(1, 2, 37, 2, 5),
              rand(1, 2, 37, 2, 5), None, rand(1, 2, 37, 4, 3), rand(1, 4), rand(1, 2, 4, 3, 5),
              [True], 8, False, [0.0, float('inf')], True, 'torch')
    for args in (bidirectional, single):
        torch.library.opcheck(op, args, test_utils=('test_schema', 'test_autograd_registration',
                                                    'test_faketensor'))


def test_compile_has_no_graph_break_and_matches_eager():
    """A train step (outputs and every parameter's gradient) and an eval forward, compiled,
    within 1e-5 (relative) of eager; the whole model is one graph. (No drop path: compiled code
    draws other random numbers.)"""
    model = _model(drop_path_rate=0.0)
    img = torch.randn(2, 3, 32, 40, generator=torch.Generator().manual_seed(1))
    explained = torch._dynamo.explain(model)(img)
    assert explained.graph_break_count == 0, explained.break_reasons
    compiled = torch.compile(copy.deepcopy(model))
    out, out_c = model(img)[0], compiled(img)[0]
    assert _relative(out_c, out) < 1e-5
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    (out * weights).sum().backward()
    (out_c * weights).sum().backward()
    for (name, p), p_c in zip(model.named_parameters(), compiled.parameters()):
        assert _relative(p_c.grad, p.grad) < 1e-5, name
    model.eval()
    compiled.eval()
    with torch.no_grad():
        assert _relative(compiled(img)[0], model(img)[0]) < 1e-5


def test_export_keeps_the_scan_as_one_op_and_matches_eager():
    model = _model().eval()
    img = torch.randn(1, 3, 32, 48)
    with torch.no_grad():
        program = torch.export.export(model, (img, ))
        scans = [n for n in program.graph.nodes
                 if n.target is torch.ops.dinomamba_mm.ssd_scan.default]
        assert len(scans) == ARCH['num_layers']
        assert _relative(program.module()(img)[0], model(img)[0]) < 1e-6
        lowered = program.run_decompositions(export_decompositions())
        assert not [n for n in lowered.graph.nodes if 'dinomamba_mm' in str(n.target)]
        assert _relative(lowered.module()(img)[0], model(img)[0]) < 1e-5


@pytest.mark.parametrize('token_layout,num_registers', [('interleaved', 0), ('interleaved', 3)])
def test_export_with_dynamic_height_and_width(token_layout, num_registers):
    """One program for every patch grid: traced at 5 x 6 patches (not the stored 4 x 4 grid,
    whose position embedding is used without resizing), run at 8 x 5 and 3 x 7."""
    model = _model(token_layout=token_layout, num_registers=num_registers).eval()
    h, w = torch.export.Dim('h', min=1, max=64), torch.export.Dim('w', min=1, max=64)
    with torch.no_grad():
        program = torch.export.export(model, (torch.randn(2, 3, 40, 48), ),
                                      dynamic_shapes=({2: 8 * h, 3: 8 * w}, ))
        for size in ((64, 40), (24, 56)):
            img = torch.randn(2, 3, *size)
            assert _relative(program.module()(img)[0], model(img)[0]) < 1e-6


def test_onnx_round_trip(tmp_path):
    onnxruntime = pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    model = _model().eval()
    img = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        program = torch.export.export(model, (img, )).run_decompositions(export_decompositions())
        torch.onnx.export(program, (img, ), dynamo=True).save(str(tmp_path / 'dinovim.onnx'))
        ref = model(img)[0]
    session = onnxruntime.InferenceSession(str(tmp_path / 'dinovim.onnx'),
                                           providers=['CPUExecutionProvider'])
    out = session.run(None, {session.get_inputs()[0].name: img.numpy()})[0]
    assert _relative(torch.from_numpy(out), ref) < 1e-5
