"""PyTorch code for Caffe's common layers: InnerProduct, BatchNorm, Scale, Bias, Softmax,
Concat, Slice, Flatten, Reshape, Eltwise, ArgMax, Reduction, Tile, MVN, Embed, Parameter."""

from ..errors import CaffeError
from ..proto import caffe_pb2
from .codegen import Module, helper, literal, register_generator


def _axis(axis, rank):
    return axis + rank if axis < 0 else axis


@register_generator("InnerProduct")
def inner_product(layer):
    """nn.Linear on the bottom flattened from ``axis`` (Caffe's inner product treats the axes
    from ``axis`` on as one); a transposed Caffe weight is stored transposed back."""
    p = layer.param.inner_product_param
    axis = _axis(p.axis, len(layer.in_shapes[0]))
    blobs = layer.blobs
    w = blobs[0].reshape(blobs[0].shape[-2:]) if blobs[0].ndim > 2 else blobs[0]
    if p.transpose:
        w = w.T
    weights = {"weight": w}
    if p.bias_term:
        weights["bias"] = blobs[1].reshape(-1)
    expr = "nn.Linear(%d, %d%s)" % (w.shape[1], w.shape[0], "" if p.bias_term else ", bias=False")
    flat = len(layer.in_shapes[0]) > axis + 1
    return Module(expr, weights, args=["{}.flatten(%d)" % axis] if flat else None)


BATCH_NORM = helper("BatchNorm", '''
class BatchNorm(nn.Module):
    """Caffe's BatchNorm: no affine part (a Scale layer follows it), and three buffers as
    Caffe keeps them: the running sums of the means and variances and the scale factor that
    divides both (0: the statistics are zero). With use_global_stats, (x - mean) /
    sqrt(var + eps) from the buffers; otherwise, and in training where trainable, from the
    batch (the biased variance), updating the buffers as Caffe does."""

    def __init__(self, channels, eps, momentum, use_global_stats, trainable):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.use_global_stats, self.trainable = use_global_stats, trainable
        self.register_buffer("mean", torch.zeros(channels))
        self.register_buffer("variance", torch.zeros(channels))
        self.register_buffer("scale_factor", torch.zeros(1))

    def forward(self, x):
        if x.dim() == 1:  # Caffe's one channel, of one value per item
            return self.forward(x[:, None])[:, 0]
        shape = (1, -1) + (1,) * (x.dim() - 2)
        if self.use_global_stats and not (self.training and self.trainable):
            s = self.scale_factor[0]
            factor = torch.where(s == 0, torch.zeros_like(s), 1.0 / s)
            mean = (self.mean * factor).view(shape)
            var = (self.variance * factor).view(shape)
            return (x - mean) / torch.sqrt(var + self.eps)
        axes = [0] + list(range(2, x.dim()))
        mean = x.mean(axes, keepdim=True)
        centred = x - mean
        var = (centred * centred).mean(axes, keepdim=True)
        if self.training and self.trainable:
            with torch.no_grad():
                m = x.numel() // x.shape[1]
                unbiased = m / (m - 1) if m > 1 else 1.0
                self.scale_factor.mul_(self.momentum).add_(1.0)
                self.mean.mul_(self.momentum).add_(mean.reshape(-1))
                self.variance.mul_(self.momentum).add_(var.reshape(-1) * unbiased)
        return centred / torch.sqrt(var + self.eps)
''')


@register_generator("BatchNorm")
def batch_norm(layer):
    """Caffe's BatchNorm; with the forks' scale and bias blobs (NVCaffe's scale_bias, Intel
    Caffe's use_weight_bias) and Intel's relu, a Sequential of it, a Scale and a ReLU, with
    the stored statistics only (their batch statistics and running averages are the forks'
    own, and Intel's sub-batches have no equivalent here)."""
    p = layer.param.batch_norm_param
    bn = layer.layer
    blobs = layer.blobs
    channels = blobs[0].size
    extra = bool(bn.affine_blobs or bn.relu or bn.scale_bias or
                 (p.stats_batch_size and not bn.use_global_stats))
    if extra and not bn.use_global_stats:
        raise CaffeError("layer '%s' (BatchNorm): the NVCaffe / Intel Caffe options (scale "
                         "and bias blobs, relu, stats_batch_size) convert with "
                         "use_global_stats only" % layer.param.name)
    expr = "BatchNorm(%d, eps=%s, momentum=%s, use_global_stats=%s, trainable=%s)" % (
        channels, literal(float(bn.eps)), literal(float(p.moving_average_fraction)),
        literal(bool(bn.use_global_stats)), literal(bool(layer.train)))
    weights = {"mean": blobs[0].reshape(-1), "variance": blobs[1].reshape(-1),
               "scale_factor": blobs[2].reshape(-1)[:1]}
    if not extra:
        return Module(expr, weights, [BATCH_NORM])
    parts = [expr]
    weights = {"0." + k: v for k, v in weights.items()}
    if bn.affine_blobs:
        weights["1.weight"] = blobs[3].reshape(-1)
        shapes = [literal((channels,))]
        if bn.affine_blobs > 1:
            weights["1.bias"] = blobs[4].reshape(-1)
            shapes.append(literal((channels,)))
        parts.append("Scale(1, %s)" % ", ".join(shapes))
    if bn.relu:
        parts.append("nn.ReLU()")
    return Module("nn.Sequential(%s)" % ", ".join(parts), weights, [BATCH_NORM, SCALE])


SCALE = helper("Scale", '''
class Scale(nn.Module):
    """Caffe's Scale: x * weight (+ bias), weight and bias broadcast over x's axes from
    axis on (their shape is x's from axis, trailing axes of 1 left out). With a second
    input, that input is the scale (shape None)."""

    def __init__(self, axis, shape, bias_shape=None):
        super().__init__()
        self.axis = axis
        self.weight = nn.Parameter(torch.ones(shape)) if shape is not None else None
        self.bias = nn.Parameter(torch.zeros(bias_shape)) if bias_shape is not None else None

    def _shaped(self, t, x):
        axis = self.axis % x.dim()
        return t.reshape(t.shape + (1,) * (x.dim() - axis - t.dim()))

    def forward(self, x, scale=None):
        y = x * self._shaped(self.weight if scale is None else scale, x)
        return y + self._shaped(self.bias, x) if self.bias is not None else y
''')


@register_generator("Scale")
def scale(layer):
    p = layer.param.scale_param
    blobs = layer.blobs
    weights = {}
    if len(layer.in_shapes) == 1:
        weights["weight"] = blobs.pop(0)
    if p.bias_term:
        weights["bias"] = blobs[0]
    shapes = [literal(tuple(weights[k].shape)) if k in weights else "None"
              for k in ("weight", "bias")]
    if shapes[1] == "None":
        shapes.pop()
    return Module("Scale(%d, %s)" % (p.axis, ", ".join(shapes)), weights, [SCALE])


BIAS = helper("Bias", '''
class Bias(nn.Module):
    """Caffe's Bias: x + bias broadcast over x's axes from axis on; with a second input,
    that input is the bias."""

    def __init__(self, axis, shape):
        super().__init__()
        self.axis = axis
        self.bias = nn.Parameter(torch.zeros(shape)) if shape is not None else None

    def forward(self, x, bias=None):
        b = self.bias if bias is None else bias
        axis = self.axis % x.dim()
        return x + b.reshape(b.shape + (1,) * (x.dim() - axis - b.dim()))
''')


@register_generator("Bias")
def bias(layer):
    axis = layer.param.bias_param.axis
    if len(layer.in_shapes) > 1:
        return Module("Bias(%d, None)" % axis, helpers=[BIAS])
    b = layer.blobs[0]
    return Module("Bias(%d, %s)" % (axis, literal(tuple(b.shape))), {"bias": b}, [BIAS])


@register_generator("Softmax")
def softmax(layer):
    axis = _axis(layer.param.softmax_param.axis, len(layer.in_shapes[0]))
    return Module("nn.Softmax(dim=%d)" % axis)


CONCAT = helper("Concat", '''
class Concat(nn.Module):
    """Caffe's Concat: the inputs joined along axis."""

    def __init__(self, axis):
        super().__init__()
        self.axis = axis

    def forward(self, *xs):
        return torch.cat(xs, self.axis)
''')


@register_generator("Concat")
def concat(layer):
    return Module("Concat(%d)" % int(layer.layer.axis), helpers=[CONCAT])


SLICE = helper("Slice", '''
class Slice(nn.Module):
    """Caffe's Slice: x cut along axis into parts of these sizes (from the slice points)."""

    def __init__(self, axis, sizes):
        super().__init__()
        self.axis, self.sizes = axis, list(sizes)

    def forward(self, x):
        return torch.split(x, self.sizes, self.axis)
''')


@register_generator("Slice")
def slice_(layer):
    if len(layer.out_shapes) == 1:  # one top: Caffe copies the bottom
        return Module("nn.Identity()", comment="Slice to one top: a copy")
    axis = int(layer.layer.axis)
    sizes = tuple(s[axis] for s in layer.out_shapes)
    comment = "slice points %s" % list(layer.param.slice_param.slice_point) \
        if len(layer.param.slice_param.slice_point) else None
    return Module("Slice(%d, %s)" % (axis, literal(sizes)), helpers=[SLICE], comment=comment)


@register_generator("Flatten")
def flatten(layer):
    p = layer.param.flatten_param
    rank = len(layer.in_shapes[0])
    start, end = _axis(p.axis, rank), _axis(p.end_axis, rank)
    if end < start:  # end_axis one before axis: Caffe inserts an axis of 1 there
        return Module("nn.Unflatten(%d, (1, %d))" % (start, layer.in_shapes[0][start]),
                      comment="Flatten of no axes: an axis of 1 at %d" % start)
    return Module("nn.Flatten(%d, %d)" % (start, end))


RESHAPE = helper("Reshape", '''
class Reshape(nn.Module):
    """Caffe's Reshape: the axes from axis (num_axes of them, -1: all) replaced by dims, where
    0 copies the input's axis at that place and -1 is inferred."""

    def __init__(self, axis, num_axes, dims):
        super().__init__()
        self.axis, self.num_axes, self.dims = axis, num_axes, list(dims)

    def forward(self, x):
        start = self.axis if self.axis >= 0 else x.dim() + self.axis + 1
        end = x.dim() if self.num_axes == -1 else start + self.num_axes
        dims = [x.shape[start + i] if d == 0 else d for i, d in enumerate(self.dims)]
        return x.reshape(tuple(x.shape[:start]) + tuple(dims) + tuple(x.shape[end:]))
''')


@register_generator("Reshape")
def reshape(layer):
    p = layer.param.reshape_param
    dims = tuple(int(d) for d in p.shape.dim)
    return Module("Reshape(%d, %d, %s)" % (p.axis, p.num_axes, literal(dims)),
                  helpers=[RESHAPE])


ELTWISE = helper("Eltwise", '''
class Eltwise(nn.Module):
    """Caffe's Eltwise: the product, the sum with coefficients, or the maximum of the
    inputs."""

    def __init__(self, operation, coeffs=None):
        super().__init__()
        self.operation, self.coeffs = operation, coeffs

    def forward(self, *xs):
        y = xs[0] if self.coeffs is None or self.coeffs[0] == 1.0 else xs[0] * self.coeffs[0]
        for i, x in enumerate(xs[1:], 1):
            if self.operation == "PROD":
                y = y * x
            elif self.operation == "MAX":
                y = torch.maximum(y, x)
            elif self.coeffs is None or self.coeffs[i] == 1.0:
                y = y + x
            else:
                y = y + x * self.coeffs[i]
        return y
''')


@register_generator("Eltwise")
def eltwise(layer):
    p = layer.param.eltwise_param
    E = caffe_pb2.EltwiseParameter
    op = {E.PROD: "PROD", E.SUM: "SUM", E.MAX: "MAX"}[p.operation]
    if op == "SUM" and len(p.coeff) and any(float(c) != 1.0 for c in p.coeff):
        return Module("Eltwise(%r, %s)" % (op, literal([float(c) for c in p.coeff])),
                      helpers=[ELTWISE])
    return Module("Eltwise(%r)" % op, helpers=[ELTWISE])


ARGMAX = helper("ArgMax", '''
class ArgMax(nn.Module):
    """Caffe's ArgMax: the indices (as floats) of the top_k largest values along axis, or,
    with no axis, of each item's values flattened: (N, 1, top_k[, 1...]), the values after
    the indices (N, 2, top_k) with out_max_val. Equal values rank the higher index first
    (Caffe sorts (value, index) pairs in decreasing order)."""

    def __init__(self, top_k, out_max_val, axis):
        super().__init__()
        self.top_k, self.out_max_val, self.axis = top_k, out_max_val, axis

    def _top(self, x, dim):
        size = x.shape[dim]
        values, order = torch.sort(x.flip(dim), dim=dim, descending=True, stable=True)
        keep = torch.arange(self.top_k, device=x.device)
        return (values.index_select(dim, keep),
                (size - 1) - order.index_select(dim, keep))

    def forward(self, x):
        if self.axis is not None:
            values, indices = self._top(x, self.axis)
            return values if self.out_max_val else indices.to(x.dtype)
        values, indices = self._top(x.reshape(x.shape[0], -1), 1)  # (N,): one per item
        parts = [indices.to(x.dtype)] + ([values] if self.out_max_val else [])
        y = torch.stack(parts, 1)
        return y.reshape(y.shape + (1,) * (x.dim() - 3))
''')


@register_generator("ArgMax")
def argmax(layer):
    p = layer.param.argmax_param
    axis = _axis(p.axis, len(layer.in_shapes[0])) if p.HasField("axis") else None
    return Module("ArgMax(%d, %s, %s)" % (p.top_k, literal(bool(p.out_max_val)), axis),
                  helpers=[ARGMAX])


REDUCTION = helper("Reduction", '''
class Reduction(nn.Module):
    """Caffe's Reduction: SUM, ASUM, SUMSQ or MEAN over all axes from axis on, times
    coeff."""

    def __init__(self, operation, axis, coeff):
        super().__init__()
        self.operation, self.axis, self.coeff = operation, axis, coeff

    def forward(self, x):
        x = x.reshape(tuple(x.shape[:self.axis]) + (-1,))
        if self.operation == "ASUM":
            x = torch.abs(x)
        elif self.operation == "SUMSQ":
            x = x * x
        y = x.mean(-1) if self.operation == "MEAN" else x.sum(-1)
        return y * self.coeff if self.coeff != 1.0 else y
''')


@register_generator("Reduction")
def reduction(layer):
    p = layer.param.reduction_param
    R = caffe_pb2.ReductionParameter
    op = {R.SUM: "SUM", R.ASUM: "ASUM", R.SUMSQ: "SUMSQ", R.MEAN: "MEAN"}[p.operation]
    axis = _axis(p.axis, len(layer.in_shapes[0]))
    return Module("Reduction(%r, %d, %s)" % (op, axis, literal(float(p.coeff))),
                  helpers=[REDUCTION])


@register_generator("Tile")
def tile(layer):
    p = layer.param.tile_param
    rank = len(layer.in_shapes[0])
    repeats = [1] * rank
    repeats[_axis(p.axis, rank)] = int(p.tiles)
    return Module("Tile(%s)" % literal(tuple(repeats)), helpers=[TILE])


TILE = helper("Tile", '''
class Tile(nn.Module):
    """Caffe's Tile: x repeated tiles times along one axis."""

    def __init__(self, repeats):
        super().__init__()
        self.repeats = repeats

    def forward(self, x):
        return x.repeat(*self.repeats)
''')

MVN = helper("MVN", '''
class MVN(nn.Module):
    """Caffe's MVN: the mean subtracted per item and channel (or per item across channels),
    then divided by the standard deviation plus eps where asked. The output has 4 axes, as
    Caffe's (num, channels, height, width): trailing axes of 1 added to a smaller input."""

    def __init__(self, across_channels, normalize_variance, eps):
        super().__init__()
        self.across_channels = across_channels
        self.normalize_variance, self.eps = normalize_variance, eps

    def forward(self, x):
        if x.dim() < 4:
            x = x.reshape(tuple(x.shape) + (1,) * (4 - x.dim()))
        axes = list(range(1 if self.across_channels else 2, x.dim()))
        centred = x - x.mean(axes, keepdim=True)
        if not self.normalize_variance:
            return centred
        std = torch.sqrt((centred * centred).mean(axes, keepdim=True))
        return centred / (std + self.eps)
''')


@register_generator("MVN")
def mvn(layer):
    p = layer.param.mvn_param
    return Module("MVN(%s, %s, %s)" % (literal(bool(p.across_channels)),
                                       literal(bool(p.normalize_variance)),
                                       literal(float(p.eps))), helpers=[MVN])


EMBED = helper("Embed", '''
class Embed(nn.Module):
    """Caffe's Embed: rows of weight picked by the input's values (indices held as
    floats), plus bias."""

    def __init__(self, input_dim, num_output, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(input_dim, num_output))
        self.bias = nn.Parameter(torch.zeros(num_output)) if bias else None

    def forward(self, x):
        y = self.weight[x.long()]
        return y + self.bias if self.bias is not None else y
''')


@register_generator("Embed")
def embed(layer):
    p = layer.param.embed_param
    blobs = layer.blobs
    weights = {"weight": blobs[0]}
    if p.bias_term:
        weights["bias"] = blobs[1].reshape(-1)
    return Module("Embed(%d, %d, %s)" % (blobs[0].shape[0], blobs[0].shape[1],
                                         literal(bool(p.bias_term))), weights, [EMBED])



PARAMETER = helper("Parameter", '''
class Parameter(nn.Module):
    """Caffe's Parameter layer: no input; its one blob, learnt like a weight, is the output."""

    def __init__(self, shape):
        super().__init__()
        self.value = nn.Parameter(torch.zeros(shape))

    def forward(self):
        return self.value.clone()  # not the parameter itself: a new tensor, as other layers give
''')


@register_generator("Parameter")
def parameter(layer):
    value = layer.blobs[0]
    return Module("Parameter(%s)" % literal(tuple(value.shape)), {"value": value}, [PARAMETER])
