"""InnerProduct: a fully connected layer, y = x W^T + b over the axes from ``axis`` on."""

from ...errors import ShapeError
from ...layer import Layer
from ...ops.gpu import cudnn
from ...ops.matmul import accumulate_matmul, matmul
from ...registry import register_layer
from ..neuron.inplace_utils import InPlaceInputs
from .common_utils import setup_weight_and_bias


@register_layer("InnerProduct")
class InnerProductLayer(InPlaceInputs, Layer):
    """Fully connected layer: the axes from ``axis`` on are flattened into K inputs.

    Bottoms: x, any shape with at least ``axis`` leading axes; the first ``axis`` axes are M
    independent samples, the rest (K values) their features.
    Tops: y of shape ``x.shape[:axis] + (num_output,)`` (in place when that is x's shape).
    Params: ``inner_product_param { num_output (required), bias_term (true), weight_filler
    (constant 0), bias_filler (constant 0), axis (1), transpose (false) }``.
    Blobs: weights of shape (N, K), or (K, N) with ``transpose``; bias of shape (N,) when
    ``bias_term``.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def _axis(self, bottom):
        axis = self.layer_param.inner_product_param.axis
        try:
            return bottom.canonical_axis_index(axis)
        except ShapeError:
            raise self.error("axis %d is out of range for a bottom of shape %s"
                             % (axis, bottom.shape)) from None

    def setup(self, bottom, top):
        p = self.layer_param.inner_product_param
        self.num_output = int(p.num_output)
        self.bias_term = p.bias_term
        self.transpose = p.transpose
        if self.num_output <= 0:
            raise self.error("inner_product_param.num_output must be > 0, got %d"
                             % self.num_output)
        axis = self._axis(bottom[0])
        self.K = bottom[0].count_range(axis)
        n, k = self.num_output, self.K
        setup_weight_and_bias(self, p, (k, n) if self.transpose else (n, k))

    def reshape(self, bottom, top):
        axis = self._axis(bottom[0])
        new_k = bottom[0].count_range(axis)
        if new_k != self.K:
            raise self.error("Input size incompatible with inner product parameters: the "
                             "bottom of shape %s gives %d inputs from axis %d, expected %d"
                             % (bottom[0].shape, new_k, axis, self.K))
        self.M = bottom[0].count_range(0, axis)
        top[0].reshape(bottom[0].shape[:axis] + (self.num_output,))

    def _weight_nk(self):
        """The weights as an (N, K)-shaped view (transposed view when stored as (K, N))."""
        w = self.blobs[0].read_data()
        return w.T if self.transpose else w

    def forward(self, bottom, top):
        x = self.forward_input(bottom, top).reshape(self.M, self.K)
        y = top[0].write_data().reshape(self.M, self.num_output)
        if not self.transpose and self._cudnn_forward(x, y):
            return
        matmul(x, self._weight_nk().T, y)
        if self.bias_term:
            y += self.blobs[1].read_data()

    def _cudnn_forward(self, x, y):
        """On the GPU with cuDNN: the product as a 1x1 convolution of (M, K, 1, 1), which a
        CUDA graph can hold (CuPy refuses cuBLAS calls while capturing); True when done."""
        w = self.blobs[0].read_data()
        b = self.blobs[1].read_data() if self.bias_term else None
        if not cudnn.conv_takes(cudnn.CUDNN, x, w, y, b):
            return False
        return cudnn.conv_forward(x.reshape(self.M, self.K, 1, 1),
                                  w.reshape(self.num_output, self.K, 1, 1), b,
                                  y.reshape(self.M, self.num_output, 1, 1), (0, 0), (1, 1),
                                  (1, 1), 1)

    def backward(self, top, propagate_down, bottom):
        dy = self.backward_top_diff(top, bottom).reshape(self.M, self.num_output)
        x = self.backward_input(bottom, top).reshape(self.M, self.K)
        dw = self.blobs[0].write_diff() if self.param_propagate_down[0] else None
        dx = bottom[0].write_diff().reshape(self.M, self.K) if propagate_down[0] else None
        dw_done, dx_done = self._cudnn_backward(x, dy, dw, dx)
        if dw is not None and not dw_done:
            if self.transpose:
                accumulate_matmul(dw, x.T, dy)
            else:
                accumulate_matmul(dw, dy.T, x)
        if self.bias_term and self.param_propagate_down[1]:
            db = self.blobs[1].write_diff()
            db += dy.sum(axis=0)
        if dx is not None and not dx_done:
            matmul(dy, self._weight_nk(), dx)

    def _cudnn_backward(self, x, dy, dw, dx):
        """On the GPU with cuDNN: the gradients as those of a 1x1 convolution of (M, K, 1, 1)
        (``dw +=``, ``dx =``), which a CUDA graph can hold; ``(dw done, dx done)``."""
        w = self.blobs[0].read_data()
        if self.transpose or not cudnn.conv_takes(cudnn.CUDNN, x, w, dy):
            return False, False
        m, k, n = self.M, self.K, self.num_output
        return cudnn.conv_backward(
            x.reshape(m, k, 1, 1), dy.reshape(m, n, 1, 1), w.reshape(n, k, 1, 1),
            None if dx is None else dx.reshape(m, k, 1, 1),
            None if dw is None else dw.reshape(n, k, 1, 1), (0, 0), (1, 1), (1, 1), 1)
