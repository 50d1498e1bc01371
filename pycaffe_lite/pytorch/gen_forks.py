"""PyTorch code for the Caffe forks' layers: Permute, Normalize, PriorBox (SSD), Interp
(DeepLab / PSPNet), ShuffleChannel (ShuffleNet), ROIPooling (Fast R-CNN), Axpy (SENet), BN
(PSPNet, SegNet, ENet) and Reorg (YOLOv2's ports).
The depthwise convolutions are in :mod:`.gen_vision`, DetectionOutput in
:mod:`.gen_detection`."""

import numpy as np

from ..blob import Blob
from .codegen import Module, helper, literal, register_generator

PERMUTE = helper("Permute", '''
class Permute(nn.Module):
    """SSD's Permute: the axes in this order."""

    def __init__(self, order):
        super().__init__()
        self.order = order

    def forward(self, x):
        return x.permute(*self.order).contiguous()
''')


@register_generator("Permute")
def permute(layer):
    return Module("Permute(%s)" % literal(tuple(int(a) for a in layer.layer.order)),
                  helpers=[PERMUTE])


NORMALIZE = helper("Normalize", '''
class Normalize(nn.Module):
    """SSD's Normalize: x / sqrt(sum of x^2 + eps) times a learnt scale, the sum over
    (C, H, W) across_spatial, else over C at each position; the scale shared or one per
    channel."""

    def __init__(self, channels, across_spatial, channel_shared, eps):
        super().__init__()
        self.across_spatial, self.channel_shared, self.eps = across_spatial, channel_shared, eps
        self.weight = nn.Parameter(torch.ones(1 if channel_shared else channels))

    def forward(self, x):
        axes = list(range(1, x.dim())) if self.across_spatial else [1]
        norm = torch.sqrt((x * x).sum(axes, keepdim=True) + self.eps)
        scale = self.weight if self.channel_shared else \\
            self.weight.view((1, -1) + (1,) * (x.dim() - 2))
        return x / norm * scale
''')


@register_generator("Normalize")
def normalize(layer):
    lay = layer.layer
    s = layer.blobs[0].reshape(-1)
    return Module("Normalize(%d, %s, %s, %s)" % (layer.in_shapes[0][1],
                                                 literal(bool(lay.across_spatial)),
                                                 literal(bool(lay.channel_shared)),
                                                 literal(float(lay.eps))),
                  {"weight": s}, [NORMALIZE])


PRIOR_BOX = helper("PriorBox", '''
class PriorBox(nn.Module):
    """SSD's PriorBox: the prior boxes and their variances (1, 2, 4 * priors). They depend
    only on the sizes of the feature map and the image: those of the export are computed
    and kept in the buffer priors."""

    def __init__(self, shape, feature_size, image_size):
        super().__init__()
        self.feature_size, self.image_size = feature_size, image_size
        self.register_buffer("priors", torch.zeros(shape))

    def forward(self, feature, image):
        sizes = (tuple(feature.shape[2:]), tuple(image.shape[2:]))
        if sizes != (self.feature_size, self.image_size):
            raise ValueError(f"the priors were computed for a {self.feature_size} feature "
                             f"map of a {self.image_size} image, not {sizes[0]} and "
                             f"{sizes[1]}: export again for this input size")
        return self.priors
''')


@register_generator("PriorBox")
def prior_box(layer):
    bottom = [Blob(layer.in_shapes[0]), Blob(layer.in_shapes[1])]
    top = [Blob(layer.out_shapes[0])]
    layer.layer.forward(bottom, top)
    shape = tuple(layer.out_shapes[0])
    return Module("PriorBox(%s, %s, %s)" % (literal(shape), literal(layer.in_shapes[0][2:]),
                                            literal(layer.in_shapes[1][2:])),
                  {"priors": np.asarray(top[0].data, np.float32)}, [PRIOR_BOX])


INTERP = helper("Interp", '''
class Interp(nn.Module):
    """The Interp layer (DeepLab, PSPNet): the input cropped by -pad_beg and -pad_end, then
    resized bilinearly with the corners aligned. The size: from shrink_factor alone,
    (size - 1) // shrink + 1; from zoom_factor alone, size + (size - 1) * (zoom - 1); else
    height x width; else shrink, then zoom."""

    def __init__(self, zoom, shrink, height, width, pad_beg, pad_end):
        super().__init__()
        self.zoom, self.shrink, self.height, self.width = zoom, shrink, height, width
        self.pad_beg, self.pad_end = pad_beg, pad_end

    def _size(self, h, w):
        if self.shrink and not self.zoom:
            return (h - 1) // self.shrink + 1, (w - 1) // self.shrink + 1
        if self.zoom and not self.shrink:
            return h + (h - 1) * (self.zoom - 1), w + (w - 1) * (self.zoom - 1)
        if self.height and self.width:
            return self.height, self.width
        h, w = (h - 1) // self.shrink + 1, (w - 1) // self.shrink + 1
        return h + (h - 1) * (self.zoom - 1), w + (w - 1) * (self.zoom - 1)

    def forward(self, x):
        h, w = x.shape[2:]
        begin = -self.pad_beg
        x = x[:, :, begin:h + self.pad_end, begin:w + self.pad_end]
        size = self._size(*x.shape[2:])
        if tuple(size) == tuple(x.shape[2:]):
            return x.clone()
        return F.interpolate(x, size=size, mode="bilinear", align_corners=True)
''')


@register_generator("Interp")
def interp(layer):
    p = layer.param.interp_param
    args = [int(p.zoom_factor) if p.HasField("zoom_factor") else None,
            int(p.shrink_factor) if p.HasField("shrink_factor") else None,
            int(p.height) if p.HasField("height") and p.HasField("width") else None,
            int(p.width) if p.HasField("height") and p.HasField("width") else None,
            int(p.pad_beg), int(p.pad_end)]
    names = ("zoom", "shrink", "height", "width", "pad_beg", "pad_end")
    return Module("Interp(%s)" % ", ".join("%s=%s" % (n, a) for n, a in zip(names, args)),
                  helpers=[INTERP])


SHUFFLE = helper("ShuffleChannel", '''
class ShuffleChannel(nn.Module):
    """ShuffleNet's channel shuffle: (N, g, C / g, ...) with the two group axes swapped."""

    def __init__(self, group):
        super().__init__()
        self.group = group

    def forward(self, x):
        n, c = x.shape[:2]
        rest = tuple(x.shape[2:])
        y = x.reshape((n, self.group, c // self.group) + rest).transpose(1, 2)
        return y.reshape((n, c) + rest)
''')


@register_generator("ShuffleChannel")
def shuffle_channel(layer):
    return Module("ShuffleChannel(%d)" % layer.layer.group, helpers=[SHUFFLE])


ROI_POOLING = helper("ROIPooling", '''
class ROIPooling(nn.Module):
    """Fast R-CNN's ROI pooling: each region (batch index, x1, y1, x2, y2), scaled by
    spatial_scale and rounded half away from zero, cut into pooled_h x pooled_w bins
    (floor of the start, ceiling of the end, in float32 as Caffe), each the maximum of its
    part of the map (0 when empty)."""

    def __init__(self, pooled_h, pooled_w, spatial_scale):
        super().__init__()
        self.pooled_h, self.pooled_w, self.spatial_scale = pooled_h, pooled_w, spatial_scale

    @staticmethod
    def _bins(start, end, pooled, size):
        extent = torch.tensor(float(max(end - start + 1, 1)))
        step = extent / float(pooled)
        at = torch.arange(pooled, dtype=torch.float32)
        lo = torch.floor(at * step).long() + start
        hi = torch.ceil((at + 1) * step).long() + start
        return lo.clamp(0, size).tolist(), hi.clamp(0, size).tolist()

    def forward(self, x, rois):
        rois = rois.reshape(-1, 5)
        h, w = x.shape[2:]
        y = x.new_zeros((rois.shape[0], x.shape[1], self.pooled_h, self.pooled_w))
        scaled = rois[:, 1:].float() * self.spatial_scale
        corners = (torch.sign(scaled) * torch.floor(torch.abs(scaled) + 0.5)).long().tolist()
        for r, (x1, y1, x2, y2) in enumerate(corners):
            image = x[int(rois[r, 0])]
            rows = self._bins(y1, y2, self.pooled_h, h)
            cols = self._bins(x1, x2, self.pooled_w, w)
            for i, (r0, r1) in enumerate(zip(*rows)):
                for j, (c0, c1) in enumerate(zip(*cols)):
                    if r1 > r0 and c1 > c0:
                        y[r, :, i, j] = image[:, r0:r1, c0:c1].amax((1, 2))
        return y
''')


@register_generator("ROIPooling")
def roi_pooling(layer):
    lay = layer.layer
    return Module("ROIPooling(%d, %d, %s)" % (lay.pooled_h, lay.pooled_w,
                                              literal(float(lay.spatial_scale))),
                  helpers=[ROI_POOLING])


AXPY = helper("Axpy", '''
class Axpy(nn.Module):
    """SENet's Axpy: a * x + y, a (N, C) or (N, C, 1, 1) scaling each channel of x."""

    def forward(self, a, x, y):
        return a.reshape(tuple(a.shape[:2]) + (1,) * (x.dim() - 2)) * x + y
''')


@register_generator("Axpy")
def axpy(layer):
    return Module("Axpy()", helpers=[AXPY])


FORK_BN = helper("ForkBN", '''
class ForkBN(nn.Module):
    """The forks' BN layer, a per-channel scale and shift in it. kind "running" (PSPNet's):
    slope * (x - mean) / sqrt(var + eps) + bias from its stored statistics; "inference"
    (SegNet's and ENet's bn_mode INFERENCE): scale * x + shift; "batch" (their LEARN):
    normalised by the batch's statistics, E[x^2] - E[x]^2, in every mode."""

    def __init__(self, channels, kind, eps):
        super().__init__()
        self.kind, self.eps = kind, eps
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        if kind == "running":
            self.register_buffer("mean", torch.zeros(channels))
            self.register_buffer("variance", torch.ones(channels))

    def forward(self, x):
        shape = (1, -1) + (1,) * (x.dim() - 2)
        weight, bias = self.weight.view(shape), self.bias.view(shape)
        if self.kind == "inference":
            return x * weight + bias
        if self.kind == "running":
            mean, var = self.mean.view(shape), self.variance.view(shape)
        else:
            axes = [0] + list(range(2, x.dim()))
            mean = x.mean(axes, keepdim=True)
            var = (x * x).mean(axes, keepdim=True) - mean * mean
        return (x - mean) / torch.sqrt(var + self.eps) * weight + bias
''')


@register_generator("BN")
def fork_bn(layer):
    """PSPNet's BN (its running statistics), or SegNet's and ENet's (bn_mode INFERENCE, or
    LEARN's batch statistics)."""
    impl = layer.layer
    blobs = [b.reshape(-1) for b in layer.blobs]
    weights = {"weight": blobs[0], "bias": blobs[1]}
    if hasattr(impl, "uses_running_stats"):  # PSPNet's
        if not impl.uses_running_stats or (layer.train and not impl.frozen):
            raise layer.error("PSPNet's BN trains with the batch's statistics, which the "
                              "exported module does not compute; export the TEST net "
                              "without --train, or freeze the layer (bn_param { frozen: "
                              "true })")
        weights.update(mean=blobs[2], variance=blobs[3])
        kind, eps = "running", float(impl.eps)
    else:
        if len(layer.out_shapes) > 1:
            raise layer.error("the batch mean and variance tops of bn_mode LEARN have no "
                              "PyTorch equivalent")
        kind, eps = ("batch" if impl.learn else "inference"), 1e-9
    return Module("ForkBN(%d, %r, %s)" % (blobs[0].size, kind, literal(eps)), weights,
                  [FORK_BN])


REORG = helper("Reorg", '''
class Reorg(nn.Module):
    """Darknet's reorg (YOLOv2's passthrough) in its element order: the input's memory read
    as (N, C / s^2, H, s, W, s), permuted, and read as (N, C * s^2, H / s, W / s); reverse:
    the inverse, (N, s, s, C / s^2, H, W) permuted into (N, C / s^2, H * s, W * s)."""

    def __init__(self, stride, reverse):
        super().__init__()
        self.stride, self.reverse = stride, reverse

    def forward(self, x):
        n, c, h, w = x.shape
        s = self.stride
        if self.reverse:
            y = x.reshape(n, s, s, c // (s * s), h, w).permute(0, 3, 4, 1, 5, 2)
            return y.reshape(n, c // (s * s), h * s, w * s)
        y = x.reshape(n, c // (s * s), h, s, w, s).permute(0, 3, 5, 1, 2, 4)
        return y.reshape(n, c * s * s, h // s, w // s)
''')


@register_generator("Reorg")
def reorg(layer):
    return Module("Reorg(%d, %s)" % (layer.layer.stride, literal(bool(layer.layer.reverse))),
                  helpers=[REORG])
