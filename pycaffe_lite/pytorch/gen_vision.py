"""PyTorch code for Caffe's vision layers: Convolution, Deconvolution, the depthwise types,
Pooling, LRN, Crop, Upsample."""

from ..onnx.ops_vision import _pool_geometry, check_windows, conv_channel_axis, conv_geometry
from ..proto import caffe_pb2
from .codegen import Module, helper, literal, register_generator

PP = caffe_pb2.PoolingParameter
LRNP = caffe_pb2.LRNParameter


def _tuple(values):
    """``k`` for an all-equal geometry, else the tuple (the shorter spelling)."""
    values = tuple(int(v) for v in values)
    return literal(values[0]) if len(set(values)) == 1 else literal(values)


FOLD = helper("CaffeFoldedConv", '''
class CaffeFoldedConv(nn.Module):
    """Caffe's convolution over channel axis ``axis`` other than 1: the axes before it are
    all "num" (none at axis 0), folded into one batch axis around ``conv``."""

    def __init__(self, axis, conv):
        super().__init__()
        self.axis, self.conv = axis, conv

    def forward(self, x):
        lead = x.shape[:self.axis]
        y = self.conv(x.reshape((-1,) + tuple(x.shape[self.axis:])))
        return y.reshape(tuple(lead) + tuple(y.shape[1:]))
''')


EMPTY = helper("CaffeEmptyTop", '''
class CaffeEmptyTop(nn.Module):
    """A Deconvolution whose output has a spatial size of 0 (Caffe gives an empty top, where
    PyTorch's transposed convolutions can refuse one): zeros of the axes before the channel
    axis, then ``shape``."""

    def __init__(self, axis, shape):
        super().__init__()
        self.axis, self.shape = axis, tuple(shape)

    def forward(self, x):
        return x.new_zeros(tuple(x.shape[:self.axis]) + self.shape)
''')


@register_generator("Convolution", "Deconvolution", "ConvolutionDepthwise",
                    "DepthwiseConvolution")
def convolution(layer):
    p = layer.param.convolution_param
    rank = len(layer.in_shapes[0])
    axis = conv_channel_axis(p, rank)
    n = rank - axis - 1
    if n not in (1, 2, 3):
        raise layer.error("%d spatial axes: PyTorch convolves 1, 2 or 3" % n)
    blobs = layer.blobs
    _, stride, pad, dilation = conv_geometry(p, n)
    channels = layer.in_shapes[0][axis]
    deconv = layer.type == "Deconvolution"
    group = channels if "Depthwise" in layer.type else int(p.group)
    outputs = blobs[0].shape[1] * group if deconv else blobs[0].shape[0]
    top = layer.out_shapes[0]
    if deconv and 0 in top[axis + 1:]:
        return Module("CaffeEmptyTop(%d, %s)" % (axis, literal(tuple(top[axis:]))), {},
                      helpers=[EMPTY])
    cls = "nn.ConvTranspose%dd" % n if deconv else "nn.Conv%dd" % n
    args = ["%d, %d, %s" % (channels, outputs, _tuple(blobs[0].shape[2:]))]
    for name, values, default in (("stride", stride, 1), ("padding", pad, 0),
                                  ("dilation", dilation, 1)):
        if any(v != default for v in values):
            args.append("%s=%s" % (name, _tuple(values)))
    if group != 1:
        args.append("groups=%d" % group)
    weights = {"weight": blobs[0]}
    if p.bias_term:
        weights["bias"] = blobs[1].reshape(-1)
    else:
        args.append("bias=False")
    expr = "%s(%s)" % (cls, ", ".join(args))
    if axis != 1:
        weights = {"conv." + k: v for k, v in weights.items()}
        return Module("CaffeFoldedConv(%d, %s)" % (axis, expr), weights, helpers=[FOLD])
    return Module(expr, weights)


POOL = helper("CaffePool2d", '''
class CaffePool2d(nn.Module):
    """Caffe's pooling where PyTorch's has no equal: the output size rounded up (down where
    ceil is False: round_mode FLOOR), with the last window clipped to start inside the
    input plus its front padding; MAX over the window's part inside the input, AVE dividing
    by the window's overlap with the padded input, STOCHASTIC (inference: sum(x^2) /
    sum(x), 0 where sum(x) is not positive; windows from 0, no padding). A kernel of None
    is the whole plane (global pooling)."""

    def __init__(self, mode, kernel, stride, pad, ceil=True):
        super().__init__()
        self.mode, self.kernel, self.stride, self.pad = mode, kernel, stride, pad
        self.ceil = ceil

    def _size(self, size, k, s, p):
        span = size + 2 * p - k
        out = (-(-span // s) if self.ceil else span // s) + 1
        if p and (out - 1) * s >= size + p:
            out -= 1
        return out

    def forward(self, x):
        h, w = x.shape[-2:]
        (kh, kw), (sh, sw), (ph, pw) = self.kernel or (h, w), self.stride, self.pad
        oh, ow = self._size(h, kh, sh, ph), self._size(w, kw, sw, pw)
        if self.mode == "STOCHASTIC":
            eh, ew = max(0, (oh - 1) * sh + kh - h), max(0, (ow - 1) * sw + kw - w)
            x = F.pad(x, (0, ew, 0, eh))
            num = F.avg_pool2d(x * x, (kh, kw), (sh, sw))[..., :oh, :ow]
            den = F.avg_pool2d(x, (kh, kw), (sh, sw))[..., :oh, :ow]
            positive = den > 0  # Caffe: 0 where the window's sum is not positive
            return torch.where(positive, num / torch.where(positive, den, 1.0), 0.0)
        # the extent past the input (and its front padding) that the last window needs
        eh, ew = max(0, (oh - 1) * sh + kh - h - ph), max(0, (ow - 1) * sw + kw - w - pw)
        if self.mode == "MAX":
            x = F.pad(x, (pw, ew, ph, eh), value=float("-inf"))
            return F.max_pool2d(x, (kh, kw), (sh, sw))[..., :oh, :ow]
        # AVE: padding counts up to the input's size plus pad on both sides, not beyond
        inside = x.new_ones((1, 1, h + 2 * ph, w + 2 * pw))
        back_h, back_w = max(0, eh - ph), max(0, ew - pw)
        total = F.avg_pool2d(F.pad(x, (pw, pw + back_w, ph, ph + back_h)), (kh, kw), (sh, sw))
        count = F.avg_pool2d(F.pad(inside, (0, back_w, 0, back_h)), (kh, kw), (sh, sw))
        return (total / count)[..., :oh, :ow]
''')


def _caffe_size(size, k, s, p, ceil=True):
    span = size + 2 * p - k
    out = (-(-span // s) if ceil else span // s) + 1
    if p and (out - 1) * s >= size + p:
        out -= 1
    return out


@register_generator("Pooling")
def pooling(layer):
    """PyTorch's pooling with ``ceil_mode`` computes Caffe's sizes (the same clipping of the
    last window) and, with ``count_include_pad``, Caffe's AVE divisor; it takes a padding of
    at most half the kernel. Other geometries, and STOCHASTIC, get :class:`CaffePool2d`."""
    p = layer.param.pooling_param
    if len(layer.out_shapes) > 1:
        raise layer.error("the MAX pooling mask (second top) has no PyTorch equivalent")
    mode = {PP.MAX: "MAX", PP.AVE: "AVE", PP.STOCHASTIC: "STOCHASTIC"}[p.pool]
    if p.global_pooling:
        if mode == "STOCHASTIC":
            return Module("CaffePool2d('STOCHASTIC', None, (1, 1), (0, 0))", helpers=[POOL],
                          comment="global STOCHASTIC pooling")
        return Module("nn.Adaptive%sPool2d(1)" % ("Max" if mode == "MAX" else "Avg"),
                      comment="global %s pooling" % mode)
    kernel, stride, pad = _pool_geometry(p)
    h, w = layer.in_shapes[0][2:]
    check_windows(layer, "PyTorch", (h, w), kernel, pad, stride, layer.out_shapes[0][2:])
    ceil = bool(layer.layer.ceil_mode)  # round_mode FLOOR (or ceil_mode: false) rounds down
    native = (mode != "STOCHASTIC" and all(2 * q <= k for q, k in zip(pad, kernel))
              and all(_caffe_size(size, k, s, q, ceil) == o for size, k, s, q, o in
                      zip((h, w), kernel, stride, pad, layer.out_shapes[0][2:])))
    if not native:
        return Module("CaffePool2d(%r, %s, %s, %s%s)" % (
            mode, literal(tuple(kernel)), literal(tuple(stride)), literal(tuple(pad)),
            "" if ceil else ", ceil=False"), helpers=[POOL])
    args = [_tuple(kernel), "stride=%s" % _tuple(stride)]
    if any(pad):
        args.append("padding=%s" % _tuple(pad))
    if ceil:
        args.append("ceil_mode=True")
    cls = "nn.MaxPool2d" if mode == "MAX" else "nn.AvgPool2d"
    return Module("%s(%s)" % (cls, ", ".join(args)),
                  comment="Caffe rounds the size up" if ceil else "round_mode FLOOR")


LRN_WITHIN = helper("LRNWithinChannel", '''
class LRNWithinChannel(nn.Module):
    """Caffe's LRN over a size x size window of each channel: x * (1 + alpha * mean of x^2
    over the window)^-beta, the window zero-padded and always divided by size^2."""

    def __init__(self, size, alpha, beta):
        super().__init__()
        self.size, self.alpha, self.beta = size, alpha, beta

    def forward(self, x):
        half = (self.size - 1) // 2
        mean = F.avg_pool2d(x * x, self.size, 1, half, count_include_pad=True)
        return x * torch.pow(mean * self.alpha + 1.0, -self.beta)
''')


@register_generator("LRN")
def lrn(layer):
    p = layer.param.lrn_param
    size = int(p.local_size)
    if p.norm_region == LRNP.ACROSS_CHANNELS:
        # Caffe: x / (k + alpha / size * sum of x^2 over the size channels centred on x)^beta,
        # which is PyTorch's for odd sizes (Caffe allows only those)
        return Module("nn.LocalResponseNorm(%d, alpha=%s, beta=%s, k=%s)"
                      % (size, literal(float(p.alpha)), literal(float(p.beta)),
                         literal(float(p.k))))
    return Module("LRNWithinChannel(%d, %s, %s)" % (size, literal(float(p.alpha)),
                                                    literal(float(p.beta))),
                  helpers=[LRN_WITHIN])


CROP = helper("Crop", '''
class Crop(nn.Module):
    """Caffe's Crop: x cut to reference's shape on the axes from axis on, starting at
    offsets (one per axis)."""

    def __init__(self, axis, offsets):
        super().__init__()
        self.axis, self.offsets = axis, offsets

    def forward(self, x, reference):
        for i, offset in enumerate(self.offsets):
            axis = self.axis + i
            x = x.narrow(axis, offset, reference.shape[axis])
        return x
''')


@register_generator("Crop")
def crop(layer):
    p = layer.param.crop_param
    rank = len(layer.in_shapes[0])
    start = p.axis + rank if p.axis < 0 else p.axis
    n = rank - start
    offsets = [int(p.offset[0] if len(p.offset) == 1 else p.offset[i]) if len(p.offset) else 0
               for i in range(n)]
    return Module("Crop(%d, %s)" % (start, literal(offsets)), helpers=[CROP])


@register_generator("Upsample")
def upsample(layer):
    s = int(layer.param.upsample_param.scale)
    return Module("nn.Upsample(scale_factor=%d, mode=\"nearest\")" % s)
