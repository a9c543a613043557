"""mmcv's image loader whose faults name the file and what is wrong with it, and which reads
16-bit images as 8-bit ones and refuses floating-point ones, whatever the decoding backend."""
import io
import logging
import os
from typing import Optional

import mmcv
import numpy as np
from mmcv.image import io as mmcv_io
from mmcv.transforms import LoadImageFromFile as MMCVLoadImageFromFile
from mmengine import fileio
from mmengine.logging import print_log
from PIL import Image, ImageOps

from dinomamba_mm.argument_checks import check_bool, check_choice
from dinomamba_mm.registry import TRANSFORMS


#: decoding backend -> (what mmcv imports for it, the package that brings it)
_BACKEND_PACKAGES = {'turbojpeg': ('TurboJPEG', 'PyTurboJPEG'), 'pillow': ('Image', 'Pillow'),
                     'tifffile': ('tifffile', 'tifffile')}
#: Pillow's modes of one 16-bit channel (a 16-bit RGB PNG opens as 8-bit 'RGB', its high bytes)
_SIXTEEN_BIT_MODES = ('I;16', 'I;16B', 'I;16L', 'I;16N')
#: Pillow's modes of samples without an 8-bit scale
_WIDE_MODES = {'F': '32-bit floating-point', 'I': '32-bit integer'}


class ImageDepthError(ValueError):
    """An image whose samples the 8-bit pipelines cannot take as they are."""


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
    """mmcv's ``LoadImageFromFile`` whose failures name the file, and which gives 8-bit images
    whatever the file's bit depth and the decoding backend.

    A file that cannot be read or decoded (empty, truncated, not an image) is fatal: an
    ``OSError`` names it and what is wrong (mmcv raised ``cv2.error ... !buf.empty()`` or a bare
    assertion, naming no file). A 16-bit grey image is read as 8 bits, each value's high byte,
    as cv2 does (mmcv's pillow backend saturated every value above 255); a 16-bit RGB one both
    backends read so already. Samples without an 8-bit scale are refused with that reason: 32-bit
    floating-point or integer images (the pillow backend truncated values in [0, 1] to 0 / 1),
    and any image ``color_type='unchanged'`` decodes to more than 8 bits. With
    ``ignore_empty=True`` such a sample is skipped instead, with a warning naming the file;
    mmengine's dataset then draws another sample in training and raises in test mode. An image
    already loaded (``img`` without ``img_path``) is passed through.

    Args:
        ignore_empty: skip unreadable files instead of stopping.
        **kwargs: the other arguments of mmcv's ``LoadImageFromFile``.
    """

    def __init__(self, ignore_empty: bool = False, **kwargs) -> None:
        check_bool('ignore_empty', ignore_empty)
        check_bool('to_float32', kwargs.get('to_float32', False))
        backend = kwargs.get('imdecode_backend', 'cv2')
        check_choice('imdecode_backend', backend, tuple(mmcv_io.supported_backends))
        check_choice('color_type', kwargs.get('color_type', 'color'), tuple(mmcv_io.imread_flags))
        module, package = _BACKEND_PACKAGES.get(backend, (None, None))
        if module is not None and getattr(mmcv_io, module) is None:
            raise ValueError(f'imdecode_backend={backend!r} needs the python package {package}, '
                             f'which is not installed: pip install {package}, or use cv2')
        super().__init__(ignore_empty=False, **kwargs)
        self.skip_unreadable = ignore_empty

    def transform(self, results: dict) -> Optional[dict]:
        if 'img' in results and 'img_path' not in results:
            # loaded already: mmpretrain's inferencers read the image themselves and drop only a
            # loader whose type is exactly 'LoadImageFromFile' from the pipeline
            return results
        path = results['img_path']
        try:
            img = self._decode(self._read(path))
        except Exception as error:
            problem = str(error) if isinstance(error, ImageDepthError) else \
                unreadable_file(path, error)
            if not self.skip_unreadable:
                raise OSError(f'cannot load image {path!r}: {problem}') from error
            print_log(f'skipped image {path!r} (ignore_empty=True): {problem}',
                      logger='current', level=logging.WARNING)
            return None
        if self.to_float32:
            img = img.astype(np.float32)
        results['img'] = img
        results['img_shape'] = img.shape[:2]
        results['ori_shape'] = img.shape[:2]
        return results

    def _read(self, path: str) -> bytes:
        """The file's bytes, as mmcv's loader reads them."""
        if self.file_client_args is not None:
            return fileio.FileClient.infer_client(self.file_client_args, path).get(path)
        return fileio.get(path, backend_args=self.backend_args)

    def _decode(self, content: bytes) -> np.ndarray:
        """mmcv's decoding, for the bit depths it gets wrong done here or refused."""
        try:
            with Image.open(io.BytesIO(content)) as image:
                mode = image.mode
        except Exception:  # noqa: BLE001 (not a format Pillow reads: left to the backend)
            mode = None
        if mode in _WIDE_MODES:
            raise ImageDepthError(f'it holds {_WIDE_MODES[mode]} samples (PIL mode {mode!r}), '
                                  'which have no 8-bit scale: convert it to an 8-bit image '
                                  '(0-255) first')
        if mode in _SIXTEEN_BIT_MODES and self.imdecode_backend == 'pillow' and \
                self.color_type != 'unchanged':
            img = self._high_bytes(content)
        else:
            img = mmcv.imfrombytes(content, flag=self.color_type,
                                   backend=self.imdecode_backend)
        if img is None:
            raise ValueError(f'the {self.imdecode_backend} backend decoded nothing')
        if img.dtype != np.uint8:
            raise ImageDepthError(
                f'with color_type={self.color_type!r} it decodes to {img.dtype} pixels, and the '
                "pipelines expect 8-bit ones (0-255): load it with color_type='color' or "
                "'grayscale', which scale it to 8 bits")
        return img

    def _high_bytes(self, content: bytes) -> np.ndarray:
        """A 16-bit grey image as 8 bits (each value's high byte, as cv2 reads it), grey or
        3-channel as ``color_type`` asks, EXIF orientation applied as mmcv's pillow backend
        does."""
        with Image.open(io.BytesIO(content)) as image:
            if self.color_type in ('color', 'grayscale'):
                image = ImageOps.exif_transpose(image)
            grey = (np.asarray(image, dtype=np.uint16) >> 8).astype(np.uint8)
        if self.color_type.startswith('grayscale'):
            return grey
        return np.repeat(grey[..., None], 3, axis=-1)
