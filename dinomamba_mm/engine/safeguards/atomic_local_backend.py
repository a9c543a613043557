"""``backend_args=dict(backend='atomic_local')``: files written whole or not at all."""
import os
import os.path as osp
from pathlib import Path
from typing import Union

import mmengine
from mmengine.fileio import LocalBackend, register_backend


@register_backend('atomic_local')
class AtomicLocalBackend(LocalBackend):
    """mmengine's ``LocalBackend`` whose writes are atomic: the bytes go to a hidden temporary
    file next to the target (``.NAME.part``), are flushed to disk, and the temporary file is
    then renamed over the target (``os.replace``, atomic on POSIX and Windows).

    A save killed halfway (SIGKILL, out of disk, node lost) thus leaves the previous file (or
    none) under the target's name, never a truncated one that ``--resume`` would pick. The
    temporary file of such a save stays behind until the next save of that name replaces it.

    Use it for checkpoints with ``CheckpointHook(backend_args=dict(backend='atomic_local'))``
    (the default of :class:`dinomamba_mm.ResumableCheckpointHook`).
    """

    def put(self, obj: bytes, filepath: Union[str, Path]) -> None:
        """Write ``obj`` to ``filepath`` atomically (the folder is created if needed)."""
        self._replace_with(filepath, 'wb', obj)

    def put_text(self, obj: str, filepath: Union[str, Path], encoding: str = 'utf-8') -> None:
        """Write the text ``obj`` to ``filepath`` atomically."""
        self._replace_with(filepath, 'w', obj, encoding=encoding)

    @staticmethod
    def _replace_with(filepath: Union[str, Path], mode: str, obj, **open_kwargs) -> None:
        filepath = str(filepath)
        folder, name = osp.split(osp.abspath(filepath))
        mmengine.mkdir_or_exist(folder)
        partial = osp.join(folder, f'.{name}.part')
        try:
            with open(partial, mode, **open_kwargs) as f:
                f.write(obj)
                f.flush()
                os.fsync(f.fileno())
            os.replace(partial, filepath)
        except BaseException:
            if osp.exists(partial):
                os.remove(partial)
            raise
