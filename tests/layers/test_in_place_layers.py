"""Layers that are not element-wise, run in place (top 0 is bottom 0) where their parameters keep
the bottom's shape: the forward reads windows of the input it overwrites, and the backward
writes the bottom's diff, which is the top's. Outputs and gradients against PyTorch."""

import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.testing import make_layer

torch = pytest.importorskip("torch", reason="PyTorch (the reference) is a test dependency")
F = torch.nn.functional

FILL = 'weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "gaussian" std: 0.3 }'


def _conv(x, p):
    return F.conv2d(x, p[0], p[1], padding=1, groups=x.shape[1])


def _lrn_within(x, size, alpha, beta):
    pooled = F.avg_pool2d(x * x, size, stride=1, padding=size // 2, count_include_pad=True)
    return x / (1 + alpha * pooled) ** beta


CASES = {
    "depthwise convolution": (
        'type: "Convolution" convolution_param { num_output: 4 group: 4 kernel_size: 3 pad: 1 '
        '%s }' % FILL, _conv),
    "convolution 3x3": (
        'type: "Convolution" convolution_param { num_output: 4 kernel_size: 3 pad: 1 %s }' % FILL,
        lambda x, p: F.conv2d(x, p[0], p[1], padding=1)),
    "convolution 1x1": (
        'type: "Convolution" convolution_param { num_output: 4 kernel_size: 1 %s }' % FILL,
        lambda x, p: F.conv2d(x, p[0], p[1])),
    "depthwise deconvolution": (
        'type: "Deconvolution" convolution_param { num_output: 4 group: 4 kernel_size: 3 pad: 1 '
        '%s }' % FILL, lambda x, p: F.conv_transpose2d(x, p[0], p[1], padding=1, groups=4)),
    "deconvolution 3x3": (
        'type: "Deconvolution" convolution_param { num_output: 4 kernel_size: 3 pad: 1 %s }'
        % FILL, lambda x, p: F.conv_transpose2d(x, p[0], p[1], padding=1)),
    "max pooling": (
        'type: "Pooling" pooling_param { pool: MAX kernel_size: 3 stride: 1 pad: 1 }',
        lambda x, p: F.max_pool2d(x, 3, stride=1, padding=1)),
    "average pooling": (
        'type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 1 pad: 1 }',
        lambda x, p: F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=True)),
    "LRN across channels": (
        'type: "LRN" lrn_param { local_size: 3 alpha: 2 beta: 0.75 k: 1.5 }',
        lambda x, p: F.local_response_norm(x, 3, alpha=2, beta=0.75, k=1.5)),
    "LRN within channel": (
        'type: "LRN" lrn_param { local_size: 3 alpha: 2 beta: 0.75 norm_region: WITHIN_CHANNEL }',
        lambda x, p: _lrn_within(x, 3, 2, 0.75)),
    "inner product": (
        'type: "InnerProduct" inner_product_param { num_output: 5 axis: -1 %s }' % FILL,
        lambda x, p: F.linear(x, p[0], p[1])),
    "normalize": (
        'type: "Normalize" norm_param { across_spatial: false channel_shared: false '
        'scale_filler { type: "gaussian" std: 1 } }',
        lambda x, p: x / torch.sqrt((x * x).sum(1, keepdim=True) + 1e-10)
        * p[0].reshape(1, -1, 1, 1)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_in_place_forward_and_backward_match_pytorch(case):
    text, reference = CASES[case]
    rng = np.random.default_rng(4)
    x0 = rng.uniform(-1, 1, (2, 4, 5, 5))
    blob = Blob(x0.shape, np.float64)
    blob.data[...] = x0
    layer = make_layer(text)
    layer.SetUp([blob], [blob])
    layer.Forward([blob], [blob])

    xt = torch.tensor(x0, requires_grad=True)
    params = [torch.tensor(b.data.copy(), requires_grad=True) for b in layer.blobs]
    yt = reference(xt, params)
    np.testing.assert_allclose(blob.data, yt.detach().numpy(), rtol=1e-9, atol=1e-10)

    dy = rng.normal(size=x0.shape)
    yt.backward(torch.from_numpy(dy))
    blob.diff[...] = dy
    for b in layer.blobs:
        b.diff[...] = 0
    layer.Backward([blob], [True], [blob])
    np.testing.assert_allclose(blob.diff, xt.grad.numpy(), rtol=1e-9, atol=1e-10)
    for b, pt in zip(layer.blobs, params):
        np.testing.assert_allclose(b.diff, pt.grad.numpy(), rtol=1e-9, atol=1e-10)
