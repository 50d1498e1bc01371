"""The Darknet sections that move or combine feature maps: ``[reorg]`` (YOLOv2's
passthrough), ``[reorg3d]`` (AlexeyAB's space-to-depth), ``[scale_channels]``
(EfficientNet's squeeze-and-excitation), ``[sam]`` (spatial attention), ``[activation]``
(an activation on its own), and for :mod:`.sections`' ``[shortcut]`` and ``[upsample]`` the
weighted shortcut and the reverse (negative stride) upsample; a mixin of
:class:`~.convert._Converter`, as :mod:`.sections` is.
"""

import numpy as np

from ..proto import caffe_pb2
from .sections import _Out, refuse_unapplied

EP = caffe_pb2.EltwiseParameter
PP = caffe_pb2.PoolingParameter


class CombiningSections:
    """``[reorg]``, ``[reorg3d]``, ``[scale_channels]``, ``[sam]`` and ``[activation]`` (a mixin
    of the converter)."""

    @staticmethod
    def _stride_and_reverse(sec):
        """A reorg section's ``stride`` (positive) and ``reverse``."""
        stride = sec.get_int("stride", 1)
        if stride < 1:
            raise sec.error("stride must be positive, got %d" % stride, "stride")
        return stride, sec.get_int("reverse", 0)

    def reorg(self, sec, prev, i):
        """Darknet's ``[reorg]``: ``reorg_cpu`` called with the input's sizes and forward=0
        (pjreddie's ``forward_reorg_layer``; AlexeyAB's fork reads ``[reorg]`` as its
        ``reorg_old`` layer, which does the same). That is the element order of the ``Reorg``
        layer (see :func:`pycaffe_lite.layers.vision.reorg_layer.darknet_reorg`)."""
        name = "reorg%d" % i
        prev = self.image_input(sec, prev, name)
        stride, reverse = self._stride_and_reverse(sec)
        for key in ("flatten", "extra"):
            self.refuse(sec, key)
        s2 = stride * stride
        if prev.c % s2 or (not reverse and (prev.h % stride or prev.w % stride)):
            raise sec.error(
                "the input, %dx%dx%d, does not divide by stride=%d (channels by %d%s); "
                "Darknet's reorg would leave parts of its output unwritten or write past it"
                % (prev.c, prev.h, prev.w, stride, s2,
                   "" if reverse else ", height and width by %d" % stride), "stride")
        lp = self.layer(name, "Reorg", [prev.blob], [name])
        lp.reorg_param.stride = stride
        if reverse:
            lp.reorg_param.reverse = True
            return _Out(name, prev.c // s2, prev.h * stride, prev.w * stride)
        return _Out(name, prev.c * s2, prev.h // stride, prev.w // stride)

    def reorg3d(self, sec, prev, i):
        """AlexeyAB's ``[reorg3d]``: its ``reorg_cpu`` called with the output's sizes.
        Forward (the published cfgs): a plain space-to-depth, output channel
        ``(dy * stride + dx) * C + c`` at ``(y, x)`` is input channel ``c`` at
        ``(y * stride + dy, x * stride + dx)``. ``reverse=1``: the input's memory read as
        ``(C / s^2, H * s, W * s)``, depth-to-space into ``(C / s^4, H * s^2, W * s^2)`` and
        that memory read as ``(C / s^2, H * s, W * s)``. Both are Reshape, Permute, Reshape."""
        name = "reorg3d%d" % i
        prev = self.image_input(sec, prev, name)
        s, reverse = self._stride_and_reverse(sec)
        if reverse:
            if prev.c % s ** 4:
                raise sec.error(
                    "reverse=1 with stride=%d needs channels divisible by %d (stride^4), the "
                    "input is %dx%dx%d; Darknet's reorg would leave parts of its output "
                    "unwritten" % (s, s ** 4, prev.c, prev.h, prev.w), "reverse")
            q = prev.c // s ** 4
            split = [0, s, s, q, prev.h * s, prev.w * s]
            order = [0, 3, 4, 1, 5, 2]
            out = _Out(name, prev.c // (s * s), prev.h * s, prev.w * s)
        else:
            if prev.h % s or prev.w % s:
                raise sec.error(
                    "the input, %dx%dx%d, does not divide by stride=%d (height and width); "
                    "Darknet's reorg would read it with the wrong row length"
                    % (prev.c, prev.h, prev.w, s), "stride")
            split = [0, prev.c, prev.h // s, s, prev.w // s, s]
            order = [0, 3, 5, 1, 2, 4]
            out = _Out(name, prev.c * s * s, prev.h // s, prev.w // s)
        rs = self.layer(name + "_split", "Reshape", [prev.blob], [name + "_split"])
        rs.reshape_param.shape.dim.extend(split)
        pm = self.layer(name + "_permute", "Permute", [name + "_split"], [name + "_permuted"])
        pm.permute_param.order.extend(order)
        lp = self.layer(name, "Reshape", [name + "_permuted"], [name])
        lp.reshape_param.shape.dim.extend([0, out.c, out.h, out.w])
        return out

    @staticmethod
    def shortcut_sizes_message(index, src, prev):
        """Why a ``[shortcut]`` between outputs of different heights or widths is not
        converted: the two Darknets compute different things and the .cfg does not say
        which one it is for."""
        w1, h1, w2, h2 = src.w, src.h, prev.w, prev.h
        if w1 // w2 != h1 // h2 or w2 // w1 != h2 // h1:
            pjreddie = "stops on an assertion too (the two sizes' ratios differ)"
        else:
            stride, sample = max(w1 // w2, 1), max(w2 // w1, 1)
            pjreddie = ("adds layer %d at (%d y, %d x) to the previous layer at (%d y, %d x), "
                        "for y < %d, x < %d and the first %d channels (shortcut_cpu)"
                        % (index, stride, stride, sample, sample, min(h1, h2), min(w1, w2),
                           min(src.c, prev.c)))
        return ("layer %d gives %dx%dx%d but the previous layer gives %dx%dx%d; a shortcut "
                "between different heights or widths is not converted: pjreddie's Darknet %s, "
                "while AlexeyAB's fork stops on an assertion (or, built without asserts, adds "
                "the two outputs' memory flat, position by position), and the .cfg does not "
                "tell which one it is for" % (index, src.c, src.h, src.w, prev.c, prev.h,
                                              prev.w, pjreddie))

    def _from_layer(self, sec):
        """The ``from`` layer of [scale_channels] / [sam] (Darknet reads one, with atoi)."""
        if not sec.has("from"):
            raise sec.error("from is required (the layer to multiply)")
        return self.outs[self.source(sec, "from", sec.get_int("from"))]

    def _product_activation(self, sec, name):
        refuse_unapplied(sec)
        self.activation(sec, name, name)

    def scale_channels(self, sec, prev, i):
        """AlexeyAB's ``[scale_channels]``: the ``from`` layer's output times the previous
        layer's, one value per channel (the previous layer is ``C x 1 x 1``: a ``Scale`` with
        two bottoms over the batch and channel axes, after a ``Reshape`` to ``(N, C)``) or,
        with ``scale_wh=1``, one value per position (the previous layer is ``1 x H x W``:
        ``Tile`` over the channels, ``Eltwise`` PROD); then the activation."""
        name = "scale_channels%d" % i
        src = self._from_layer(sec)
        scale_wh = sec.get_int("scale_wh", 0)
        if src.flat:
            raise sec.error("the from layer gives no image to scale")
        if scale_wh:
            if prev.flat or prev.c != 1 or (prev.h, prev.w) != (src.h, src.w):
                raise sec.error("scale_wh=1 needs the previous layer to give 1 x %d x %d (one "
                                "value per position of the from layer, %dx%dx%d); it gives "
                                "%dx%dx%d" % (src.h, src.w, src.c, src.h, src.w, prev.c,
                                              prev.h, prev.w))
            tiled = name + "_tiled"
            tile = self.layer(name + "_tile", "Tile", [prev.blob], [tiled])
            tile.tile_param.axis = 1
            tile.tile_param.tiles = src.c
            lp = self.layer(name, "Eltwise", [src.blob, tiled], [name])
            lp.eltwise_param.operation = EP.PROD
        else:
            if prev.c != src.c or (prev.h, prev.w) != (1, 1):
                raise sec.error("the previous layer must give one value per channel of the "
                                "from layer (%dx1x1 for %dx%dx%d); it gives %dx%dx%d"
                                % (src.c, src.c, src.h, src.w, prev.c, prev.h, prev.w))
            scales = prev.blob
            if not prev.flat:
                scales = name + "_scales"
                rs = self.layer(name + "_reshape", "Reshape", [prev.blob], [scales])
                rs.reshape_param.shape.dim.extend([0, -1])
            lp = self.layer(name, "Scale", [src.blob, scales], [name])
            lp.scale_param.axis = 0
        self._product_activation(sec, name)
        return _Out(name, src.c, src.h, src.w)

    def sam(self, sec, prev, i):
        """AlexeyAB's ``[sam]``: the ``from`` layer's output times the previous layer's,
        element by element (``Eltwise`` PROD), then the activation."""
        name = "sam%d" % i
        src, prev = self.same_form(name, [self._from_layer(sec), prev])
        if (src.c, src.h, src.w) != (prev.c, prev.h, prev.w):
            raise sec.error("the from layer gives %dx%dx%d and the previous layer %dx%dx%d; "
                            "[sam] multiplies outputs of the same shape"
                            % (src.c, src.h, src.w, prev.c, prev.h, prev.w), "from")
        lp = self.layer(name, "Eltwise", [src.blob, prev.blob], [name])
        lp.eltwise_param.operation = EP.PROD
        self._product_activation(sec, name)
        return _Out(name, prev.c, prev.h, prev.w, prev.flat)

    def weighted_shortcut(self, sec, name, prev, srcs, refs):
        """AlexeyAB's ``[shortcut]`` with ``weights_type`` (``shortcut_multilayer_cpu``): the
        previous layer and each ``from`` layer times its weight (``per_feature`` /
        ``per_layer``: one per input; ``per_channel``: one per input and channel), summed,
        then the activation. ``weights_normalization`` ``relu`` (``avg_relu``) divides the
        weights' ReLU by their sum + 0.0001, ``softmax`` is their softmax with 0.0001 added
        to the denominator. ``Scale`` per input with the normalised weights, ``Eltwise``."""
        kind = sec.get_str("weights_type")
        norm = sec.get_str("weights_normalization", "none")
        if kind not in ("per_feature", "per_layer", "per_channel"):
            raise sec.error("weights_type=%s: Darknet knows none, per_feature (per_layer) and "
                            "per_channel" % kind, "weights_type")
        if norm not in ("none", "relu", "avg_relu", "softmax"):
            raise sec.error("weights_normalization=%s: Darknet knows none, relu (avg_relu) and "
                            "softmax" % norm, "weights_normalization")
        for r, src in zip(refs, srcs):
            if (src.c, src.h, src.w) != (prev.c, prev.h, prev.w):
                raise sec.error("weights_type=%s: layer %d gives %dx%dx%d but the previous "
                                "layer %dx%dx%d; weighted shortcuts convert between equal "
                                "shapes" % (kind, r if r >= 0 else r + sec.index, src.c, src.h,
                                            src.w, prev.c, prev.h, prev.w), "from")
        inputs = [prev] + srcs
        per = prev.c if kind == "per_channel" else 1
        scaled = []
        for k, out in enumerate(inputs):
            lp = self.layer("%s_w%d" % (name, k), "Scale", [out.blob], ["%s_w%d" % (name, k)])
            lp.scale_param.axis = 1
            lp.scale_param.num_axes = 1
            self.params(lp, self.lr_scale(sec), (1,))
            scaled.append(lp.name)
        sum_ = self.layer(name, "Eltwise", scaled, [name])
        sum_.eltwise_param.operation = EP.SUM

        def assign(a, name=name, n=len(inputs), c=prev.c):
            w = a[0].reshape(n, per).astype(np.float64)
            if norm in ("relu", "avg_relu"):
                w = np.maximum(w, 0) / (1e-4 + np.maximum(w, 0).sum(axis=0))
            elif norm == "softmax":
                e = np.exp(w - w.max(axis=0))
                w = e / (1e-4 + e.sum(axis=0))
            for k in range(n):
                self.blobs["%s_w%d" % (name, k)] = [
                    np.broadcast_to(w[k], (c,)).astype(np.float32)]
        self.loads.append((sec, [("weights", len(inputs) * per)], assign))
        self.activation(sec, name, name)
        return _Out(name, prev.c, prev.h, prev.w, prev.flat)

    def downsample(self, sec, prev, name, s, scale):
        """Darknet's ``[upsample]`` with a negative stride ``-s`` (its reverse upsample,
        ``upsample_cpu`` with forward=0): output ``(h / s, w / s)``, each value ``scale``
        times the sum of an ``s x s`` block of the input (``Pooling`` AVE, ``Power``). It
        indexes the input as ``(h / s * s, w / s * s)`` (rounded down), so a height or width
        that does not divide by ``s`` would mix rows: refused."""
        if prev.h % s or prev.w % s:
            raise sec.error("stride=-%d needs the input's height and width (%dx%d) to divide "
                            "by %d: Darknet's reverse upsample reads the input with the row "
                            "length of the rounded-down size, mixing rows"
                            % (s, prev.h, prev.w, s), "stride")
        lp = self.layer(name, "Pooling", [prev.blob], [name])
        lp.pooling_param.pool = PP.AVE
        lp.pooling_param.kernel_size = lp.pooling_param.stride = s
        pw = self.layer(name + "_scale", "Power", [name], [name])
        pw.power_param.scale = s * s * scale
        return _Out(name, prev.c, prev.h // s, prev.w // s)

    def activation_section(self, sec, prev, i):
        name = "activation%d" % i
        refuse_unapplied(sec)
        if self.activation(sec, name, prev.blob, top=name) == prev.blob:
            return prev
        return _Out(name, prev.c, prev.h, prev.w, prev.flat)

    HANDLERS = {"reorg": reorg, "reorg3d": reorg3d, "scale_channels": scale_channels, "sam": sam,
                "activation": activation_section}
