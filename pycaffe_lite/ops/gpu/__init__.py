"""CUDA kernels for the hot paths, run on CuPy arrays (GPU mode on an NVIDIA GPU).

Every function here is a drop-in for a NumPy function of :mod:`pycaffe_lite.ops` or of a layer,
with the same arguments and the same results (to float rounding; see each module):

- :mod:`.im2col`: ``im2col`` / ``col2im`` (2-D) for the convolution layers;
- :mod:`.pooling`: MAX and AVE pooling, forward and backward;
- :mod:`.lrn`: LRN forward and backward (both norm regions);
- :mod:`.softmax_loss`: SoftmaxWithLoss's loss gather and gradient;
- :mod:`.solver_updates`: every solver rule's update of all the parameters in one launch, its
  coefficients read from device memory;
- :mod:`.cudnn`: cuDNN convolution and pooling through CuPy, with Caffe's engine selection;
- :mod:`.channels`: BatchNorm's and Scale's per-channel sums and elementwise steps;
- :mod:`.fused`: a training net's fused BatchNorm -> Scale -> ReLU and Eltwise SUM -> ReLU
  (through :mod:`pycaffe_lite.ops.train_fused`).

The NumPy functions dispatch here at their top when their arrays are CuPy arrays (and the
kernels handle the case); otherwise their xp-generic code runs, on NumPy or on CuPy alike.
Nothing in this package imports CuPy until a kernel runs (its arrays are then CuPy's), so a
machine without a GPU never loads it. Kernels are compiled once per element type and device,
on first use, and cached. ``PYCAFFE_LITE_GPU_KERNELS=0`` (or :func:`set_kernels_enabled`)
turns them off.
"""

from . import cudnn, im2col, lrn, pooling, softmax_loss, solver_updates
from ._util import is_cupy, kernels_enabled, on_gpu, set_kernels_enabled

__all__ = ["im2col", "pooling", "lrn", "softmax_loss", "solver_updates", "cudnn", "is_cupy",
           "on_gpu", "kernels_enabled", "set_kernels_enabled"]
