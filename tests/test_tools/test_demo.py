"""tools/demo.py: its helpers, the feature extraction against the backbones' own outputs, the
orderings and verdicts on hand-made results (default suite); the --quick smoke test and the full
demo (slow) with the shipped checkpoints, which must give the verdicts docs/demo.md reports.

The demo runs read the demo's default data roots (data/synthetic_demo_quick, data/synthetic_demo),
generated when missing.
"""
import io
import json
import os.path as osp
import subprocess
import sys

import numpy as np
import pytest
from mmengine.config import Config

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEMO = osp.join(REPO, 'tools', 'demo.py')
sys.path.insert(0, osp.join(REPO, 'tests'))
from helpers.tools import load_tool  # noqa: E402

demo = load_tool('tools/demo.py')


def _run_demo(work_dir, *extra):
    result = subprocess.run([sys.executable, DEMO, '--work-dir', str(work_dir), *extra],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def _check_outputs(stdout, work_dir):
    """Every picture and log the closing lines name exists, and the tables hold the numbers of
    results.json."""
    for path in ('rank/spectra.png', 'maps.png', 'maps_by_block.png', 'scores.png',
                 'training_loss.png', 'results.json', 'results.md', 'demo_console.log'):
        assert osp.isfile(osp.join(work_dir, path)), path
        if path.endswith('.png'):
            assert osp.join(work_dir, path) in stdout, path
    with open(osp.join(work_dir, 'results.json')) as f:
        results = json.load(f)
    ranks = results['rank']['ranks']
    for model in demo.DINO_MODELS:
        assert f'| {model.label} | {model.mixer} | {ranks[model.key]["rank"]:.1f} |' in stdout
        assert f'| {model.label} | {results["top1"][model.key]:.1f} |' in stdout
        assert f'{results["miou"][model.key]:.1f}' in stdout
    for model in demo.MODELS:
        assert f'{results["auc"][model.key][-1]:.3f}' in stdout
        assert len(results['auc'][model.key]) == demo.num_blocks(model)
    for ordering in results['orderings']:
        assert ordering['name'] in stdout
    # the rank bounds hold on any weights: blocks of C = 32, D_QK = N = 16
    assert ranks['linearvit']['rank'] <= 16 and ranks['dinovim']['rank_off'] <= 16
    return results


@pytest.mark.slow
def test_quick_demo(tmp_path):
    work_dir = tmp_path / 'demo_quick'
    stdout = _run_demo(work_dir, '--quick', '--seed', '1')
    results = _check_outputs(stdout, str(work_dir))
    assert '--quick: a smoke test' in stdout
    assert results['data']['train'] == 140  # the quick data set (the full one: 4000 / 2000)
    assert results['orderings'][0]['holds']  # the rank hierarchy is structural
    assert results['checkpoints']['dinovim'] == osp.join(REPO, 'checkpoints/demo/dinovim.pth')


def _documented_verdicts():
    """{ordering: verdict} of the seed-0 run in docs/demo.md: the rows of the demo's printed
    orderings table, whose verdicts count 1 seed."""
    names = {ordering.name for ordering in demo.ORDERINGS}
    with open(osp.join(REPO, 'docs', 'demo.md')) as f:
        rows = [[cell.strip() for cell in line.strip().strip('|').split('|')]
                for line in f if line.lstrip().startswith('| ')]
    return {row[0]: row[-1] for row in rows
            if row[0] in names and len(row) == 4 and row[-1].endswith(' of 1 seed)')}


@pytest.mark.slow
def test_full_demo_shows_the_documented_results(tmp_path):
    """The shipped checkpoints give the verdicts docs/demo.md reports for seed 0."""
    documented = _documented_verdicts()
    assert set(documented) == {ordering.name for ordering in demo.ORDERINGS}
    work_dir = tmp_path / 'demo'
    stdout = _run_demo(work_dir, '--seed', '0')
    results = _check_outputs(stdout, str(work_dir))
    assert {row['name']: demo.verdict([row['holds']]) for row in results['orderings']} == \
        documented


def test_steps_draw_a_tqdm_bar_on_a_terminal_and_one_line_per_step_in_a_log():
    class Terminal(io.StringIO):

        def isatty(self):
            return True

    terminal = Terminal()
    steps = demo.Steps(2, terminal)
    steps.begin('maps', total=4)
    for _ in range(4):
        steps.bar.update()
    steps.bar.refresh()  # tqdm redraws at most every 0.1 s
    steps.end('figure maps.png')
    out = terminal.getvalue()
    assert '[1/2] maps' in out and '4/4' in out and '100%' in out  # tqdm's bar
    assert out.endswith('[1/2] maps: figure maps.png (0s)\n')
    log = io.StringIO()  # not a terminal: no bar, the summary line only
    steps = demo.Steps(1, log)
    steps.begin('synthetic data')
    steps.end('found')
    assert log.getvalue() == '[1/1] synthetic data: found (0s)\n'


def test_set_epochs_shortens_the_schedule():
    cfg = Config.fromfile(osp.join(REPO, 'configs/demo/dino_dinovim-demo_synthetic.py'))
    warmup_end = cfg.param_scheduler[0]['end']
    demo.set_epochs(cfg, warmup_end + 2)
    assert [(s['begin'], s['end']) for s in cfg.param_scheduler] == [
        (0, warmup_end), (warmup_end, warmup_end + 2)]
    assert cfg.param_scheduler[-1]['T_max'] == 2
    assert cfg.train_cfg.max_epochs == cfg.default_hooks.checkpoint.interval == warmup_end + 2
    # no room for the warm-up: a cosine schedule alone
    demo.set_epochs(cfg, 1)
    assert [(s['type'], s['begin'], s['end']) for s in cfg.param_scheduler] == [
        ('CosineAnnealingLR', 0, 1)]


@pytest.mark.parametrize('model', demo.TRAINED, ids=lambda m: m.key)
def test_pretraining_keeps_a_checkpoint_of_every_epoch(model):
    # an hour-long run killed near its end must resume from the last epoch, not from scratch
    cfg = Config.fromfile(model.config)
    assert cfg.train_cfg.max_epochs > 1
    assert cfg.default_hooks.checkpoint.interval == 1


def test_the_four_trainings_share_data_schedule_and_optimiser():
    """The design: the same images, epochs, batch, optimiser and augmentation values for the
    three DINO models and the supervised DinoVim; matched width, N = D_QK."""
    cfgs = {m.key: Config.fromfile(m.config) for m in demo.TRAINED}
    for key, cfg in cfgs.items():
        assert cfg.train_dataloader.dataset.data_root == 'data/synthetic_demo/cls', key
        assert cfg.train_dataloader.batch_size == 32 and cfg.train_cfg.max_epochs == 40, key
        assert cfg.optim_wrapper.optimizer == cfgs['dinovim'].optim_wrapper.optimizer, key
        assert cfg.param_scheduler == cfgs['dinovim'].param_scheduler, key
        assert cfg.model.backbone.img_size == 64 and cfg.model.backbone.patch_size == 8, key
    crop = cfgs['dinovim'].train_pipeline[1]
    supervised = {t['type']: t for t in cfgs['dinovim_supervised'].train_pipeline}
    assert supervised['RandomResizedCrop']['crop_ratio_range'] == crop['global_crop_scale']
    assert supervised['RandomApply']['transforms'][0]['hue'] == crop['color_jitter']['hue']
    assert supervised['RandomGrayscale']['prob'] == crop['grayscale_prob']
    assert cfgs['dinovim_supervised'].model.backbone == cfgs['dinovim'].model.backbone
    vit = cfgs['vit'].model.backbone.arch
    assert vit['embed_dims'] // vit['num_heads'] == cfgs['dinovim'].model.backbone.arch[
        'd_state'] == 16
    assert vit['embed_dims'] == cfgs['dinovim'].model.backbone.arch['embed_dims'] == \
        cfgs['linearvit'].model.backbone.arch['embed_dims']



def test_the_supervised_augmentation_runs_for_every_hue_draw():
    """The supervised DinoVim's colour jitter on numpy 2: mmpretrain's ColorJitter (through mmcv's
    adjust_hue) raises OverflowError for every negative hue factor, half of the draws."""
    from mmengine.dataset import Compose
    from mmengine.registry import init_default_scope

    import dinomamba_mm  # noqa: F401
    init_default_scope('mmpretrain')
    cfg = Config.fromfile(demo.SUPERVISED.config)
    pipeline = Compose(cfg.train_pipeline[1:])  # after the image loading
    jitter = pipeline.transforms[2].transforms.transforms[0]
    image = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    np.random.seed(0)
    hues = []
    for _ in range(8):
        state = np.random.get_state()
        hues.append(jitter._rand_params()[-1])
        np.random.set_state(state)
        jitter(dict(img=image.copy()))  # the draw just recorded
    assert min(hues) < 0 < max(hues)
    for _ in range(8):
        packed = pipeline(dict(img=image.copy(), img_shape=(64, 64), ori_shape=(64, 64)))
        assert packed['inputs'].shape == (3, 64, 64)

def test_the_probe_on_images_is_the_probe_on_features():
    """linear-probe_dinovim-demo_synthetic.py (stock route, images every epoch) is the demo's
    probe on features with the frozen DINO DinoVim in the backbone's place."""
    images = Config.fromfile(osp.join(REPO, 'configs/demo/linear-probe_dinovim-demo_synthetic.py'))
    features = Config.fromfile(demo.PROBE_CONFIG)
    for key in ('neck', 'head'):
        assert images.model[key] == features.model[key], key
    assert images.optim_wrapper == features.optim_wrapper
    assert images.param_scheduler == features.param_scheduler
    assert images.train_cfg == features.train_cfg
    frozen = dict(images.model.backbone.backbone)
    dino = dict(Config.fromfile(demo.DINOVIM.config).model.backbone)
    assert frozen.pop('out_indices') == [-1] and frozen.pop('final_norm')
    assert frozen == dict(dino, type='dinomamba_mm.DinoVim', out_type='cls_token')


def _results(**changes):
    """A run's results, values chosen by hand (ViT > DinoVim > LinearViT everywhere)."""
    results = dict(
        seed=0, source='hand-made', settings=dict(rank_scenes=4, map_scenes=500),
        data=dict(train=4000, val=2000, classes=7),
        rank=dict(ranks={k: dict(rank=r, rank_diag=32.0, rank_off=r, C=32, L=65) for k, r in
                         (('vit', 31.0), ('dinovim', 24.0), ('linearvit', 16.0))}),
        top1=dict(vit=80.0, dinovim=78.0, linearvit=70.0, dinovim_supervised=95.0,
                  dinovim_random=40.0),
        auc=dict(vit=[0.3, 0.5, 0.6, 0.8], linearvit=[0.4, 0.45, 0.5, 0.55],
                 dinovim=[0.45, 0.5, 0.55, 0.6, 0.6, 0.65, 0.7, 0.7],
                 dinovim_supervised=[0.5] * 8, dinovim_random=[0.5] * 8),
        miou=dict(vit=60.0, dinovim=55.0, linearvit=40.0))
    for key, value in changes.items():
        results[key] = value
    return results


def test_orderings_on_hand_made_results():
    rows = {row['name']: row for row in demo.check_orderings(_results())}
    assert all(row['holds'] for row in rows.values()), rows
    assert rows['AUC of DinoVim: last block > first block']['values'] == '0.450 -> 0.700'
    assert rows["DinoVim's lead over LinearViT: mIoU > probe"]['values'] == \
        '+15.0 mIoU vs +8.0 top-1'
    # flip single facts: exactly the orderings that read them turn
    flipped = _results(top1=dict(_results()['top1'], linearvit=79.0),
                       miou=dict(vit=50.0, dinovim=55.0, linearvit=40.0))
    flipped['auc'] = dict(flipped['auc'], dinovim=[0.55, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5])
    failed = {row['name'] for row in demo.check_orderings(flipped) if not row['holds']}
    assert failed == {
        'probe: DinoVim > LinearViT',  # 78 vs 79
        'AUC of DinoVim < 0.5 at the first block', 'AUC of DinoVim: last block > first block',
        'AUC: DINO DinoVim > supervised DinoVim',  # 0.5 vs 0.5: not strictly greater
        'AUC: DinoVim > LinearViT',  # 0.5 vs 0.55
        'mIoU: ViT > DinoVim'}
    # still holding: ViT > LinearViT > DinoVim by probe (80, 79, 78) and by AUC (0.8, 0.55,
    # 0.5); DinoVim's lead over LinearViT grows from -1 (probe) to +15 (mIoU)


def test_verdicts_count_the_seeds_and_tables_give_mean_and_spread():
    assert demo.verdict([True]) == 'holds (1 of 1 seed)'
    assert demo.verdict([True, True, True]) == 'holds (3 of 3 seeds)'
    assert demo.verdict([True, False, True]) == 'does not hold (2 of 3 seeds)'
    runs = []
    for seed, vit_top1 in enumerate((80.0, 77.0, 83.0)):
        results = _results(seed=seed, top1=dict(_results()['top1'], vit=vit_top1))
        results['orderings'] = demo.check_orderings(results)
        runs.append(results)
    table = demo.format_tables(runs)
    # mean 80.0, sample standard deviation sqrt((0 + 9 + 9) / 2) = 3.0
    assert '| ViT | 80.0 +- 3.0 (80.0 / 77.0 / 83.0) | 78.2 |' in table
    assert '| probe: ViT > DinoVim | 78.2 > 78.1 | 80.0 vs 78.0; 77.0 vs 78.0; 83.0 vs 78.0 | ' \
        'does not hold (2 of 3 seeds) |' in table
    assert '| rank: softmax > Mamba > linear attention | structural | ' in table
    assert 'holds (3 of 3 seeds)' in table and 'Seeds 0, 1, 2' in table


def test_summarize_reads_finished_runs(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match='results.json not found'):
        demo.main(['--summarize', str(tmp_path)])
    for seed in (0, 1):
        results = _results(seed=seed)
        results['orderings'] = demo.check_orderings(results)
        (tmp_path / f's{seed}').mkdir()
        (tmp_path / f's{seed}' / 'results.json').write_text(json.dumps(results))
    demo.main(['--summarize', str(tmp_path / 's0'), str(tmp_path / 's1')])
    assert 'holds (2 of 2 seeds)' in capsys.readouterr().out


def test_features_are_the_backbones_own_outputs(tmp_path, one_thread):
    """The extraction (raw tokens of the last block, split by the token layout) gives what each
    backbone returns as out_type 'cls_token' and 'featmap' (a second route), for DinoVim (class
    token in the middle) and ViT (first), and labels equal to meta/<split>.txt's."""
    import torch
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmseg.registry import DATASETS

    import dinomamba_mm  # noqa: F401
    from dinomamba_mm.analysis.backbone_loading import (IMAGENET_MEAN, IMAGENET_STD,
                                                        build_backbone)
    data = tmp_path / 'data'
    generator = load_tool('tools/data/make_synthetic.py')
    generator.main(['--out', str(data), *demo.DEMO_STYLE, '--num-train', '6', '--num-val',
                    '5'])
    args = demo.parse_args(['--work-dir', str(tmp_path / 'work'), '--data-root', str(data)])
    torch.manual_seed(0)
    for model in (demo.DINOVIM, demo.VIT):
        backbone = build_backbone(Config.fromfile(model.config))
        checkpoint = str(tmp_path / f'{model.key}.pth')
        torch.save(dict(state_dict={f'backbone.{k}': v for k, v in
                                    backbone.state_dict().items()}), checkpoint)
        folder = demo.extract_features(args, model, checkpoint)
        init_default_scope('mmseg')
        scenes = demo.scenes_config(args)
        dataset = DATASETS.build(scenes.val_dataloader.dataset)
        images = torch.stack([dataset[i]['inputs'].flip(0).float() for i in range(5)])
        images = (images - torch.tensor(IMAGENET_MEAN).view(3, 1, 1)) / torch.tensor(
            IMAGENET_STD).view(3, 1, 1)
        backbone.eval()
        with torch.no_grad():
            backbone.out_type = 'cls_token'
            tokens = backbone(images)[0].numpy()
            backbone.out_type = 'featmap'
            maps = backbone(images)[0].permute(0, 2, 3, 1).numpy()
        with np.load(osp.join(folder, 'val_cls.npz')) as saved:
            np.testing.assert_allclose(saved['features'], tokens, atol=5e-3, rtol=2e-3)
            with open(data / 'cls' / 'meta' / 'val.txt') as f:
                assert saved['labels'].tolist() == [int(line.split()[1]) for line in f]
        with np.load(osp.join(folder, 'val_patches.npz')) as saved:
            np.testing.assert_allclose(saved['features'], maps, atol=5e-3, rtol=2e-3)
            assert saved['features'].shape == (5, 8, 8, 96)
            assert saved['seg_maps'].shape == (5, 64, 64)



def test_each_head_logs_into_its_own_work_dir(tmp_path, one_thread):
    """Heads trained one after another in one process (as the demo does) each write their own
    log and scalars: mmengine shares loggers and visualizers by name."""
    from dinomamba_mm.datasets import save_precomputed_features
    rng = np.random.default_rng(0)
    features = tmp_path / 'features'
    features.mkdir()
    for split, num in (('train', 8), ('val', 4)):
        seg_maps = rng.integers(0, 8, (num, 64, 64)).astype(np.uint8)
        save_precomputed_features(str(features / f'{split}_patches.npz'),
                                  rng.standard_normal((num, 8, 8, 96)), seg_maps=seg_maps)
        save_precomputed_features(str(features / f'{split}_cls.npz'),
                                  rng.standard_normal((num, 96)),
                                  labels=rng.integers(0, 7, num))
    args = demo.parse_args(['--work-dir', str(tmp_path / 'work')])
    steps = demo.Steps(4, io.StringIO())
    for config, kind in ((demo.SEGMENTATION_CONFIG, 'patches'), (demo.PROBE_CONFIG, 'cls')):
        for model in (demo.VIT, demo.DINOVIM):
            steps.begin(f'{kind} {model.key}')
            demo.train_head(args, steps, config, model, str(features), kind, 1)
            steps.end('')
    for head in ('segmentation', 'probe'):
        for model in (demo.VIT, demo.DINOVIM):
            work_dir = tmp_path / 'work' / f'{head}_{model.key}'
            scalars = list(work_dir.glob('*/vis_data/scalars.json'))
            logs = list(work_dir.glob('*/*.log'))
            assert len(scalars) == 1 and len(logs) == 1, (head, model.key)
            metric = 'mIoU' if head == 'segmentation' else 'accuracy/top1'
            assert sum(metric in line for line in scalars[0].read_text().splitlines()) == 1

def test_no_loss_curve_from_a_single_point(tmp_path):
    one_point = tmp_path / 'one.json'
    one_point.write_text(json.dumps(dict(iter=1, loss=5.0)) + '\n')
    out = tmp_path / 'loss.png'
    message = demo.plot_losses({'DinoVim': str(one_point), 'ViT': None}, str(out))
    assert message.startswith('no loss curve') and not out.exists()
    two_points = tmp_path / 'two.json'
    two_points.write_text(json.dumps(dict(iter=1, loss=5.0)) + '\n'
                          + json.dumps(dict(iter=2, lr=0.1)) + '\n'
                          + json.dumps(dict(iter=3, loss=4.0)) + '\n')
    assert demo.plot_losses({'DinoVim': str(two_points)}, str(out)) == str(out)
    assert out.stat().st_size > 0
