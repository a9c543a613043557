"""dinomamba_mm.analysis.map_figures: the mask against hand-written values, the figures' layout
(panels, colour bars) read back from matplotlib, and the argument checks."""
import numpy as np
import pytest

from dinomamba_mm.analysis import map_figures


def test_foreground_mask_by_hand():
    label = np.array([[0, 1, 255], [3, 0, 7]])
    expected = np.array([[0.0, 1.0, 0.5], [1.0, 0.0, 1.0]], dtype=np.float32)
    np.testing.assert_array_equal(map_figures.foreground_mask(label, [0], [255]), expected)
    # 7 counted as background as well
    expected[1, 2] = 0.0
    np.testing.assert_array_equal(map_figures.foreground_mask(label, [0, 7], [255]), expected)


@pytest.fixture
def captured_figures(monkeypatch):
    """Keep the figures the functions save (instead of closing them) to inspect them."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    saved, close = [], plt.close
    monkeypatch.setattr(plt, 'close', saved.append)
    yield saved
    for fig in saved:
        close(fig)


def _image_and_map(seed, size=12):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
            rng.standard_normal((size, size)).astype(np.float32))


def test_one_map_has_a_colour_bar_with_the_map_range(tmp_path, captured_figures):
    # one model on one image: the overlay the Binary-AUC tool writes per shown image
    image, score = _image_and_map(0)
    mask = np.zeros((12, 12), np.float32)
    path = tmp_path / 'overlay.png'
    map_figures.save_maps_side_by_side([image], [mask], [('layer 3: cls', [score], [0.5])],
                                       str(path))
    assert path.stat().st_size > 0
    fig = captured_figures[-1]
    # image, map, mask + the map's colour bar
    assert len(fig.axes) == 4
    map_axis = next(ax for ax in fig.axes if ax.get_title() == 'layer 3: cls: Binary-AUC 0.50')
    overlay = map_axis.get_images()[-1]
    assert overlay.get_clim() == pytest.approx((score.min(), score.max()))
    assert overlay.get_alpha() == pytest.approx(0.7)


def test_side_by_side_layout(tmp_path, captured_figures):
    images, scores = zip(*(_image_and_map(seed) for seed in range(3)))
    masks = [np.ones((12, 12), np.float32)] * 3
    columns = [('DinoVim', list(scores), [0.9, 0.8, 0.7]),
               ('ViT', list(scores), [0.6, 0.5, 0.4])]
    path = tmp_path / 'maps.png'
    map_figures.save_maps_side_by_side(list(images), masks, columns, str(path), title='t')
    assert path.stat().st_size > 0
    fig = captured_figures[-1]
    titles = [ax.get_title() for ax in fig.axes]
    # 3 rows x (image, 2 maps, mask) + one colour bar per map
    assert len(fig.axes) == 3 * 4 + 3 * 2
    assert titles.count('image') == 3
    assert 'DinoVim: Binary-AUC 0.80' in titles and 'ViT: Binary-AUC 0.40' in titles


def test_side_by_side_rejects_mismatched_columns(tmp_path):
    image, score = _image_and_map(0)
    with pytest.raises(ValueError, match="column 'ViT' has 1 maps and 2 AUCs for 1 images"):
        map_figures.save_maps_side_by_side([image], [score], [('ViT', [score], [0.5, 0.5])],
                                           str(tmp_path / 'x.png'))
    with pytest.raises(ValueError, match='as many masks as images'):
        map_figures.save_maps_side_by_side([image], [], [], str(tmp_path / 'x.png'))
    with pytest.raises(ValueError, match='does not cover the image'):
        map_figures.save_maps_side_by_side([image], [score], [('t', [score[:5]], [0.5])],
                                           str(tmp_path / 'x.png'))
