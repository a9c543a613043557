"""mmcv's image loader whose faults name the file and what is wrong with it."""
import logging
import os
from typing import Optional

from mmcv.transforms import LoadImageFromFile as MMCVLoadImageFromFile
from mmengine.logging import print_log

from dinomamba_mm.argument_checks import check_bool
from dinomamba_mm.registry import TRANSFORMS


def unreadable_file(path: str, error: Exception) -> str:
    """What is wrong with a file that failed to load with ``error``, for a message."""
    reason = (str(error).strip().splitlines() or [''])[-1]
    try:
        size = os.path.getsize(path)
    except OSError:  # not a local file, or none at all: the loader's own words
        return f'{type(error).__name__}: {reason}'
    if size == 0:
        return 'the file is empty (0 bytes)'
    return f'its {size} bytes do not decode ({type(error).__name__}: {reason})'


@TRANSFORMS.register_module()
class LoadImageFromFile(MMCVLoadImageFromFile):
    """mmcv's ``LoadImageFromFile`` whose failures name the file.

    A file that cannot be read or decoded (empty, truncated, not an image) is fatal: an
    ``OSError`` names it and what is wrong (mmcv raised ``cv2.error ... !buf.empty()`` or a bare
    assertion, naming no file). With ``ignore_empty=True`` such a sample is skipped instead,
    with a warning naming the file; mmengine's dataset then draws another sample in training
    and raises in test mode. An image already loaded (``img`` without ``img_path``) is passed
    through.

    Args:
        ignore_empty: skip unreadable files instead of stopping.
        **kwargs: the other arguments of mmcv's ``LoadImageFromFile``.
    """

    def __init__(self, ignore_empty: bool = False, **kwargs) -> None:
        check_bool('ignore_empty', ignore_empty)
        check_bool('to_float32', kwargs.get('to_float32', False))
        super().__init__(ignore_empty=False, **kwargs)
        self.skip_unreadable = ignore_empty

    def transform(self, results: dict) -> Optional[dict]:
        if 'img' in results and 'img_path' not in results:
            # loaded already: mmpretrain's inferencers read the image themselves and drop only a
            # loader whose type is exactly 'LoadImageFromFile' from the pipeline
            return results
        try:
            return super().transform(results)
        except Exception as error:
            path = results['img_path']
            problem = unreadable_file(path, error)
            if not self.skip_unreadable:
                raise OSError(f'cannot load image {path!r}: {problem}') from error
            print_log(f'skipped image {path!r} (ignore_empty=True): {problem}',
                      logger='current', level=logging.WARNING)
            return None
