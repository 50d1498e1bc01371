"""Array kernels shared by layers and solvers: im2col/col2im, convolution (:mod:`.conv`),
pooling, LRN (:mod:`.lrn`), ReLU and a bias before it (:mod:`.relu`), the softmax loss
(:mod:`.softmax_loss`) and the solvers' fused update (:mod:`.solver_update`).

These are leaves: they import only NumPy, :mod:`pycaffe_lite.backend` and each other, and every
function works on NumPy or device (CuPy) arrays alike, picking the module with
``get_array_module``. Each function chooses its implementation from its arrays and arguments
(the one rule for fast paths): on CuPy arrays it hands over, at its top, to the CUDA kernels of
:mod:`pycaffe_lite.ops.gpu` (same arguments, same results; cuDNN where the caller's engine
allows), which import CuPy only when used; on NumPy arrays, where the C kernels were built, the
hot ones hand over to the compiled loops of :mod:`pycaffe_lite.ops.cpu` (same results, bit for
bit). The caller never learns which ran.
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
