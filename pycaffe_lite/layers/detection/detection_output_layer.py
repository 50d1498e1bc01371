"""DetectionOutput: the SSD fork's decoding and non-maximum suppression (weiliu89/caffe)."""

import numpy as np

from ...layer import Layer
from ...registry import register_layer
from .bbox_util import CENTER_SIZE, CODE_NAMES, CORNER, decode, nms_fast
from .detection_output_files import ResultFiles
from .pixel_boxes import decode as decode_pixels
from .pixel_boxes import image_rows

NO_THRESHOLD = -float(np.finfo(np.float32).max)


def split_priors(prior_data, num_priors):
    """Prior boxes ``(P, 4)`` and variances ``(P, 4)`` from a PriorBox top (boxes first)."""
    flat = np.asarray(prior_data).reshape(-1)
    return flat[:num_priors * 4].reshape(num_priors, 4), \
        flat[num_priors * 4:num_priors * 8].reshape(num_priors, 4)


def count_priors(layer, loc, conf, prior, num_loc_classes, num_classes):
    """The number of priors in ``prior`` (a PriorBox top), after checking that the location
    (``num_loc_classes`` x 4 per prior) and confidence (``num_classes`` per prior) bottoms of
    ``layer`` predict that many; a LayerError naming the numbers otherwise.

    A prior blob of three or more axes may hold several images' priors (``N x 2 x 4P``): as
    the fork (which counts ``height / 4`` priors), the first image's are used."""
    images = prior.shape[0] if prior.num_axes >= 3 and prior.shape[0] > 1 else 1
    per_image = prior.count // images
    if per_image % 8:
        raise layer.error("the prior blob holds %d values%s, not boxes and variances (a "
                          "multiple of 8)" % (per_image, " per image" if images > 1 else ""))
    num_priors = per_image // 8
    n = max(loc.shape[0], 1)
    if loc.count // n != num_priors * num_loc_classes * 4:
        raise layer.error(
            "loc has %d values per image; %d priors x %d location classes x 4 = %d "
            "expected (the number of priors must match the location predictions)"
            % (loc.count // n, num_priors, num_loc_classes, num_priors * num_loc_classes * 4))
    if conf.count // n != num_priors * num_classes:
        raise layer.error(
            "conf has %d values per image; %d priors x %d classes = %d expected (the "
            "number of priors must match the confidence predictions)"
            % (conf.count // n, num_priors, num_classes, num_priors * num_classes))
    return num_priors


@register_layer("DetectionOutput")
class DetectionOutputLayer(Layer):
    """Final detections of an SSD net: decoded boxes after per-class suppression.

    For each image: the location predictions are decoded against the priors (``code_type``;
    the variances scale the offsets unless ``variance_encoded_in_target``); for each class
    but the background, the boxes scoring above ``confidence_threshold`` go through
    non-maximum suppression (``nms_param``: ``nms_threshold``, ``top_k`` candidates,
    adaptive ``eta``); then, when more than ``keep_top_k`` (>= 0) detections remain, only
    the ``keep_top_k`` best of the image are kept.

    Bottoms: loc ``(N, P * L * 4)`` (``L`` = 1 with ``share_location``, else num_classes),
    conf ``(N, P * num_classes)`` (probabilities), priors ``(1, 2, P * 4)`` (PriorBox's
    layout; any leading shape with the boxes then the variances). RefineDet's form
    (sfzhang15/RefineDet, ``detection_output_layer.cpp`` and ``bbox_util.cpp``) adds the
    ARM's confidences ``(N, P * 2)``: a prior whose second (object) score is below
    ``objectness_score`` scores 1 for label 0 and 0 for the others; and fifth, the ARM's
    offsets ``(N, P * 4)``: the priors are first decoded by them (the refined anchors),
    and the locations are decoded against those.
    Tops: ``(1, 1, K, 7)``, one row per detection: image id, label, score, xmin, ymin, xmax,
    ymax (normalised, not clipped), images in order, classes ascending within an image and
    scores descending within a class. With no detection at all the fork's placeholder is
    written: one row per image ``[i, -1, -1, -1, -1, -1, -1]``.
    Params: ``detection_output_param`` (the SSD fork's DetectionOutputParameter, plus
    OpenCV's ``clip``: decoded boxes clipped to [0, 1] before suppression);
    OpenCV's ``normalized_bbox: false`` runs OpenCV's layer on pixel boxes instead (its
    Faster R-CNN nets, the rois as priors): see :mod:`.pixel_boxes`; priors ``(1, 1, P * 4)``
    with ``variance_encoded_in_target``, else boxes then variances; a fourth bottom, needed
    with ``clip``, is the image whose size bounds the boxes; the top is
    ``(1, 1, keep_top_k * N, 7)``;
    ``save_output_param`` writes the fork's VOC, COCO or ILSVRC result files (see
    :mod:`.detection_output_files`); ``visualize`` is not provided.
    """

    host_only = True  # decoding and NMS in NumPy
    min_num_bottom_blobs = 3
    max_num_bottom_blobs = 5
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.detection_output_param
        if not p.HasField("num_classes"):
            raise self.error("detection_output_param needs num_classes")
        self.num_classes = int(p.num_classes)
        self.share_location = bool(p.share_location)
        self.num_loc_classes = 1 if self.share_location else self.num_classes
        self.background_label_id = int(p.background_label_id)
        if p.code_type not in CODE_NAMES:
            raise self.error("unknown code_type %d" % p.code_type)
        self.code_type = p.code_type
        self.variance_encoded_in_target = bool(p.variance_encoded_in_target)
        self.clip = bool(p.clip)
        self.normalized = bool(p.normalized_bbox)
        self.keep_top_k = int(p.keep_top_k)
        self.confidence_threshold = float(p.confidence_threshold) \
            if p.HasField("confidence_threshold") else NO_THRESHOLD
        self.nms_threshold = float(p.nms_param.nms_threshold)
        if self.nms_threshold < 0:
            raise self.error("nms_threshold must be non-negative, got %g" % self.nms_threshold)
        self.eta = float(p.nms_param.eta)
        if not 0 < self.eta <= 1:
            raise self.error("nms_param eta must be in (0, 1], got %g" % self.eta)
        self.top_k = int(p.nms_param.top_k) if p.nms_param.HasField("top_k") else -1
        self.objectness_score = float(np.float32(p.objectness_score))
        if not self.normalized:
            self.setup_pixels(p, bottom)
        elif len(bottom) == 5 and not self.share_location:
            raise self.error("RefineDet's ARM offsets (a fifth bottom) need share_location")
        self.results = ResultFiles(self, p.save_output_param, self.num_classes,
                                   self.background_label_id)
        if p.visualize:
            raise self.error("visualize is not supported; draw the top blob's boxes instead "
                             "(from a binary file of OpenCV's: its normalized_bbox has this "
                             "field's number, 10; take the parameters from its prototxt)")

    def setup_pixels(self, p, bottom):
        """OpenCV's form on pixel boxes: its limits, and its defaults where they differ."""
        if len(bottom) > 4:
            raise self.error("normalized_bbox: false takes 3 or 4 bottoms (loc, conf, priors, "
                             "and the image for clip), not %d" % len(bottom))
        if self.clip and len(bottom) < 4:
            raise self.error("clip with normalized_bbox: false needs the image as a fourth "
                             "bottom (its height and width bound the boxes)")
        if self.code_type not in (CORNER, CENTER_SIZE):
            raise self.error("normalized_bbox: false decodes CORNER or CENTER_SIZE, not %s"
                             % CODE_NAMES[self.code_type])
        if self.keep_top_k < 1:
            raise self.error("normalized_bbox: false needs keep_top_k >= 1 (the top holds "
                             "keep_top_k rows per image), got %d" % self.keep_top_k)
        if not self.nms_threshold > 0:
            raise self.error("normalized_bbox: false needs nms_threshold > 0, got %g"
                             % self.nms_threshold)
        if not p.HasField("confidence_threshold"):
            self.confidence_threshold = 0.0
        if p.save_output_param.output_directory:
            raise self.error("save_output_param writes normalised boxes; it is not provided "
                             "with normalized_bbox: false")

    def reshape(self, bottom, top):
        if not self.normalized:
            self.reshape_pixels(bottom, top)
            return
        self.results.begin()          # as the fork's Reshape: a round's VOC files emptied
        self.num_priors = count_priors(self, *bottom[:3], self.num_loc_classes,
                                       self.num_classes)
        n, P = bottom[0].shape[0], self.num_priors
        for name, blob, per_prior in (("ARM confidence", 3, 2), ("ARM location", 4, 4)):
            if len(bottom) > blob and bottom[blob].count != n * P * per_prior:
                raise self.error("the %s bottom has %d values; %d images x %d priors x %d "
                                 "expected" % (name, bottom[blob].count, n, P, per_prior))
        top[0].reshape(1, 1, 1, 7)

    def reshape_pixels(self, bottom, top):
        loc, conf, prior = bottom[:3]
        n = loc.shape[0]
        if conf.shape[0] != n:
            raise self.error("loc has %d images and conf %d" % (n, conf.shape[0]))
        per_image = self.num_loc_classes * 4
        if loc.count % (max(n, 1) * per_image):
            raise self.error("loc has %d values per image, not a multiple of %d location "
                             "classes x 4" % (loc.count // max(n, 1), self.num_loc_classes))
        P = loc.count // max(n, 1) // per_image
        if conf.count != n * P * self.num_classes:
            raise self.error("conf has %d values per image; %d priors x %d classes = %d "
                             "expected" % (conf.count // max(n, 1), P, self.num_classes,
                                           P * self.num_classes))
        per_prior = 4 if self.variance_encoded_in_target else 8
        if prior.count != P * per_prior:
            raise self.error(
                "the prior blob holds %d values; %d priors x %d expected (%s)"
                % (prior.count, P, per_prior, "boxes only, variance_encoded_in_target"
                   if per_prior == 4 else "boxes then variances"))
        if len(bottom) > 3 and bottom[3].num_axes != 4:
            raise self.error("the image bottom (the fourth) has %d axes, not 4 (N x C x H x W)"
                             % bottom[3].num_axes)
        self.num_priors = P
        top[0].reshape(1, 1, self.keep_top_k * n, 7)

    def detect_pixels(self, loc, conf, prior, image=None):
        """OpenCV's rows ``(keep_top_k * N, 7)`` on pixel boxes, zeros after each image's."""
        num, P, C = loc.shape[0], self.num_priors, self.num_classes
        dtype = np.result_type(loc.dtype, np.float32)     # OpenCV's float, or the net's
        flat = np.asarray(prior, dtype=dtype).reshape(-1)
        priors = flat[:P * 4].reshape(P, 4)
        variances = None if self.variance_encoded_in_target else flat[P * 4:].reshape(P, 4)
        loc = np.asarray(loc, dtype=dtype).reshape(num, P, self.num_loc_classes, 4)
        conf = np.asarray(conf, dtype=dtype).reshape(num, P, C)
        classes = [c for c in range(C) if c != self.background_label_id]
        out = np.zeros((self.keep_top_k * num, 7), dtype=np.float64)
        count = 0
        for i in range(num):
            boxes = decode_pixels(priors, variances, self.code_type == CENTER_SIZE,
                                  loc[i].transpose(1, 0, 2))
            if self.clip:
                h, w = image.shape[2], image.shape[3]
                bounds = np.array([w - 1, h - 1, w - 1, h - 1], dtype=dtype)
                boxes = np.maximum(np.minimum(boxes, bounds), dtype.type(0))
            rows = image_rows(boxes, conf[i], classes, self.confidence_threshold,
                              self.nms_threshold, self.top_k, self.keep_top_k)
            out[count:count + len(rows), 0] = i
            out[count:count + len(rows), 1:] = rows
            count += len(rows)
        return out

    def detect(self, loc, conf, prior, arm_conf=None, arm_loc=None):
        """Rows ``(K, 7)`` for host arrays shaped as the bottoms."""
        num = loc.shape[0]
        P, C = self.num_priors, self.num_classes
        priors, variances = split_priors(prior, P)
        loc = loc.reshape(num, P, self.num_loc_classes, 4)
        conf = conf.reshape(num, P, C)
        if arm_conf is not None:
            background = arm_conf.reshape(num, P, 2)[:, :, 1] < self.objectness_score
            conf = conf.copy()
            conf[background] = 0
            conf[..., 0][background] = 1
        rows = []
        for i in range(num):
            anchors = priors
            if arm_loc is not None:
                anchors = decode(priors, variances, self.code_type,
                                 self.variance_encoded_in_target,
                                 arm_loc[i].reshape(1, P, 4))[0].astype(loc.dtype, copy=False)
            boxes = decode(anchors, variances, self.code_type, self.variance_encoded_in_target,
                           loc[i].transpose(1, 0, 2)).astype(loc.dtype, copy=False)
            if self.clip:
                boxes = np.clip(boxes, 0, 1)
            picks = []                        # (label, kept indices) per class
            for c in range(C):
                if c == self.background_label_id:
                    continue
                cls_boxes = boxes[0 if self.share_location else c]
                kept = nms_fast(cls_boxes, conf[i, :, c], self.confidence_threshold,
                                self.nms_threshold, self.eta, self.top_k)
                picks.append((c, kept))
            total = sum(len(k) for _, k in picks)
            if -1 < self.keep_top_k < total:
                labels = np.concatenate([np.full(len(k), c) for c, k in picks])
                idx = np.concatenate([k for _, k in picks])
                scores = conf[i, idx, labels]
                best = np.argsort(-scores, kind="stable")[:self.keep_top_k]
                # back to the fork's order: classes ascending, scores descending within one
                best = best[np.lexsort((np.arange(best.size), labels[best]))]
                picks = [(c, idx[best][labels[best] == c]) for c in np.unique(labels[best])]
            for c, kept in picks:
                if not len(kept):
                    continue
                cls_boxes = boxes[0 if self.share_location else c]
                block = np.empty((len(kept), 7), dtype=np.float64)
                block[:, 0] = i
                block[:, 1] = c
                block[:, 2] = conf[i, kept, c]
                block[:, 3:] = cls_boxes[kept]
                rows.append(block)
        if not rows:
            empty = np.full((num, 7), -1.0)
            empty[:, 0] = np.arange(num)
            return empty
        return np.concatenate(rows)

    def forward(self, bottom, top):
        if not self.normalized:
            top[0].data[...] = self.detect_pixels(*(b.cpu_data() for b in bottom)).reshape(
                top[0].shape)
            return
        rows = self.detect(*(b.cpu_data() for b in bottom))
        if self.results.enabled:
            for i in range(bottom[0].shape[0]):
                self.results.add_image(rows[(rows[:, 0] == i) & (rows[:, 1] >= 0)])
        top[0].reshape(1, 1, rows.shape[0], 7)
        top[0].data[...] = rows.reshape(1, 1, -1, 7)
