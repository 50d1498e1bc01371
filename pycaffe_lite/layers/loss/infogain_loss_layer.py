"""InfogainLoss: softmax followed by a cross-entropy weighted by an infogain matrix H."""

from ...backend import get_array_module
from ...blob import Blob, proto_shape
from ...errors import ProtoError, ShapeError
from ...layer import LossLayer
from ...proto import caffe_pb2
from ...proto.protoio import read_binary
from ...registry import register_layer
from ..common.softmax_layer import softmax_forward
from .loss_utils import check_labels, get_normalizer

# Caffe's kLOG_THRESHOLD: probabilities are clamped at this value before log().
LOG_THRESHOLD = 1e-20


@register_layer("InfogainLoss")
class InfogainLossLayer(LossLayer):
    """Infogain loss on the softmax of the scores (final BVLC form: the softmax is internal).

    Bottoms: scores (N, ..., C, ...) with the classes along ``infogain_loss_param.axis``;
    labels, one per prediction (count = outer * inner, e.g. N*H*W for axis 1 of (N, C, H, W)),
    integers in [0, C) or the ignore label; optionally H, the C x C infogain matrix (any shape
    holding C*C values), instead of ``infogain_loss_param.source``. Only the scores receive
    gradients.
    Tops: loss (scalar); optionally the softmax probabilities (shape of the scores).
    Params: ``infogain_loss_param { source (a binary BlobProto file holding H, read at setup,
    needed without a third bottom) axis (1) }``; ``loss_param { ignore_label (none)
    normalization (VALID) }`` (the deprecated ``normalize`` is refused, as in Caffe).

    p = softmax(scores) along the axis; loss = -sum over non-ignored positions of
    sum_l H[label, l] * log(max(p_l, 1e-20)), divided by the normalizer (FULL: outer*inner,
    VALID: non-ignored labels, BATCH_SIZE: outer, NONE: 1; floored at 1).
    d(scores_l) = (p_l * sum_k H[label, k] - H[label, l]) * top_diff / normalizer, 0 at ignored
    positions. With H the identity this is SoftmaxWithLoss.
    """

    exact_num_bottom_blobs = -1
    min_num_bottom_blobs = 2
    max_num_bottom_blobs = 3
    exact_num_top_blobs = -1
    min_num_top_blobs = 1
    max_num_top_blobs = 2

    def allow_force_backward(self, bottom_index):
        # Caffe's LossLayer also answers true for H (bottom 2) and then fails in backward;
        # only the scores can take a gradient.
        return bottom_index == 0

    def setup(self, bottom, top):
        loss_param = self.layer_param.loss_param
        if loss_param.HasField("normalize"):
            raise self.error("loss_param.normalize is deprecated for InfogainLoss; use "
                             "loss_param.normalization (FULL, VALID, BATCH_SIZE or NONE)")
        self.normalization = loss_param.normalization
        get_normalizer(self.normalization, 1, 1, layer=self)  # validate the mode now
        self.ignore_label = loss_param.ignore_label if loss_param.HasField("ignore_label") \
            else None
        self.infogain = None
        if len(bottom) < 3:
            param = self.layer_param.infogain_loss_param
            if not param.source:
                raise self.error("infogain matrix source must be specified: set "
                                 "infogain_loss_param.source to a binaryproto file holding H, "
                                 "or give H as a third bottom")
            try:
                proto = read_binary(param.source, caffe_pb2.BlobProto())
                self.infogain = Blob(proto_shape(proto), self.dtype).from_proto(proto)
            except (ProtoError, ShapeError) as exc:
                raise self.error(f"cannot read the infogain matrix from "
                                 f"infogain_loss_param.source '{param.source}': {exc}") from None
        self.prob = None

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        scores, labels = bottom[0], bottom[1]
        axis = self.layer_param.infogain_loss_param.axis
        try:
            axis = scores.canonical_axis_index(axis)
        except ShapeError:
            n = scores.num_axes
            raise self.error(f"infogain_loss_param.axis {axis} is out of range for scores of "
                             f"shape {scores.shape}; expected an axis in [{-n}, {n})") from None
        self.outer_num = scores.count_range(0, axis)
        self.inner_num = scores.count_range(axis + 1)
        self.channels = scores.shape[axis]
        if self.channels < 1:
            raise self.error(f"axis {axis} of the scores (shape {scores.shape}) is empty; "
                             "expected at least one class")
        if labels.count != self.outer_num * self.inner_num:
            raise self.error(
                f"number of labels must match number of predictions: scores of shape "
                f"{scores.shape} with infogain axis {axis} need "
                f"{self.outer_num * self.inner_num} labels (outer {self.outer_num} x inner "
                f"{self.inner_num}), got {labels.count} (labels shape {labels.shape})")
        h = self._infogain_blob(bottom)
        if h.count != self.channels * self.channels:
            raise self.error(f"the infogain matrix H must be {self.channels}x{self.channels} "
                             f"for {self.channels} classes, got {h.count} values (shape "
                             f"{h.shape})")
        self.view_shape = (self.outer_num, self.channels, self.inner_num)
        if len(top) >= 2:
            top[1].reshape(scores.shape)

    def _infogain_blob(self, bottom):
        return bottom[2] if len(bottom) >= 3 else self.infogain

    def _infogain(self, bottom):
        return self._infogain_blob(bottom).read_data().reshape(self.channels, self.channels)

    def forward(self, bottom, top):
        scores = bottom[0].read_data().reshape(self.view_shape)
        xp = get_array_module(scores)
        prob = self.prob
        if prob is None or prob.shape != self.view_shape or get_array_module(prob) is not xp:
            prob = self.prob = xp.empty(self.view_shape, dtype=scores.dtype)
        softmax_forward(scores, prob)
        labels = bottom[1].read_data().reshape(self.outer_num, self.inner_num)
        index, valid = check_labels(self, labels, self.channels, self.ignore_label)
        self.index, self.valid = index, valid
        self.valid_count = int(valid.sum())
        h = self._infogain(bottom)
        # H's row of each position's label, laid out as (outer, C, inner).
        weights = xp.moveaxis(h[index], 2, 1)
        log_p = xp.log(xp.maximum(prob, LOG_THRESHOLD))
        total = -(weights * log_p * valid[:, None, :]).sum()
        normalizer = get_normalizer(self.normalization, self.outer_num, self.inner_num,
                                    self.valid_count, layer=self)
        top[0].write_data()[...] = total / normalizer
        if len(top) >= 2:
            top[1].write_data()[...] = prob.reshape(bottom[0].shape)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error("cannot backpropagate to the labels (bottom 1); set "
                             "propagate_down: false for it")
        if len(propagate_down) > 2 and propagate_down[2]:
            raise self.error("cannot backpropagate to the infogain matrix (bottom 2); set "
                             "propagate_down: false for it")
        if not propagate_down[0]:
            return
        prob = self.prob
        if prob is None or prob.shape != self.view_shape:
            raise self.error(f"backward needs a forward pass on scores of shape "
                             f"{bottom[0].shape} first")
        xp = get_array_module(prob)
        h = self._infogain(bottom)
        index, valid = self.index, self.valid
        row_sums = h.sum(axis=1)[index]  # (outer, inner)
        weights = xp.moveaxis(h[index], 2, 1)  # (outer, C, inner)
        dx = bottom[0].write_diff().reshape(self.view_shape)
        dx[...] = prob * row_sums[:, None, :] - weights
        dx *= valid[:, None, :]
        normalizer = get_normalizer(self.normalization, self.outer_num, self.inner_num,
                                    self.valid_count, layer=self)
        dx *= top[0].read_diff() / normalizer
