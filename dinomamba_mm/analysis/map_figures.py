"""Figures of class-token maps: the maps of one or several models over the same images, each
with a colour bar and the image's Binary-AUC (the paper's figure of DinoVim, ViT and LinearViT
maps; one model on one image is the analysis tool's overlay).

matplotlib is imported inside the functions (Agg backend), so importing this module stays cheap.
"""
from typing import Sequence, Tuple

import numpy as np

#: value of the ignored pixels in a mask image (foreground 1, background 0)
IGNORED = 0.5


def foreground_mask(label: np.ndarray, background_ids: Sequence[int],
                    ignore_ids: Sequence[int]) -> np.ndarray:
    """(H, W) float mask of a label map: 1 foreground, 0 background, 0.5 ignored.

    Args:
        label (np.ndarray): Integer label ids, shape (H, W).
        background_ids (Sequence[int]): Ids counted as background.
        ignore_ids (Sequence[int]): Ids left out (drawn grey).

    Returns:
        np.ndarray: The float32 mask, shape (H, W).
    """
    mask = np.full(label.shape, IGNORED, dtype=np.float32)
    valid = ~np.isin(label, ignore_ids)
    mask[valid] = 0.0
    mask[valid & ~np.isin(label, background_ids)] = 1.0
    return mask


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display needed)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def draw_map(ax, image: np.ndarray, score: np.ndarray, title: str, alpha: float = 0.7,
             cmap: str = 'inferno'):
    """Draw ``score`` (H, W) over ``image`` (H, W, 3) uint8 RGB, in grey so that the colours
    are the map's, on ``ax`` with a colour bar of the map's own values (cosine similarity or
    attention weight)."""
    if image.shape[:2] != score.shape:
        raise ValueError(f'score of shape {score.shape} does not cover the image of shape '
                         f'{image.shape[:2]}')
    ax.imshow(image.mean(axis=-1), cmap='gray', vmin=0, vmax=255)
    mappable = ax.imshow(score, cmap=cmap, alpha=alpha)
    ax.figure.colorbar(mappable, ax=ax, fraction=0.046, pad=0.03).ax.tick_params(labelsize=6)
    ax.set_title(title, fontsize=8)
    ax.axis('off')
    return mappable


def save_maps_side_by_side(images: Sequence[np.ndarray], masks: Sequence[np.ndarray],
                           columns: Sequence[Tuple[str, Sequence[np.ndarray],
                                                   Sequence[float]]],
                           path: str, title: str = '') -> None:
    """One row per image: the image, each model's map over it (per-image Binary-AUC in the
    panel title, a colour bar each), the foreground mask.

    Args:
        images (Sequence[np.ndarray]): R uint8 RGB images, each of shape (H, W, 3).
        masks (Sequence[np.ndarray]): R masks from :func:`foreground_mask`, each of shape
            (H, W).
        columns (Sequence[tuple]): One ``(name, maps, aucs)`` per model, in column order:
            its name, R maps of shape (H, W) and R per-image Binary-AUCs.
        path (str): Path of the PNG file written.
        title (str): Figure title (e.g. what the maps are and the mean Binary-AUC of each
            model). Defaults to ''.
    """
    num_rows = len(images)
    if num_rows == 0 or len(masks) != num_rows:
        raise ValueError(f'need as many masks as images (> 0), got {len(images)} images and '
                         f'{len(masks)} masks')
    for name, scores, aucs in columns:
        if len(scores) != num_rows or len(aucs) != num_rows:
            raise ValueError(f'column {name!r} has {len(scores)} maps and {len(aucs)} AUCs for '
                             f'{num_rows} images')
    plt = pyplot()
    num_cols = len(columns) + 2
    fig, axes = plt.subplots(num_rows, num_cols, figsize=(2.6 * num_cols, 2.35 * num_rows),
                             squeeze=False)
    for row in range(num_rows):
        axes[row, 0].imshow(images[row])
        axes[row, 0].set_title('image', fontsize=8)
        axes[row, 0].axis('off')
        for col, (name, scores, aucs) in enumerate(columns, start=1):
            draw_map(axes[row, col], images[row], scores[row],
                     f'{name}: Binary-AUC {aucs[row]:.2f}')
        axes[row, -1].imshow(masks[row], cmap='gray', vmin=0, vmax=1)
        axes[row, -1].set_title('mask (white: foreground, grey: ignored)', fontsize=8)
        axes[row, -1].axis('off')
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
