"""The Darknet sections that move or combine feature maps: ``[reorg]`` (YOLOv2's
passthrough), ``[scale_channels]`` (EfficientNet's squeeze-and-excitation) and ``[sam]``
(spatial attention); a mixin of :class:`~.convert._Converter`, as :mod:`.sections` is.
"""

from ..proto import caffe_pb2
from .sections import _Out

EP = caffe_pb2.EltwiseParameter

# Activations Darknet's [scale_channels] and [sam] do not apply (AlexeyAB's parser prints
# "doesn't support SWISH or MISH activations"; activate_array leaves them out).
UNAPPLIED = ("swish", "mish")


class CombiningSections:
    """``[reorg]``, ``[scale_channels]`` and ``[sam]`` (a mixin of the converter)."""

    def reorg(self, sec, prev, i):
        """Darknet's ``[reorg]``: ``reorg_cpu`` called with the input's sizes and forward=0
        (pjreddie's ``forward_reorg_layer``; AlexeyAB's fork reads ``[reorg]`` as its
        ``reorg_old`` layer, which does the same). That is the element order of the ``Reorg``
        layer (see :func:`pycaffe_lite.layers.vision.reorg_layer.darknet_reorg`)."""
        name = "reorg%d" % i
        prev = self.image_input(sec, prev, name)
        stride = sec.get_int("stride", 1)
        reverse = sec.get_int("reverse", 0)
        for key in ("flatten", "extra"):
            self.refuse(sec, key)
        if stride < 1:
            raise sec.error("stride must be positive, got %d" % stride, "stride")
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

    HANDLERS = {"reorg": reorg}
