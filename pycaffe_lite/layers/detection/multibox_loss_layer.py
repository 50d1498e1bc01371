"""MultiBoxLoss: the SSD fork's training loss (weiliu89/caffe)."""

import numpy as np

from ...layer import Layer
from ...registry import register_layer
from ..loss.loss_utils import get_normalizer, normalization_mode
from .bbox_util import CODE_NAMES
from .detection_output_layer import count_priors, split_priors
from .multibox_util import (MBL, FLT_MIN, encode_locations, find_matches, gathered,
                            loc_loss_grad, loc_loss_values, mine, positives, read_ground_truth)


@register_layer("MultiBoxLoss")
class MultiBoxLossLayer(Layer):
    """SSD's loss: localisation of the matched priors plus confidence of the matched and
    mined priors, divided by the normaliser.

    Matching (``match_type`` BIPARTITE or PER_PREDICTION with ``overlap_threshold``) pairs
    priors (``use_prior_for_matching``) or decoded predictions with ground-truth boxes.
    Negatives: all priors (``mining_type`` NONE), the unmatched priors of highest background
    loss with overlap below ``neg_overlap``, ``neg_pos_ratio`` per positive (MAX_NEGATIVE),
    or the ``sample_size`` priors of highest loss, matched ones included (HARD_EXAMPLE);
    optionally after non-maximum suppression (``nms_param``). The localisation loss
    (``loc_loss_type`` SMOOTH_L1 or L2, ``0.5 d^2``) compares the predictions with the
    encoded ground truth (``code_type``); the confidence loss is the softmax or logistic
    cross-entropy. Loss = (``loc_weight`` * loc + conf) / normaliser (``loss_param``
    normalization: VALID divides by the number of matches, the default).

    Bottoms: loc ``(N, P * L * 4)``, conf ``(N, P * num_classes)`` (scores before softmax),
    priors (PriorBox layout), labels ``(1, 1, G, 8)`` rows ``[image, label, instance, xmin,
    ymin, xmax, ymax, difficult]``. Tops: the loss (scalar).
    Params: ``multibox_loss_param`` (the SSD fork's MultiBoxLossParameter), ``loss_param``.
    Backward: to loc and conf only (set ``propagate_down: true true false false``, as the
    fork's nets do). Two deliberate differences from the fork, both exact gradients: with
    ``encode_variance_in_target`` the location gradient includes the 1 / variance factor of
    the forward, and the logistic targets of each image are laid out per image (the fork
    offsets the second and later images' targets wrongly without mining); logistic targets
    are 0/1 (the fork fills them with the background label's value, 0 by default).
    """

    host_only = True  # matching and mining in NumPy
    exact_num_bottom_blobs = 4
    exact_num_top_blobs = 1
    is_loss = True
    auto_top_blobs = True  # a LossLayer in SSD's Caffe: a top is made where none is named

    def setup(self, bottom, top):
        p = self.layer_param.multibox_loss_param
        if not p.HasField("num_classes"):
            raise self.error("multibox_loss_param needs num_classes")
        self.p = p
        self.num_classes = int(p.num_classes)
        if self.num_classes < 1:
            raise self.error("num_classes must be at least 1, got %d" % self.num_classes)
        if p.background_label_id >= self.num_classes:
            raise self.error("background_label_id %d is not a class of %d"
                             % (p.background_label_id, self.num_classes))
        if p.HasField("do_neg_mining") and p.do_neg_mining != (p.mining_type != MBL.NONE):
            raise self.error("do_neg_mining (deprecated) disagrees with mining_type")
        self.mining = p.mining_type != MBL.NONE
        if self.mining and not p.share_location:
            raise self.error("negative mining needs share_location: true")
        if p.code_type not in CODE_NAMES:
            raise self.error("unknown code_type %d" % p.code_type)
        if p.map_object_to_agnostic:
            raise self.error("map_object_to_agnostic is not supported")
        self.loc_classes = 1 if p.share_location else self.num_classes
        self.normalization = normalization_mode(self.layer_param.loss_param)
        pd = list(self.layer_param.propagate_down) or [True, True, False, False]
        self.use_loc, self.use_conf = bool(pd[0]), bool(pd[1])
        self.grads = None

    def reshape(self, bottom, top):
        self.num_priors = count_priors(self, bottom[0], bottom[1], bottom[2], self.loc_classes,
                                       self.num_classes)
        if bottom[3].count % 8:
            raise self.error("the label blob holds %d values, not rows of 8"
                             % bottom[3].count)
        top[0].reshape()

    def forward(self, bottom, top):
        p = self.p
        num, P, C = bottom[0].shape[0], self.num_priors, self.num_classes
        loc = bottom[0].cpu_data().reshape(num, P, self.loc_classes, 4)
        conf = bottom[1].cpu_data().reshape(num, P, C)
        priors, variances = split_priors(bottom[2].cpu_data(), P)
        gts = read_ground_truth(self, bottom[3].cpu_data(), C, p.background_label_id,
                                p.use_difficult_gt)
        all_indices, all_overlaps = find_matches(p, loc, priors, variances, gts, C)
        negs = mine(p, conf, loc, priors, variances, gts, all_indices, all_overlaps, C)
        pos = positives(all_indices)
        num_matches = pos.shape[0]
        normalizer = get_normalizer(self.normalization, num, P, num_matches, layer=self)

        dloc = np.zeros_like(loc)
        loc_loss = 0.0
        if num_matches:
            pred, target, scale = encode_locations(p, loc, priors, variances, gts, pos)
            d = pred - target
            loc_loss = float(loc_loss_values(d, p.loc_loss_type).sum())
            slot = np.where(pos[:, 1] < 0, 0, pos[:, 1])
            np.add.at(dloc, (pos[:, 0], pos[:, 2], slot),
                      p.loc_weight * loc_loss_grad(d, p.loc_loss_type) * scale)

        dconf = np.zeros_like(conf)
        conf_loss = 0.0
        rows_img, rows_prior, rows_label = self._conf_rows(pos, negs, gts, num, P)
        if rows_img.size:
            x = conf[rows_img, rows_prior]
            conf_loss, grad = self._conf_loss(x, rows_label)
            np.add.at(dconf, (rows_img, rows_prior), grad)

        total = 0.0
        if self.use_loc:
            total += p.loc_weight * loc_loss / normalizer
        if self.use_conf:
            total += conf_loss / normalizer
        top[0].data[...] = total
        self.grads = (dloc / normalizer, dconf / normalizer)
        self.num_matches, self.num_negatives = num_matches, sum(len(n) for n in negs)

    def _conf_rows(self, pos, negs, gts, num, P):
        """Image, prior and target label of every prior in the confidence loss."""
        bg = self.p.background_label_id
        if self.mining:
            neg_img = np.concatenate([np.full(len(n), i) for i, n in enumerate(negs)] +
                                     [np.zeros(0, dtype=np.int64)]).astype(np.int64)
            neg_prior = np.concatenate(list(negs) + [np.zeros(0, dtype=np.int64)])
            labels = gathered(gts, pos[:, 0], pos[:, 3], "labels") if pos.size else \
                np.zeros(0, dtype=np.int64)
            return (np.concatenate([pos[:, 0], neg_img]), np.concatenate([pos[:, 2], neg_prior]),
                    np.concatenate([labels, np.full(neg_img.size, bg)]).astype(np.int64))
        label = np.full((num, P), bg, dtype=np.int64)
        if pos.size:
            # where a prior matches in several location classes the last one written wins
            label[pos[:, 0], pos[:, 2]] = gathered(gts, pos[:, 0], pos[:, 3], "labels")
        img, prior = np.divmod(np.arange(num * P), P)
        return img, prior, label.reshape(-1)

    def _conf_loss(self, x, labels):
        if self.p.conf_loss_type == MBL.SOFTMAX:
            z = x - x.max(axis=1, keepdims=True)
            e = np.exp(z)
            prob = e / e.sum(axis=1, keepdims=True)
            picked = prob[np.arange(len(labels)), labels]
            loss = float(-np.log(np.maximum(picked, FLT_MIN)).sum())
            grad = prob.copy()
            grad[np.arange(len(labels)), labels] -= 1
            return loss, grad
        target = np.zeros_like(x)
        target[np.arange(len(labels)), labels] = 1
        pos = x >= 0
        loss = float(-(x * (target - pos) - np.log1p(np.exp(x - 2 * x * pos))).sum())
        return loss, 1 / (1 + np.exp(-x)) - target

    def backward(self, top, propagate_down, bottom):
        if len(propagate_down) > 2 and (propagate_down[2] or propagate_down[3]):
            raise self.error("cannot backpropagate to the priors or the labels; give the "
                             "layer propagate_down: true true false false")
        if self.grads is None:
            raise self.error("backward needs a forward pass first")
        weight = float(top[0].cpu_diff().reshape(-1)[0])
        dloc, dconf = self.grads
        if propagate_down[0]:
            bottom[0].diff[...] = (dloc * weight).reshape(bottom[0].shape)
        if propagate_down[1]:
            bottom[1].diff[...] = (dconf * weight).reshape(bottom[1].shape)
