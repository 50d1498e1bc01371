"""Array kernels shared by layers (im2col/col2im, pooling).

These are leaves: they import only NumPy and :mod:`pycaffe_lite.backend`, and every function
works on NumPy or device (CuPy) arrays alike, picking the module with ``get_array_module``.
On CuPy arrays the public functions hand over, at their top, to the CUDA kernels of
:mod:`pycaffe_lite.ops.gpu` (same arguments, same results), which import CuPy only when used;
on NumPy arrays, where the C kernels were built, the hot ones hand over to the compiled loops of
:mod:`pycaffe_lite.ops.cpu` (same results, bit for bit).
"""

from .im2col import col2im, conv_output_shape, im2col
from .pooling import (ave_pool_backward, ave_pool_forward, max_pool_backward, max_pool_forward,
                      max_pool_mask, pool_divisors, pooled_size, stochastic_pool_backward,
                      stochastic_pool_forward_test, stochastic_pool_forward_train,
                      stochastic_pool_test_backward)

__all__ = ["im2col", "col2im", "conv_output_shape", "pooled_size", "pool_divisors",
           "max_pool_forward", "max_pool_backward", "max_pool_mask", "ave_pool_forward",
           "ave_pool_backward", "stochastic_pool_forward_train", "stochastic_pool_forward_test",
           "stochastic_pool_backward", "stochastic_pool_test_backward"]
