"""SigmoidCrossEntropyLoss: the cross-entropy of sigmoid(x) against targets in [0, 1]."""

from ...backend import get_array_module
from ...layer import LossLayer
from ...proto import caffe_pb2
from ...registry import register_layer
from .loss_utils import get_normalizer

LossParameter = caffe_pb2.LossParameter


def sigmoid_ce_normalization(loss_param):
    """The normalisation mode of SigmoidCrossEntropyLoss.

    Unlike SoftmaxWithLoss, the default (neither ``normalization`` nor ``normalize`` set) is
    BATCH_SIZE, Caffe's historical division by the batch size. An explicit ``normalization``
    wins; otherwise ``normalize: true`` means VALID and ``normalize: false`` BATCH_SIZE.
    """
    if loss_param.HasField("normalization"):
        return loss_param.normalization
    if loss_param.HasField("normalize"):
        return LossParameter.VALID if loss_param.normalize else LossParameter.BATCH_SIZE
    return LossParameter.BATCH_SIZE


@register_layer("SigmoidCrossEntropyLoss")
class SigmoidCrossEntropyLossLayer(LossLayer):
    """Binary cross-entropy of sigmoid(x) against target probabilities, computed stably.

    Bottoms: x, the scores (N, ...); t, the targets, with as many values as x (any shape whose
    first axis is N), usually 0/1 but any value in [0, 1] works. Only x receives gradients.
    Tops: loss (scalar).
    Params: ``loss_param { ignore_label (none) normalization (BATCH_SIZE when unset here)
    normalize (legacy: true = VALID, false = BATCH_SIZE; used only when normalization is not
    set) }``.

    Per element: l = -(x * (t - [x >= 0]) - log(1 + exp(-|x|))), which equals
    -(t log s + (1 - t) log(1 - s)) with s = sigmoid(x) and never overflows. Elements whose
    target, truncated to an integer, equals ``ignore_label`` are left out. loss = sum(l) /
    normalizer with FULL: count, VALID: number of elements not ignored, BATCH_SIZE: N, NONE: 1,
    floored at 1. dx = (s - t) * top_diff / normalizer, 0 where ignored.
    """

    def setup(self, bottom, top):
        loss_param = self.layer_param.loss_param
        self.ignore_label = loss_param.ignore_label if loss_param.HasField("ignore_label") \
            else None
        self.normalization = sigmoid_ce_normalization(loss_param)
        get_normalizer(self.normalization, 1, 1, layer=self)  # validate the mode now
        self.sigmoid = None

    def reshape(self, bottom, top):
        x, t = bottom
        if x.num_axes < 1:
            raise self.error(f"the scores need at least one axis (the batch), got shape "
                             f"{x.shape}")
        super().reshape(bottom, top)
        if x.count != t.count:
            raise self.error(f"inputs must have the same count: the scores (shape {x.shape}) "
                             f"have {x.count} values, the targets (shape {t.shape}) {t.count}")
        self.outer_num = x.shape[0]
        self.inner_num = x.count_range(1)

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        xp = get_array_module(x)
        t = bottom[1].read_data().reshape(x.shape)
        s = x * 0.5
        xp.tanh(s, out=s)
        s *= 0.5
        s += 0.5
        self.sigmoid = s
        per_item = x * (t - (x >= 0)) - xp.log1p(xp.exp(-xp.abs(x)))
        if self.ignore_label is None:
            self.valid = None
            total = -per_item.sum()
        else:
            self.valid = xp.trunc(t) != self.ignore_label
            total = -xp.where(self.valid, per_item, 0).sum()
        if self.valid is not None and self.normalization == LossParameter.VALID:
            # the count stays in the mode's array (on the GPU no host read: a CUDA graph
            # can hold the forward), floored at 1 as get_normalizer does
            self.normalizer = xp.maximum(self.valid.sum(), 1).astype(x.dtype)
        else:
            self.normalizer = get_normalizer(self.normalization, self.outer_num,
                                             self.inner_num, layer=self)
        top[0].write_data()[...] = total / self.normalizer

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error("cannot backpropagate to the targets (bottom 1); set "
                             "propagate_down: false for it")
        if not propagate_down[0]:
            return
        s = self.sigmoid
        if s is None or s.shape != bottom[0].shape:
            raise self.error(f"backward needs a forward pass on scores of shape "
                             f"{bottom[0].shape} first")
        t = bottom[1].read_data().reshape(s.shape)
        dx = bottom[0].write_diff()
        dx[...] = s - t
        if self.valid is not None:
            dx *= self.valid
        dx *= top[0].read_diff() / self.normalizer
