"""What the benchmarks of tools/benchmarks/ share: the machine line, timing, peak memory, tables.

The scripts import it as a sibling module (``python tools/benchmarks/<name>.py`` puts this folder
first on ``sys.path``; tests load the scripts with this folder on the path).
"""
import ctypes
import gc
import os
import platform
import time
from typing import Iterable

import torch


def machine_line(device: str = 'cpu') -> str:
    """Platform, CPU model and count, Python, torch and its threads, the GPU on CUDA, and the
    1-minute load average: what every table of docs/benchmarks.md names as "measured on"."""
    cpu = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as info:
            cpu = next(line.split(':', 1)[1].strip() for line in info
                       if line.startswith('model name'))
    except (OSError, StopIteration):
        pass
    line = (f'{platform.platform()} | {cpu} | {os.cpu_count()} CPUs | python '
            f'{platform.python_version()} | torch {torch.__version__} '
            f'({torch.get_num_threads()} threads)')
    if torch.device(device).type == 'cuda':
        props = torch.cuda.get_device_properties(torch.device(device))
        line += (f' | {props.name} ({props.total_memory / 2**30:.0f} GiB) | CUDA '
                 f'{torch.version.cuda}')
    if hasattr(os, 'getloadavg'):
        line += f' | load average {os.getloadavg()[0]:.1f} (1 min)'
    return line


def _sync(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


class Timer:
    """Wall seconds (``wall``) and process CPU seconds, all threads (``cpu``), of the code run
    inside the context; CUDA work is synchronised at both ends."""

    def __init__(self, device='cpu'):
        self.device = torch.device(device)

    def __enter__(self) -> 'Timer':
        _sync(self.device)
        self._start = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        _sync(self.device)
        self.wall = time.perf_counter() - self._start[0]
        self.cpu = time.process_time() - self._start[1]


def _status_kib(field: str) -> int:
    with open('/proc/self/status') as status:
        for line in status:
            if line.startswith(field + ':'):
                return int(line.split()[1])
    raise RuntimeError(f'{field} not in /proc/self/status')


def add_malloc_option(parser) -> None:
    """The ``--malloc`` option of the CPU benchmarks (see :func:`pin_malloc`)."""
    parser.add_argument('--malloc', choices=('pinned', 'adaptive'), default='pinned',
                        help="CPU: 'pinned' (default) pins glibc's mmap threshold, so that the "
                             "peak memory is what the code allocates, and every large buffer "
                             "costs fresh zeroed pages; 'adaptive' keeps glibc's default, as a "
                             "training process runs: fewer page faults, and the resident set "
                             "also holds the heap's fragmentation")


def pin_malloc() -> None:
    """Keep glibc from caching big freed buffers (mmap threshold pinned at 256 KiB), so that the
    resident set's growth tracks what a call allocates."""
    try:
        libc = ctypes.CDLL('libc.so.6')
    except OSError:
        return
    libc.mallopt(-3, 256 * 1024)  # M_MMAP_THRESHOLD (also disables the dynamic threshold)
    libc.mallopt(-1, 256 * 1024)  # M_TRIM_THRESHOLD


class PeakMemory:
    """Peak extra memory (``mib``) of the code run inside the context.

    CPU: rise of the resident set's high-water mark (VmHWM, reset through /proc/self/clear_refs
    after freed heap memory is returned with malloc_trim) over the resident set before the code;
    CUDA: ``torch.cuda.max_memory_allocated`` over the memory allocated before it.
    """

    def __init__(self, device='cpu'):
        self.device = torch.device(device)
        self.mib = float('nan')

    def __enter__(self) -> 'PeakMemory':
        gc.collect()
        _sync(self.device)
        if self.device.type == 'cuda':
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        else:
            try:
                ctypes.CDLL('libc.so.6').malloc_trim(0)
            except OSError:
                pass
            with open('/proc/self/clear_refs', 'w') as refs:
                refs.write('5')  # VmHWM := the current resident set
            self.base = _status_kib('VmRSS') * 1024
        return self

    def __exit__(self, *exc) -> None:
        _sync(self.device)
        peak = (torch.cuda.max_memory_allocated(self.device) if self.device.type == 'cuda'
                else _status_kib('VmHWM') * 1024)
        self.mib = max(0.0, (peak - self.base) / 2**20)  # a growth: freed pages can read < 0


def table_row(cells: Iterable) -> str:
    """A Markdown table row."""
    return '| ' + ' | '.join(str(cell) for cell in cells) + ' |'


def table_header(columns: Iterable[str]) -> str:
    """A Markdown table's header and separator lines."""
    columns = list(columns)
    return table_row(columns) + '\n|' + '---|' * len(columns)


def fmt(value: float, scale: float = 1.0, digits: int = 0) -> str:
    """``value * scale`` with ``digits`` decimals; 'n/a' for nan (a figure not measured)."""
    return 'n/a' if value != value else f'{value * scale:.{digits}f}'
