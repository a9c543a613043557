"""DinoVim / DinoMambaReg: output shapes, token layouts, freezing, counts, registry scopes."""
import os.path as osp

import pytest
import torch
import torch.nn.functional as F

from dinomamba_mm.models.backbones import DinoMambaReg, DinoVim

TINY = dict(embed_dims=32, num_layers=3, headdim=8, d_state=8, chunk_size=64)
SIZES = [(224, 224), (256, 320), (512, 512)]


def _identity_blocks(model):
    """Zero every mixer's out_proj: blocks become identities, outputs show the token layout."""
    with torch.no_grad():
        for layer in model.layers:
            layer.mixer.out_proj.weight.zero_()
    return model


def _embedding(model, img):
    """Patch tokens (B, h*w, C) + their (resized by F.interpolate) position embeddings."""
    conv = model.patch_embed.projection
    patches = F.conv2d(img, conv.weight, conv.bias, stride=16).flatten(2).transpose(1, 2)
    hp, wp = img.shape[-2] // 16, img.shape[-1] // 16
    e = model.num_extra_tokens
    grid = model.pos_embed[:, e:].reshape(1, 14, 14, -1).permute(0, 3, 1, 2)
    if (hp, wp) != (14, 14):
        grid = F.interpolate(grid, size=(hp, wp), mode='bicubic', align_corners=False)
    return patches + grid.flatten(2).transpose(1, 2)


@pytest.mark.parametrize('size', SIZES)
def test_output_shapes_for_every_out_type(size):
    torch.manual_seed(0)
    img = torch.randn(1, 3, *size)
    h, w = size[0] // 16, size[1] // 16
    expected = {
        'cls_token': (1, 32),
        'avg_featmap': (1, 32),
        'featmap': (1, 32, h, w),
        'raw': (1, h * w + 1, 32)
    }
    arch = {**TINY, 'num_layers': 2}
    for out_type, shape in expected.items():
        model = DinoVim(arch=arch, out_type=out_type, out_indices=[0, -1]).eval()
        with torch.no_grad():
            outs = model(img)
        assert len(outs) == 2 and all(o.shape == shape for o in outs), (out_type, size)
    model = DinoVim(arch=arch, out_type='featmap', out_indices=(-2, )).eval()
    with torch.no_grad():
        assert len(model(img)) == 1


def test_interleaved_layout_puts_class_token_in_the_middle():
    torch.manual_seed(0)
    model = _identity_blocks(DinoVim(arch=TINY, out_type='raw', final_norm=False)).eval()
    img = torch.randn(1, 3, 256, 320)  # 16 x 20 = 320 patches
    with torch.no_grad():
        raw, = model(img)
        patches = _embedding(model, img)
    assert raw.shape == (1, 321, 32)
    torch.testing.assert_close(raw[:, 160], (model.cls_token + model.pos_embed[:, 0])[:, 0])
    torch.testing.assert_close(raw[:, :160], patches[:, :160])
    torch.testing.assert_close(raw[:, 161:], patches[:, 160:])


def test_paper_layout_reproduces_double_class_token_and_dino_resize():
    torch.manual_seed(0)
    model = _identity_blocks(DinoVim(arch=TINY, out_type='raw', final_norm=False,
                                     token_layout='paper')).eval()
    img = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        raw, = model(img)
        patches = _embedding(model, img)
    # M = 197 tokens [cls + pos, 196 patches]; a plain class token inserted at M // 2 = 98
    assert raw.shape == (1, 198, 32)
    torch.testing.assert_close(raw[0, 0], (model.cls_token + model.pos_embed[:, 0])[0, 0])
    torch.testing.assert_close(raw[0, 98], model.cls_token[0, 0])
    torch.testing.assert_close(raw[:, 1:98], patches[:, :97])
    torch.testing.assert_close(raw[:, 99:], patches[:, 97:])
    model.out_type = 'cls_token'
    with torch.no_grad():
        cls, = model(img)
    torch.testing.assert_close(cls, model.cls_token[:, 0].expand(1, -1))
    # other sizes: DINO's interpolate_pos_encoding (scale factor (h + 0.1) / 14)
    model.out_type = 'featmap'
    img = torch.randn(1, 3, 256, 320)
    with torch.no_grad():
        featmap, = model(img)
    grid = model.pos_embed[:, 1:].reshape(1, 14, 14, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, scale_factor=(16.1 / 14, 20.1 / 14), mode='bicubic')
    conv = model.patch_embed.projection
    expected = F.conv2d(img, conv.weight, conv.bias, stride=16) + grid
    torch.testing.assert_close(featmap, expected)


def test_registers_follow_the_paper_rule_and_cls_output_is_their_mean():
    torch.manual_seed(0)
    model = _identity_blocks(DinoMambaReg(arch=TINY, out_type='raw', final_norm=False)).eval()
    assert model.register_tokens.shape == (1, 12, 32) and model.pos_embed.shape == (1, 208, 32)
    img = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        raw, = model(img)
    # paper's get_cls_idx for 196 patches, 12 registers: runs of 196 // 13 = 15 patches
    positions = [15, 31, 47, 63, 79, 95, 111, 127, 143, 159, 175, 191]
    expected = model.register_tokens + model.pos_embed[:, :12]
    torch.testing.assert_close(raw[:, positions], expected)
    model.out_type = 'cls_token'
    with torch.no_grad():
        cls, = model(img)
    torch.testing.assert_close(cls, expected.mean(1))


def test_register_positions_are_configurable_and_checked():
    model = _identity_blocks(DinoVim(arch=TINY, num_registers=2, register_positions=[0, 5],
                                     out_type='raw', final_norm=False)).eval()
    with torch.no_grad():
        raw, = model(torch.randn(1, 3, 64, 64))  # 16 patches + 2 registers
    torch.testing.assert_close(raw[:, [0, 5]], model.register_tokens + model.pos_embed[:, :2])
    model = DinoVim(arch=TINY, num_registers=2, register_positions=[0, 40])
    with pytest.raises(ValueError, match='register_positions'):
        model(torch.randn(1, 3, 64, 64))
    with pytest.raises(ValueError, match='register_positions'):
        DinoVim(arch=TINY, num_registers=2, register_positions=[3])


def test_out_source_mixer_is_final_norm_of_the_mixer_output():
    torch.manual_seed(0)
    model = DinoVim(arch=TINY, out_type='raw', out_indices=[0, 1], out_source='mixer').eval()
    captured = []
    for i in (0, 1):
        model.layers[i].mixer.register_forward_hook(lambda m, a, out: captured.append(out))
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 64, 64))
    for out, hidden in zip(outs, captured):
        torch.testing.assert_close(out, F.rms_norm(hidden, (32, ), model.norm_f.weight, 1e-5))


def test_residual_outputs_and_token_plan():
    torch.manual_seed(0)
    model = DinoVim(arch=TINY, out_type='raw', out_indices=[1, 2]).eval()
    seen, hidden = {}, {}
    for i, layer in enumerate(model.layers):
        layer.mixer.register_forward_pre_hook(lambda m, a, i=i: seen.setdefault(i, a[0]))
        layer.mixer.register_forward_hook(lambda m, a, out, i=i: hidden.setdefault(i, out))
    img = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        mid, last = model(img)
    # block 2's mixer sees RMSNorm(residual after block 1); the last output is
    # norm_f(residual after block 1 + mixer output of block 2)
    torch.testing.assert_close(seen[2], F.rms_norm(mid, (32, ), model.layers[2].norm.weight,
                                                    1e-5))
    torch.testing.assert_close(last, F.rms_norm(mid + hidden[2], (32, ), model.norm_f.weight,
                                                1e-5))
    plan = model.token_plan((4, 4))
    assert plan['read'].tolist() == [8]
    assert plan['patches'].tolist() == list(range(8)) + list(range(9, 17))


def test_input_sizes_not_multiple_of_patch():
    model = DinoVim(arch=TINY, out_type='featmap').eval()
    with pytest.raises(ValueError, match='230x250'):
        model(torch.randn(1, 3, 230, 250))
    model = DinoVim(arch=TINY, out_type='featmap', pad_to_patch=True).eval()
    with torch.no_grad():
        featmap, = model(torch.randn(1, 3, 230, 250))
    assert featmap.shape == (1, 32, 15, 16)


def test_arch_validation():
    with pytest.raises(ValueError, match=r"lacks keys \['num_layers'\]"):
        DinoVim(arch=dict(embed_dims=32, headdim=8))
    with pytest.raises(ValueError, match=r"arch has unknown keys \['depth'\] for "
                                         'BidirectionalMamba2Mixer; allowed: '):
        DinoVim(arch={**TINY, 'depth': 3})
    with pytest.raises(ValueError, match='huge'):
        DinoVim(arch='huge')
    with pytest.raises(ValueError, match='out_indices'):
        DinoVim(arch=TINY, out_indices=[3])
    with pytest.raises(ValueError, match='out_type'):
        DinoVim(arch=TINY, out_type='tokens')


@pytest.mark.parametrize('arch, target', [('tiny', 10.7e6), ('small', 40.4e6),
                                          ('base', 89.0e6)])
def test_parameter_counts_match_the_paper(arch, target):
    with torch.device('meta'):
        model = DinoVim(arch=arch)
    count = sum(p.numel() for p in model.parameters())
    assert abs(count - target) / target < 0.02, count
    layer = model.layers[0].mixer
    d = model.embed_dims
    assert layer.in_proj.weight.shape == (2 * 2 * d + 2 * 64 + 2 * d // 64, d)
    assert layer.conv1d.weight.shape == (2 * d + 128, 1, 4)


def test_frozen_stages_and_norm_eval():
    model = DinoVim(arch=TINY, frozen_stages=2, norm_eval=True)
    model.train()
    frozen = {'cls_token', 'pos_embed'} | {n for n, _ in model.named_parameters()
                                          if n.startswith(('patch_embed', 'layers.0.',
                                                           'layers.1.'))}
    for name, param in model.named_parameters():
        assert param.requires_grad == (name not in frozen), name
    assert not model.layers[0].training and not model.layers[1].training
    assert model.layers[2].training and model.layers[2].mixer.in_proj.training
    assert not model.layers[2].norm.training and not model.layers[2].mixer.norm_b.training
    all_frozen = DinoVim(arch=TINY, frozen_stages=3)
    assert not any(p.requires_grad for p in all_frozen.parameters())


def test_drop_path_is_linear_from_zero():
    model = DinoVim(arch=TINY, drop_path_rate=0.1)
    assert isinstance(model.layers[0].drop_path, torch.nn.Identity)
    assert [model.layers[i].drop_path.drop_prob for i in (1, 2)] == pytest.approx([0.05, 0.1])


def test_layer_depth_for_layer_decay():
    model = DinoVim(arch=TINY)
    assert model.get_layer_depth('backbone.pos_embed', 'backbone.') == (0, 5)
    assert model.get_layer_depth('backbone.patch_embed.projection.weight', 'backbone.') == (0, 5)
    assert model.get_layer_depth('backbone.layers.2.mixer.A_log', 'backbone.') == (3, 5)
    assert model.get_layer_depth('backbone.norm_f.weight', 'backbone.') == (4, 5)
    assert model.get_layer_depth('head.fc.weight', 'backbone.') == (4, 5)


@pytest.mark.parametrize('scope', ['mmpretrain', 'mmseg', 'mmdet'])
def test_reachable_from_openmmlab_scopes(scope):
    import importlib

    from mmengine.registry import DefaultScope
    registry = importlib.import_module(f'{scope}.registry').MODELS
    with DefaultScope.overwrite_default_scope(scope):
        for name in ('DinoVim', 'DinoMambaReg', 'LinearViT'):
            arch = TINY if name != 'LinearViT' else dict(
                embed_dims=32, num_layers=1, num_heads=4, feedforward_channels=64)
            model = registry.build(dict(type=f'dinomamba_mm.{name}', arch=arch))
            assert type(model).__name__ == name


def test_activation_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    plain = DinoVim(arch=TINY, out_type='featmap', drop_path_rate=0.)
    ckpt = DinoVim(arch=TINY, out_type='featmap', drop_path_rate=0., with_cp=True)
    ckpt.load_state_dict(plain.state_dict())
    img = torch.randn(1, 3, 64, 64)
    grads = []
    for model in (plain, ckpt):
        model.train()
        model(img)[0].pow(2).mean().backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, msg=name)


PEAK_PROBE = r'''
import sys, torch
from dinomamba_mm.models.backbones import DinoVim
torch.set_num_threads(1)
side, grad, segment = int(sys.argv[1]), sys.argv[2] == '1', int(sys.argv[3]) or None
if len(sys.argv) > 4:  # another mixer, 4 heads
    arch, mixer_cfg = dict(embed_dims=128, num_layers=2, num_heads=4), dict(type=sys.argv[4])
else:
    arch = dict(embed_dims=128, num_layers=2, headdim=32, d_state=32)
    mixer_cfg = dict(segment_len=segment)
model = DinoVim(arch=arch, img_size=64, patch_size=16, drop_path_rate=0., mixer_cfg=mixer_cfg)
inputs = torch.randn(1, 3, side, side)
def status(key):
    return int(next(line for line in open('/proc/self/status')
                    if line.startswith(key)).split()[1]) * 1024
with torch.set_grad_enabled(grad):
    estimate = model.activation_bytes(inputs)
    base = status('VmRSS:')
    outs = model(inputs)
    if grad:
        outs[0].sum().backward()
print('RESULT', estimate, status('VmHWM:') - base)
'''


@pytest.mark.skipif(not osp.exists('/proc/self/status'), reason='reads Linux process status')
@pytest.mark.parametrize('grad, segment, mixer', [
    (False, 0, None), (False, 256, None), (True, 0, None),
    (False, 0, 'dinomamba_mm.LinearMultiheadAttention'),
    (True, 0, 'dinomamba_mm.LinearMultiheadAttention'), (True, 0, 'dinomamba_mm.SoftmaxAttention')])
def test_activation_bytes_is_a_lower_bound_of_the_measured_peak(grad, segment, mixer):
    """The oracle: the process's measured peak resident memory during the forward, with the
    paper's mixer (its segments too) and with attention mixers."""
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, '-c', PEAK_PROBE, '1024', str(int(grad)),
                           str(segment)] + ([mixer] if mixer else []), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    estimate, peak = map(int, proc.stdout.split('RESULT')[-1].split())
    assert estimate <= peak <= 4 * estimate


def test_an_input_too_large_for_the_memory_is_refused_before_the_forward(monkeypatch):
    """An 8192 x 8192 image into DinoVim-B ran for 2 minutes, then failed inside the mixer with
    the allocator's message."""
    from dinomamba_mm.models.backbones import dinovim as dinovim_module
    monkeypatch.setattr(dinovim_module, 'available_memory', lambda device: 2**30)
    model = DinoVim(arch=dict(embed_dims=64, num_layers=2, headdim=16, d_state=16),
                    img_size=64, patch_size=16)
    inputs = torch.empty(1, 3, 8192, 8192, device='meta')  # nothing allocated
    with torch.no_grad():
        needed = model.activation_bytes(inputs) / 2**30
        assert needed > 1
        with pytest.raises(MemoryError) as info:
            model(inputs)
    assert str(info.value) == (
        f'DinoVim: an input of shape (1, 3, 8192, 8192) needs at least {needed:.1f} GiB of '
        'activation memory (no-grad forward), 1.0 GiB is available on meta. Lower it with a '
        'smaller batch or input size, --cfg-options model.backbone.mixer_cfg.segment_len=512 '
        '(segmented forward)')
    model.layers[0].mixer.segment_len = 512  # what the advice sets: the forward now fits
    with torch.no_grad():
        assert model.activation_bytes(inputs) < 2**30
    with pytest.raises(MemoryError, match=r'\(training forward\).*model.backbone.with_cp=True'):
        model(inputs)


def test_dinovim_b_at_8192_needs_more_than_13_gib_without_segments():
    """Hand count, no grad: 262,145 tokens x (2 x 768 residual + 3224 in_proj + 2 x (1664 conv
    + 1536 y + 24 heads x 64 chunk products)) x 4 bytes = 13.9 GiB (chunk_size 64)."""
    model = DinoVim(arch=dict(embed_dims=768, num_layers=1, headdim=64, d_state=64),
                    img_size=32, patch_size=16)
    with torch.no_grad():
        needed = model.activation_bytes(torch.empty(1, 3, 8192, 8192, device='meta'))
    assert needed == 262145 * (2 * 768 + 3224 + 2 * (1664 + 1536 + 24 * 64)) * 4
