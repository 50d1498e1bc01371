"""PyTorch code for SSD's DetectionOutput: the boxes decoded, per class greedy non-maximum
suppression (with the adaptive threshold), ``keep_top_k`` per image, the fork's row order
and placeholder rows. Plain torch: no torchvision."""

from ..proto import caffe_pb2
from .codegen import Module, helper, literal, register_generator

CODE_TYPES = {caffe_pb2.PriorBoxParameter.CORNER: "CORNER",
              caffe_pb2.PriorBoxParameter.CENTER_SIZE: "CENTER_SIZE",
              caffe_pb2.PriorBoxParameter.CORNER_SIZE: "CORNER_SIZE"}

DETECTION_OUTPUT = helper("DetectionOutput", '''
def box_overlaps(a, b):
    """Jaccard overlaps (M, N) of boxes a (M, 4) and b (N, 4), as SSD computes them: 0 unless
    the intersection has positive width and height; an inverted box has area 0."""
    a, b = a[:, None, :], b[None, :, :]
    iw = torch.minimum(a[..., 2], b[..., 2]) - torch.maximum(a[..., 0], b[..., 0])
    ih = torch.minimum(a[..., 3], b[..., 3]) - torch.maximum(a[..., 1], b[..., 1])
    inter = iw * ih

    def area(t):
        w, h = t[..., 2] - t[..., 0], t[..., 3] - t[..., 1]
        return torch.where((w < 0) | (h < 0), torch.zeros_like(w), w * h)

    union = area(a) + area(b) - inter
    ok = (iw > 0) & (ih > 0)
    return torch.where(ok, inter / torch.where(ok, union, torch.ones_like(union)),
                       torch.zeros_like(inter))


class DetectionOutput(nn.Module):
    """SSD's DetectionOutput: rows (1, 1, K, 7) of image, label, score, xmin, ymin, xmax,
    ymax; images in order, classes ascending, scores descending (ties in prior order); one
    row [i, -1, ...] per image when nothing is detected at all."""

    def __init__(self, num_classes, share_location, background_label_id, code_type,
                 variance_encoded_in_target, clip, keep_top_k, confidence_threshold,
                 nms_threshold, eta, top_k):
        super().__init__()
        self.num_classes, self.share_location = num_classes, share_location
        self.background = background_label_id
        self.code_type, self.in_target, self.clip = code_type, variance_encoded_in_target, clip
        self.keep_top_k, self.confidence_threshold = keep_top_k, confidence_threshold
        self.nms_threshold, self.eta, self.top_k = nms_threshold, eta, top_k

    def decode(self, priors, variances, offsets):
        v = torch.ones_like(variances) if self.in_target else variances
        if self.code_type == "CORNER":
            return priors + v * offsets
        pw, ph = priors[:, 2] - priors[:, 0], priors[:, 3] - priors[:, 1]
        if self.code_type == "CORNER_SIZE":
            return priors + v * offsets * torch.stack([pw, ph, pw, ph], -1)
        pcx, pcy = (priors[:, 0] + priors[:, 2]) / 2, (priors[:, 1] + priors[:, 3]) / 2
        cx = v[:, 0] * offsets[..., 0] * pw + pcx
        cy = v[:, 1] * offsets[..., 1] * ph + pcy
        w = torch.exp(v[:, 2] * offsets[..., 2]) * pw
        h = torch.exp(v[:, 3] * offsets[..., 3]) * ph
        return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1)

    def suppress(self, boxes, scores):
        """Indices of the kept boxes, best first."""
        candidates = torch.nonzero(scores > self.confidence_threshold).flatten()
        order = candidates[torch.sort(scores[candidates], descending=True, stable=True)[1]]
        if self.top_k > -1:
            order = order[:self.top_k]
        overlaps = box_overlaps(boxes[order], boxes[order])
        threshold = torch.tensor(self.nms_threshold, dtype=torch.float32)
        kept = []
        for k in range(len(order)):
            if kept and not bool((overlaps[k, kept] <= threshold).all()):
                continue
            kept.append(k)
            if self.eta < 1 and threshold > 0.5:
                threshold = threshold * self.eta
        return order[kept]

    def forward(self, loc, conf, prior):
        # a prior blob of several images' priors (N x 2 x 4P): the first image's, as the layer
        images = prior.shape[0] if prior.dim() >= 3 and prior.shape[0] > 1 else 1
        num, num_priors = loc.shape[0], prior.numel() // images // 8
        priors = prior.reshape(-1)[:num_priors * 4].reshape(num_priors, 4)
        variances = prior.reshape(-1)[num_priors * 4:num_priors * 8].reshape(num_priors, 4)
        loc = loc.reshape(num, num_priors, -1, 4)
        conf = conf.reshape(num, num_priors, self.num_classes)
        rows = []
        for i in range(num):
            boxes = self.decode(priors, variances, loc[i].transpose(0, 1))
            if self.clip:
                boxes = boxes.clamp(0, 1)
            labels, kept = [], []
            for c in range(self.num_classes):
                if c == self.background:
                    continue
                picks = self.suppress(boxes[0 if self.share_location else c], conf[i, :, c])
                labels.append(torch.full_like(picks, c))
                kept.append(picks)
            labels, kept = torch.cat(labels), torch.cat(kept)
            if -1 < self.keep_top_k < len(kept):
                best = torch.sort(conf[i, kept, labels], descending=True, stable=True)[1]
                best = best[:self.keep_top_k]
                best = best[torch.sort(labels[best], stable=True)[1]]
                labels, kept = labels[best], kept[best]
            if len(kept):
                found = boxes[0, kept] if self.share_location else boxes[labels, kept]
                head = torch.stack([torch.full_like(conf[i, kept, labels], i),
                                    labels.to(conf.dtype), conf[i, kept, labels]], 1)
                rows.append(torch.cat([head, found], 1))
        if not rows:
            empty = torch.full((num, 7), -1.0, dtype=loc.dtype, device=loc.device)
            empty[:, 0] = torch.arange(num, dtype=loc.dtype, device=loc.device)
            return empty.reshape(1, 1, -1, 7)
        return torch.cat(rows).reshape(1, 1, -1, 7)
''')


@register_generator("DetectionOutput")
def detection_output(layer):
    lay = layer.layer
    if not lay.normalized:
        raise layer.error("normalized_bbox: false (OpenCV's DetectionOutput on pixel boxes) "
                          "is not written as PyTorch code: only the normalised form is")
    if lay.code_type not in CODE_TYPES:
        raise layer.error("code_type %d has no PyTorch equivalent" % lay.code_type)
    if len(layer.in_shapes) > 3:
        raise layer.error("RefineDet's form (the ARM's bottoms after the priors) is not "
                          "written as PyTorch code")
    args = [("num_classes", lay.num_classes), ("share_location", lay.share_location),
            ("background_label_id", lay.background_label_id),
            ("code_type", CODE_TYPES[lay.code_type]),
            ("variance_encoded_in_target", lay.variance_encoded_in_target),
            ("clip", lay.clip), ("keep_top_k", lay.keep_top_k),
            ("confidence_threshold", float(lay.confidence_threshold)),
            ("nms_threshold", float(lay.nms_threshold)), ("eta", float(lay.eta)),
            ("top_k", lay.top_k)]
    return Module("DetectionOutput(%s)" % ", ".join("%s=%s" % (k, literal(v)) for k, v in args),
                  helpers=[DETECTION_OUTPUT])
