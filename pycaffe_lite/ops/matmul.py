"""Matrix products for the layers: :func:`matmul` (``out = a @ b``, host products through
:func:`pycaffe_lite.ops.cpu.host_matmul`) and :func:`accumulate_matmul` (``c += a @ b`` without
a temporary the size of ``c``: the fully connected layers' weight gradients; device arrays take
``c += a @ b``).
"""

import threading

import numpy as np

from ..backend import get_array_module
from . import cpu as _cpu

# Rows of ``c`` per block of :func:`accumulate_matmul`: a block's product stays in cache until
# it is added.
_ACCUMULATE_BLOCK_BYTES = 1 << 20
_accumulate_buffers = threading.local()


def matmul(a, b, out):
    """``out = a @ b``: host arrays through :func:`pycaffe_lite.ops.cpu.host_matmul` (shared by
    the kernel threads, or on the calling thread alone), device arrays through CuPy."""
    xp = get_array_module(out)
    if xp is np:
        return _cpu.host_matmul(a, b, out)
    return xp.matmul(a, b, out=out)


def accumulate_matmul(c, a, b):
    """``c += a @ b`` for host matrices without a temporary the size of ``c``: the product is
    made a block of rows at a time into a small reused buffer and added while it is still in
    cache. A large fully connected layer's weight gradient (a product of rank ``batch``) is
    memory-bound: this halves its memory traffic and its page faults. Small products take
    ``c += a @ b``; on the host every product goes through
    :func:`pycaffe_lite.ops.cpu.host_matmul` (never OpenBLAS's own threads, which a busy
    machine stalls)."""
    rows = max(1, _ACCUMULATE_BLOCK_BYTES // max(1, c.shape[1] * c.itemsize))
    if type(c) is not np.ndarray:
        c += a @ b
        return c
    if c.shape[0] <= 2 * rows:
        c += _cpu.host_matmul(a, b, np.empty(c.shape, np.result_type(a.dtype, b.dtype)))
        return c
    buf = getattr(_accumulate_buffers, "buf", None)
    if buf is None or buf.dtype != c.dtype or buf.size < rows * c.shape[1]:
        buf = _accumulate_buffers.buf = np.empty(rows * c.shape[1], c.dtype)
    for r in range(0, c.shape[0], rows):
        part = c[r:r + rows]
        product = buf[:part.size].reshape(part.shape)
        _cpu.host_matmul(a[r:r + rows], b, product)
        part += product
    return c
