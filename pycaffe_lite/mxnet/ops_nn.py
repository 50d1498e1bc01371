"""Converters of MXNet's layer ops: Convolution, Deconvolution, BatchNorm, Pooling,
FullyConnected, UpSampling, the activations and L2Normalization, with MXNet's semantics
(defaults, output sizes, divisors) where Caffe's differ."""

import math

import numpy as np

from ..onnx.import_ops import _caffe_pooled, _pool_geometry
from ..ops.pooling import window_extents
from ..proto import caffe_pb2
from .context import converter

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_LAMBDA = 1.0507009873554804934193349852946
FLOAT_MAX = 3.4028234663852886e38


def _spatial(c, a, key, n, default):
    value = a.tuple(key) or (default,) * n
    if len(value) != n or any(v is None for v in value):
        raise c.error("%s=%s does not match its %d-D kernel" % (key, a.str(key), n))
    return [int(v) for v in value]


def _geometry(p, kernel, stride, pad, dilate):
    """A convolution's geometry: square values as one number, else the _h/_w fields (2-D)
    or one value per axis."""
    for field, pair, values, default in (("kernel_size", "kernel", kernel, None),
                                         ("stride", "stride", stride, 1),
                                         ("pad", "pad", pad, 0),
                                         ("dilation", None, dilate, 1)):
        if all(v == default for v in values):
            continue
        if len(values) == 2 and values[0] != values[1] and pair:
            setattr(p, pair + "_h", values[0])
            setattr(p, pair + "_w", values[1])
        elif len(set(values)) == 1:
            getattr(p, field).append(values[0])
        else:
            getattr(p, field).extend(values)


def _conv_common(c, a):
    kernel = a.tuple("kernel")
    if not kernel:
        raise c.error("it has no kernel")
    n = len(kernel)
    layout = a.str("layout")
    if layout not in (None, "NCW", "NCHW", "NCDHW"):
        raise c.error("layout %s does not convert: Caffe's blobs are channels-first (NCHW)"
                      % layout)
    return (list(kernel), _spatial(c, a, "stride", n, 1), _spatial(c, a, "pad", n, 0),
            _spatial(c, a, "dilate", n, 1))


@converter("Convolution")
def convolution(c, node):
    a = c.attrs()
    kernel, stride, pad, dilate = _conv_common(c, a)
    x = c.bottom(0)
    w = c.param(1)
    blobs = [w] if a.bool("no_bias", False) else [w, c.param(2)]
    lp = c.layer("Convolution", node.name, [x], [c.out()], blobs)
    p = lp.convolution_param
    p.num_output = a.int("num_filter", w.shape[0])
    p.bias_term = len(blobs) > 1
    group = a.int("num_group", 1)
    if group != 1:
        p.group = group
    _geometry(p, kernel, stride, pad, dilate)
    c.configure(lp)
    c.produce(c.out())


def deconv_layer(c, name, x, w, bias, top, kernel, stride, pad, adj, dilate, group,
                 num_output):
    """MXNet's Deconvolution: Caffe's with the pad lowered by ``adj`` and the first ``adj``
    rows / columns cut off (``adj`` adds rows at the bottom / right, Caffe pads evenly).
    Where ``adj`` is larger than ``pad`` the extra rows lie past the full transposed
    convolution (no input reaches them: they hold the bias): the kernel grows by that many
    zero taps at its end, which gives those rows, and then ``adj`` equals ``pad``."""
    kernel, adj = list(kernel), list(adj)
    for i, (j, q) in enumerate(zip(adj, pad)):
        if j > q:
            if dilate[i] != 1:
                raise c.error("adj %s larger than pad %s with dilate %s: the extra rows lie "
                              "outside the full transposed convolution, which Caffe cannot "
                              "give" % (adj, pad, list(dilate)))
            widths = [(0, 0)] * w.ndim
            widths[2 + i] = (0, j - q)
            w = np.pad(w, widths)
            kernel[i] += j - q
            adj[i] = q
    blobs = [w] if bias is None else [w, bias]
    caffe_pad = [q - j for q, j in zip(pad, adj)]
    mid = top if not any(adj) else c.blob_name(top + "/full")
    lp = c.layer("Deconvolution", name, [x], [mid], blobs)
    p = lp.convolution_param
    p.num_output = num_output
    p.bias_term = bias is not None
    if group != 1:
        p.group = group
    _geometry(p, kernel, stride, caffe_pad, dilate)
    c.configure(lp)
    blob = mid
    for i, j in enumerate(adj):
        if j:
            size = c.shape(blob)[2 + i]
            last = all(not v for v in adj[i + 1:])
            blob = c.take(blob, 2 + i, j, size, name, top if last else None)
    return blob


@converter("Deconvolution")
def deconvolution(c, node):
    a = c.attrs()
    kernel, stride, pad, dilate = _conv_common(c, a)
    n = len(kernel)
    adj = _spatial(c, a, "adj", n, 0)
    x = c.bottom(0)
    w = c.param(1)
    bias = None if a.bool("no_bias", True) else c.param(2)
    group = a.int("num_group", 1)
    target = [t or 0 for t in (a.tuple("target_shape") or ())]
    if any(target):
        sizes = c.shape(x)[-n:]
        if len(target) != n:
            raise c.error("target_shape %s does not match its %d-D kernel" % (target, n))
        pad, adj = [], []
        for i in range(n):
            full = stride[i] * (sizes[i] - 1) + dilate[i] * (kernel[i] - 1) + 1
            if target[i] > full:
                raise c.error("target_shape %s is larger than the full output %d"
                              % (target, full))
            total = full - target[i]
            adj.append(total % 2)
            pad.append((total + 1) // 2)
    num_output = a.int("num_filter", w.shape[1] * group)
    deconv_layer(c, node.name, x, w, bias, c.out(), kernel, stride, pad, adj, dilate, group,
                 num_output)
    c.produce(c.out())


@converter("BatchNorm", "BatchNorm_v1", "_contrib_SyncBatchNorm", "CuDNNBatchNorm")
def batch_norm(c, node):
    a = c.attrs()
    if a.bool("output_mean_var", False):
        raise c.error("output_mean_var=True (batch statistics as outputs) does not convert")
    x = c.bottom(0)
    rank = len(c.shape(x))
    axis = a.int("axis", 1)
    if axis not in (1, 1 - rank):
        raise c.error("axis=%d: Caffe's BatchNorm normalises axis 1 only" % axis)
    gamma, beta = c.param(1), c.param(2)
    mean = c.param(3, implicit=node.name + "_moving_mean")
    var = c.param(4, implicit=node.name + "_moving_var")
    if a.bool("fix_gamma", True):
        gamma = np.ones_like(gamma)  # MXNet uses 1 whatever the file holds
    eps = a.float("eps", 1e-3)
    bn = c.layer("BatchNorm", node.name + "/bn", [x], [c.out()],
                 [mean, var, np.ones(1, np.float32)])
    bn.batch_norm_param.use_global_stats = True
    bn.batch_norm_param.eps = eps
    c.configure(bn)
    sc = c.layer("Scale", node.name, [c.out()], [c.out()], [gamma, beta])
    sc.scale_param.bias_term = True
    c.configure(sc)
    c.produce(c.out())


# -- activations ----------------------------------------------------------------------------
def neuron(c, type_, x, top, name=None, **params):
    lp = c.layer(type_, name or c.node.name, [x], [top])
    for field, value in params.items():
        msg, attr = field.split("__")
        setattr(getattr(lp, msg), attr, value)
    return c.configure(lp)


def softsign(c, x, top):
    """x / (1 + |x|) as AbsVal, Power(1 + a)^-1 and a product."""
    name = c.node.name
    a = neuron(c, "AbsVal", x, c.blob_name(name + "/abs"), name + "/abs")
    r = neuron(c, "Power", a.top[0], c.blob_name(name + "/recip"), name + "/recip",
               power_param__power=-1.0, power_param__shift=1.0)
    lp = c.layer("Eltwise", name, [x, r.top[0]], [top])
    lp.eltwise_param.operation = caffe_pb2.EltwiseParameter.PROD
    c.configure(lp)


ACTIVATIONS = {"relu": "ReLU", "sigmoid": "Sigmoid", "tanh": "TanH", "softrelu": "BNLL"}


@converter("Activation")
def activation(c, node):
    act = c.attrs().str("act_type", "relu")
    x = c.bottom(0)
    if act == "softsign":
        softsign(c, x, c.out())
    elif act in ACTIVATIONS:
        neuron(c, ACTIVATIONS[act], x, c.out())
    else:
        raise c.error("act_type %s does not convert" % act)
    c.produce(c.out())


UNARY = {"relu": "ReLU", "sigmoid": "Sigmoid", "tanh": "TanH", "abs": "AbsVal", "exp": "Exp",
         "log": "Log"}


@converter(*UNARY, "softsign")
def unary(c, node):
    if node.op == "softsign":
        softsign(c, c.bottom(0), c.out())
    else:
        neuron(c, UNARY[node.op], c.bottom(0), c.out())
    c.produce(c.out())


@converter("LeakyReLU")
def leaky_relu(c, node):
    a = c.attrs()
    act = a.str("act_type", "leaky")
    x = c.bottom(0)
    top = c.out()
    if act == "leaky":
        neuron(c, "ReLU", x, top, relu_param__negative_slope=a.float("slope", 0.25))
    elif act == "rrelu":  # at inference, the mean of its random slopes
        slope = (a.float("lower_bound", 0.125) + a.float("upper_bound", 0.334)) / 2.0
        neuron(c, "ReLU", x, top, relu_param__negative_slope=slope)
    elif act == "elu":
        neuron(c, "ELU", x, top, elu_param__alpha=a.float("slope", 0.25))
    elif act == "selu":
        e = neuron(c, "ELU", x, c.blob_name(top + "/elu"), node.name + "/elu",
                   elu_param__alpha=SELU_ALPHA)
        neuron(c, "Power", e.top[0], top, power_param__scale=SELU_LAMBDA)
    elif act == "prelu":
        gamma = c.param(1).reshape(-1)
        channels = c.shape(x)[1] if len(c.shape(x)) > 1 else 1
        if gamma.size not in (1, channels):
            raise c.error("PReLU slopes of %d values for %d channels" % (gamma.size, channels))
        shared = gamma.size == 1 and channels != 1
        # one slope for every channel (Gluon's nn.PReLU() by default): Caffe's shared slope
        # is a blob of no axes
        lp = c.layer("PReLU", node.name, [x], [top], [gamma.reshape(()) if shared else gamma])
        lp.prelu_param.channel_shared = shared
        c.configure(lp)
    elif act == "gelu":
        neuron(c, "GELU", x, top)
    else:
        raise c.error("act_type %s does not convert" % act)
    c.produce(top)


@converter("clip")
def clip(c, node):
    a = c.attrs()
    lo, hi = a.float("a_min", -FLOAT_MAX), a.float("a_max", FLOAT_MAX)
    if lo == 0.0 and hi == 6.0:
        neuron(c, "ReLU6", c.bottom(0), c.out())
    else:
        neuron(c, "Clip", c.bottom(0), c.out(), clip_param__min=lo, clip_param__max=hi)
    c.produce(c.out())


# -- pooling -----------------------------------------------------------------------------------
def _mxnet_pooled(size, k, s, p, full):
    span = size + 2 * p - k
    return (-(-span // s) if full else span // s) + 1


def _pool_factors(out, size, kernel, stride, pad, mode, include):
    """Per output position, what MXNet's result is over Caffe's AVE result: Caffe divides by
    the window clipped to the padded input; MXNet's avg divides by that too
    (count_include_pad: ``include`` True), by the window clipped to the input (False) or,
    Pooling_v1's, by the whole kernel (``include`` "kernel"); its sum by nothing."""
    axes = []
    for i in range(2):
        caffe = window_extents(out[i], kernel[i], stride[i], pad[i], -pad[i], size[i] + pad[i])
        if include == "kernel":
            mx = np.full(out[i], kernel[i])
        else:
            mx = caffe if include else window_extents(out[i], kernel[i], stride[i], pad[i], 0,
                                                      size[i])
        axes.append((caffe.astype(np.float64), mx.astype(np.float64)))
    caffe = np.outer(axes[0][0], axes[1][0])
    if mode == "sum":
        return caffe
    return caffe / np.outer(axes[0][1], axes[1][1])


def _scale_map(c, blob, factors, name, top):
    """``blob`` times a constant per (row, column): nothing, a Power or a frozen Scale."""
    if np.all(factors == 1.0):
        return blob
    flat = factors.reshape(-1)
    if np.all(flat == flat[0]):
        neuron(c, "Power", blob, top, name, power_param__scale=float(flat[0]))
        return top
    lp = c.layer("Scale", name, [blob], [top], [factors.astype(np.float32)], frozen=True)
    lp.scale_param.axis = 2
    lp.scale_param.num_axes = 2
    c.configure(lp)
    return top


@converter("Pooling", "Pooling_v1")
def pooling(c, node):
    a = c.attrs()
    x = c.bottom(0)
    shape = c.shape(x)
    mode = a.str("pool_type", "max")
    if mode not in ("max", "avg", "sum"):
        raise c.error("pool_type %s does not convert (max, avg and sum do)" % mode)
    if a.str("layout") not in (None, "NCW", "NCHW", "NCDHW"):
        raise c.error("layout %s does not convert: Caffe's blobs are channels-first (NCHW)"
                      % a.str("layout"))
    if len(shape) != 4:  # (1-D and 3-D pooling: their layouts are channels-first too)
        raise c.error("only 2-D pooling converts (input of shape %s)" % (shape,))
    P = caffe_pb2.PoolingParameter
    top = c.out()
    if a.bool("global_pool", False):
        mid = top if mode != "sum" else c.blob_name(top + "/mean")
        lp = c.layer("Pooling", node.name, [x], [mid])
        lp.pooling_param.pool = P.MAX if mode == "max" else P.AVE
        lp.pooling_param.global_pooling = True
        c.configure(lp)
        if mode == "sum":
            neuron(c, "Power", mid, top, node.name + "/sum",
                   power_param__scale=float(shape[2] * shape[3]))
        c.produce(top)
        return
    kernel = _spatial(c, a, "kernel", 2, None)
    stride = _spatial(c, a, "stride", 2, 1)
    pad = _spatial(c, a, "pad", 2, 0)
    convention = a.str("pooling_convention", "valid")
    if convention not in ("valid", "full"):
        raise c.error("pooling_convention %s does not convert (valid and full do)"
                      % convention)
    size = shape[2:]
    want = [_mxnet_pooled(n, k, s, q, convention == "full")
            for n, k, s, q in zip(size, kernel, stride, pad)]
    got = [_caffe_pooled(n, k, s, q) for n, k, s, q in zip(size, kernel, stride, pad)]
    if any(w > g for w, g in zip(want, got)):
        raise c.error("MXNet pools %s windows (pooling_convention full keeps a last window "
                      "that starts in the padding) where Caffe gives %s; Caffe cannot "
                      "express this pooling" % (want, got))
    # (Pooling_v1 has no count_include_pad: its average divides by the whole kernel)
    include = "kernel" if node.op == "Pooling_v1" else a.bool("count_include_pad", True)
    factors = None
    if mode != "max":
        factors = _pool_factors(want, size, kernel, stride, pad, mode, include)
    mid = top if got == want and (factors is None or np.all(factors == 1.0)) else \
        c.blob_name(top + "/caffe")
    lp = c.layer("Pooling", node.name, [x], [mid])
    lp.pooling_param.pool = P.MAX if mode == "max" else P.AVE
    _pool_geometry(lp.pooling_param, kernel, stride, pad)
    c.configure(lp)
    blob = mid
    for i in range(2):  # valid: Caffe's extra last window (rounding up) cut off
        if got[i] != want[i]:
            done = i == 1 or got[1] == want[1]
            last = done and (factors is None or np.all(factors == 1.0))
            blob = c.take(blob, 2 + i, 0, want[i], node.name, top if last else None)
    if factors is not None:
        blob = _scale_map(c, blob, factors, node.name + "/divisor", top)
    c.produce(blob)


@converter("_contrib_AdaptiveAvgPooling2D")
def adaptive_avg_pooling(c, node):
    """MXNet averages rows floor(o * in / out) to ceil((o + 1) * in / out) for output o: one
    global average for an output of 1 x 1 (GluonCV's squeeze-excitation blocks), Caffe's
    average pooling with kernel = stride = in / out where out divides in."""
    a = c.attrs()
    x = c.bottom(0)
    shape = c.shape(x)
    if len(shape) != 4:
        raise c.error("only 2-D pooling converts (input of shape %s)" % (shape,))
    size = a.tuple("output_size") or (1,)
    size = tuple(size) * 2 if len(size) == 1 else tuple(size)
    if len(size) != 2 or any(not s or s < 1 for s in size):
        raise c.error("output_size=%s is not one or two positive sizes" % a.str("output_size"))
    lp = c.layer("Pooling", node.name, [x], [c.out()])
    lp.pooling_param.pool = caffe_pb2.PoolingParameter.AVE
    if size == (1, 1):
        lp.pooling_param.global_pooling = True
    elif all(n % s == 0 for n, s in zip(shape[2:], size)):
        kernel = [n // s for n, s in zip(shape[2:], size)]
        _pool_geometry(lp.pooling_param, kernel, kernel, [0, 0])
    else:
        raise c.error("output_size %s from an input of %s x %s: MXNet's windows differ in "
                      "size, which Caffe's pooling cannot give (sizes that divide the input "
                      "convert)" % (size, shape[2], shape[3]))
    c.configure(lp)
    c.produce(c.out())


# -- fully connected, upsampling, normalisation ---------------------------------------------
@converter("LRN")
def lrn(c, node):
    """x / (knorm + alpha / nsize * the sum of x^2 over nsize channels around it)^beta: Caffe's
    LRN across channels, whose k is MXNet's knorm."""
    a = c.attrs()
    size = a.int("nsize")
    if size is None or size < 1 or size % 2 == 0:
        raise c.error("nsize=%s: a window of an odd number of channels converts (MXNet's own "
                      "kernel accepts no other)" % a.str("nsize"))
    neuron(c, "LRN", c.bottom(0), c.out(), lrn_param__local_size=size,
           lrn_param__alpha=a.float("alpha", 1e-4), lrn_param__beta=a.float("beta", 0.75),
           lrn_param__k=a.float("knorm", 2.0))
    c.produce(c.out())


@converter("FullyConnected")
def fully_connected(c, node):
    a = c.attrs()
    x = c.bottom(0)
    shape = c.shape(x)
    w = c.param(1)
    flatten = a.bool("flatten", True)
    axis = 1 if flatten else len(shape) - 1
    inputs = int(np.prod(shape[axis:]))
    w = w.reshape(w.shape[0], -1)
    if w.shape[1] != inputs:
        raise c.error("its weight has %d inputs per output; the data gives %d (shape %s, "
                      "flatten=%s)" % (w.shape[1], inputs, shape, flatten))
    blobs = [w] if a.bool("no_bias", False) else [w, c.param(2)]
    lp = c.layer("InnerProduct", node.name, [x], [c.out()], blobs)
    lp.inner_product_param.num_output = w.shape[0]
    lp.inner_product_param.bias_term = len(blobs) > 1
    if axis != 1:
        lp.inner_product_param.axis = axis
    c.configure(lp)
    c.produce(c.out())


@converter("UpSampling")
def upsampling(c, node):
    a = c.attrs()
    scale = a.int("scale", 1)
    kind = a.str("sample_type", "nearest")
    args = a.int("num_args", 1)
    x = c.bottom(0)
    if kind == "nearest":
        if args != 1:
            raise c.error("nearest UpSampling of %d inputs does not convert (one does)" % args)
        neuron(c, "Upsample", x, c.out(), upsample_param__scale=scale)
    elif kind == "bilinear":
        # MXNet's bilinear UpSampling is a grouped Deconvolution by its weight
        k = 2 * scale - scale % 2
        pad = int(math.ceil((scale - 1) / 2.0))
        channels = c.shape(x)[1]
        w = c.param(1)
        deconv_layer(c, node.name, x, w, None, c.out(), [k, k], [scale, scale], [pad, pad],
                     [0, 0], [1, 1], a.int("num_filter", channels), a.int("num_filter",
                                                                          channels))
    else:
        raise c.error("sample_type %s does not convert" % kind)
    c.produce(c.out())


@converter("_contrib_BilinearResize2D")
def bilinear_resize(c, node):
    """Bilinear resizing with the corners aligned (MXNet's default, and the only sampling
    Caffe's Interp has) to height x width, to scale x the input (mode size) or to the
    second input's size (mode like)."""
    a = c.attrs()
    x = c.bottom(0)
    shape = c.shape(x)
    if len(shape) != 4:
        raise c.error("only 2-D resizing converts (input of shape %s)" % (shape,))
    if not a.bool("align_corners", True):
        raise c.error("align_corners=False (half-pixel sampling) does not convert: Caffe's "
                      "Interp aligns the corners")
    mode = a.str("mode", "size")
    if mode == "size" and a.has("scale_height"):
        if not a.has("scale_width"):
            raise c.error("scale_height without scale_width")
        # (as MXNet: a float32 product, truncated)
        h = int(np.float32(a.float("scale_height")) * np.float32(shape[2]))
        w = int(np.float32(a.float("scale_width")) * np.float32(shape[3]))
    elif mode == "size":
        h, w = a.int("height", 1), a.int("width", 1)
    elif mode == "like":
        h, w = c.in_shape(1)[2:4]
    else:
        raise c.error("mode %s does not convert (size and like do)" % mode)
    if h < 1 or w < 1:
        raise c.error("an output of %d x %d" % (h, w))
    neuron(c, "Interp", x, c.out(), interp_param__height=h, interp_param__width=w)
    c.produce(c.out())


@converter("L2Normalization")
def l2_normalization(c, node):
    a = c.attrs()
    mode = a.str("mode", "instance")
    eps = a.float("eps", 1e-10)
    x = c.bottom(0)
    shape = c.shape(x)
    if mode not in ("instance", "channel", "spatial"):
        raise c.error("mode %s does not convert" % mode)
    src, top = x, c.out()
    if mode == "spatial":  # over each channel's positions: channels and positions swapped
        if len(shape) < 3:
            raise c.error("spatial mode needs a blob with positions (shape %s)" % (shape,))
        flat = c.reshape(x, [shape[0], shape[1], int(np.prod(shape[2:])), 1],
                         node.name + "/flat", c.blob_name(top + "/flat"))
        swap = c.layer("Permute", node.name + "/swap", [flat], [c.blob_name(top + "/swap")])
        swap.permute_param.order.extend([0, 2, 1, 3])
        c.configure(swap)
        src, top = swap.top[0], c.blob_name(top + "/normed")
    lp = c.layer("Normalize", node.name, [src], [top], [np.ones((), np.float32)], frozen=True)
    p = lp.norm_param
    p.across_spatial = mode == "instance"
    p.channel_shared = True
    p.eps = eps
    c.configure(lp)
    if mode == "spatial":
        back = c.layer("Permute", node.name + "/back", [top], [c.blob_name(top + "/back")])
        back.permute_param.order.extend([0, 2, 1, 3])
        c.configure(back)
        top = c.reshape(back.top[0], shape, node.name + "/unflat", c.out())
    c.produce(top)
