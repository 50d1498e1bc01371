"""Evaluation reports of a trained net over its TEST data.

:func:`evaluate` runs the TEST net for some batches and, by what the net computes:

- **detection** (the net has DetectionEvaluate layers, as the SSD fork's test nets do): the
  average precision of each class and their mean, per DetectionEvaluate output, computed as
  the fork's solver does (``ap_version``);
- **classification** (scores ``N x C`` against labels ``N``): top-1 and top-5 accuracy (a
  sample counts for top-k when fewer than k classes score above its label, Caffe's Accuracy
  rule), the accuracy of each class and the confusion matrix (rows: true class, columns: the
  predicted, highest-scoring class);
- **segmentation** (scores ``N x C x H x W`` against a label map ``N x 1 x H x W``): pixel
  accuracy, the intersection over union of each class and their mean over the classes present
  (in the labels or the predictions), and the confusion matrix of the pixels.

The scores and labels are the two bottoms of the net's first Accuracy layer, else of its first
SoftmaxWithLoss layer, unless named (``scores_blob=``, ``label_blob=``), under the names the net
file gives them (the blob a Split copies, not the copy); labels equal to the layer's
``ignore_label`` are left out.

By default the TEST source is covered once: as many batches as its records need (counted by the
first data layer that can tell), the surplus of the last batch, which wraps to the first
records, left out. ``iterations`` sets the number of batches; where that wraps the source, a
warning says how often each record is counted. Where no data layer can tell its source's size,
:data:`DEFAULT_ITERATIONS` batches run, with a warning.
"""

import logging

import numpy as np

from .errors import CaffeError, install_hint
from .layers.detection.average_precision import AP_VERSIONS, DetectionAccumulator
from .net import Net
from .proto import caffe_pb2

SCORE_LAYERS = ("Accuracy", "SoftmaxWithLoss")
#: batches run where no data layer of the net can tell its source's size
DEFAULT_ITERATIONS = 50

log = logging.getLogger("pycaffe_lite")


def read_labels(path):
    """Class names, one per line (``synset_words.txt`` style lines are kept whole)."""
    try:
        with open(path, encoding="utf-8") as f:
            names = [line.strip() for line in f]
    except OSError as exc:
        raise CaffeError("cannot read the labels file %s: %s" % (path, exc.strerror or exc)) \
            from None
    except UnicodeDecodeError as exc:
        raise CaffeError("cannot read the labels file %s: byte %d is not UTF-8 text (class "
                         "names, one per line, saved as UTF-8)" % (path, exc.start)) from None
    while names and not names[-1]:
        names.pop()
    return names


def _find_pair(net, scores, label):
    """(scores blob name, label blob name, ignore_label or None)."""
    ignore = None
    if scores is None or label is None:
        for lp in (layer.layer_param for layer in net.layers):
            if lp.type in SCORE_LAYERS and len(lp.bottom) >= 2:
                scores = scores or lp.bottom[0]
                label = label or lp.bottom[1]
                if lp.loss_param.HasField("ignore_label"):
                    ignore = lp.loss_param.ignore_label
                if lp.accuracy_param.HasField("ignore_label"):
                    ignore = lp.accuracy_param.ignore_label
                break
        else:
            raise CaffeError("net '%s' has no Accuracy, SoftmaxWithLoss or DetectionEvaluate "
                             "layer to say which blobs are the scores and the labels; name "
                             "them (--scores BLOB --label BLOB)" % net.name)
    for name in (scores, label):
        if name not in net.blobs:
            raise CaffeError("net '%s' has no blob '%s' (blobs: %s)"
                             % (net.name, name, ", ".join(net.blobs)))
    return _copied_blob(net, scores), _copied_blob(net, label), ignore


def _copied_blob(net, name):
    """The blob a Split layer copies into ``name`` (the name the net file gives), else
    ``name``; both hold the same values."""
    for layer in net.layers:
        lp = layer.layer_param
        if lp.type == "Split" and name in lp.top:
            return lp.bottom[0]
    return name


def source_pass(net):
    """``(records, batch size, data layer)`` of the net's first data layer that can tell how
    many records its source holds; None where none can."""
    for layer in net.layers:
        count = getattr(layer, "source_records", None)
        records = count() if count is not None else None
        if records:
            lp = layer.layer_param
            return int(records), int(net.blobs[lp.top[0]].shape[0]), lp.name
    return None


def _plan_batches(net, iterations):
    """(batches, samples of the last batch to count or None for all, records or None)."""
    found = source_pass(net)
    if found is None:
        if iterations is None:
            log.warning("evaluate: no data layer of net '%s' tells how many records its source "
                        "holds; running %d batches (set iterations, --iterations)",
                        net.name, DEFAULT_ITERATIONS)
            return DEFAULT_ITERATIONS, None, None
        return iterations, None, None
    records, batch, layer = found
    if iterations is None:
        iterations = -(-records // batch)
        last = records - (iterations - 1) * batch
        return iterations, (last if last < batch else None), records
    if iterations * batch > records:
        log.warning("evaluate: %d iterations of batch %d (%d samples) wrap the %d records of "
                    "layer '%s''s source: each record is counted about %.3g times; leave "
                    "iterations (--iterations) out to cover the source once",
                    iterations, batch, iterations * batch, records, layer,
                    iterations * batch / float(records))
    return iterations, None, records


def confusion(true, predicted, num_classes):
    """``num_classes x num_classes`` counts; rows are the true classes."""
    return np.bincount(true * num_classes + predicted,
                       minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def _check_labels(labels, num_classes, where):
    bad = (labels < 0) | (labels >= num_classes)
    if bad.any():
        raise CaffeError("%s: label %d is outside the %d classes of the scores"
                         % (where, int(labels[bad][0]), num_classes))


class _Classes:
    """Accumulates scores and labels batch by batch."""

    def __init__(self, scores_name, label_name, ignore):
        self.scores_name, self.label_name, self.ignore = scores_name, label_name, ignore
        self.matrix = None
        self.topk = np.zeros(2, np.int64)  # top-1, top-5 hits
        self.count = 0
        self.segmentation = False

    def add(self, scores, labels):
        if scores.ndim > 2 and np.prod(scores.shape[2:]) > 1:
            self.segmentation = True
            c = scores.shape[1]
            scores = np.moveaxis(scores.reshape(scores.shape[0], c, -1), 1, 2).reshape(-1, c)
        else:
            scores = scores.reshape(scores.shape[0], -1)
        labels = np.rint(labels).astype(np.int64).ravel()
        if labels.size != scores.shape[0]:
            raise CaffeError("scores '%s' (%d rows) and labels '%s' (%d values) do not match"
                             % (self.scores_name, scores.shape[0], self.label_name,
                                labels.size))
        if self.ignore is not None:
            keep = labels != self.ignore
            scores, labels = scores[keep], labels[keep]
        c = scores.shape[1]
        _check_labels(labels, c, "blob '%s'" % self.label_name)
        if self.matrix is None:
            self.matrix = np.zeros((c, c), np.int64)
        own = scores[np.arange(labels.size), labels]
        above = (scores > own[:, None]).sum(axis=1)
        self.topk += [(above < 1).sum(), (above < 5).sum()]
        self.matrix += confusion(labels, scores.argmax(axis=1), c)
        self.count += labels.size

    def report(self, names):
        m = self.matrix if self.matrix is not None else np.zeros((0, 0), np.int64)
        names = _class_names(names, m.shape[0])
        per_class = {}
        for k, name in enumerate(names):
            total = m[k].sum()
            per_class[name] = float(m[k, k] / total) if total else None
        out = {"kind": "segmentation" if self.segmentation else "classification",
               "scores": self.scores_name, "label": self.label_name, "classes": names,
               "confusion_matrix": m.tolist(), "per_class_accuracy": per_class}
        n = max(self.count, 1)
        if self.segmentation:
            tp = np.diag(m).astype(np.float64)
            union = m.sum(axis=0) + m.sum(axis=1) - tp
            iou = {name: (float(tp[k] / union[k]) if union[k] else None)
                   for k, name in enumerate(names)}
            present = [v for v in iou.values() if v is not None]
            out.update(pixels=int(self.count), pixel_accuracy=float(tp.sum() / n),
                       iou_per_class=iou, mean_iou=float(np.mean(present)) if present else 0.0)
        else:
            out.update(samples=int(self.count), top1=float(self.topk[0] / n),
                       top5=float(self.topk[1] / n))
        return out


def _class_names(names, count):
    names = list(names or [])
    if names and len(names) != count:
        raise CaffeError("the labels file names %d classes but the scores have %d"
                         % (len(names), count))
    return names or [str(k) for k in range(count)]


def evaluate(model, weights=None, iterations=None, labels=None, scores_blob=None,
             label_blob=None, ap_version="Integral", allow_python_layers=None, int8=None):
    """Run the TEST net of ``model`` (with ``weights``) over its TEST source once, or for
    ``iterations`` batches, and return the report as a dict (see the module's notes);
    ``labels``: class names or a labels file; ``int8=False``: Intel Caffe's int8
    convolutions compute in float."""
    if iterations is not None and iterations < 1:
        raise CaffeError("iterations must be >= 1 (got %d)" % iterations)
    if ap_version not in AP_VERSIONS:
        raise CaffeError("ap_version must be one of %s, got %r"
                         % (", ".join(AP_VERSIONS), ap_version))
    names = read_labels(labels) if isinstance(labels, str) else labels
    net = Net(model, caffe_pb2.TEST, allow_python_layers=allow_python_layers, int8=int8)
    try:
        if weights:
            for w in str(weights).split(","):
                net.copy_from(w)
        iterations, last, records = _plan_batches(net, iterations)
        evaluators = [lp.top[0] for lp in (layer.layer_param for layer in net.layers)
                      if lp.type == "DetectionEvaluate"]
        if evaluators and scores_blob is None:
            if last is not None:
                log.warning("evaluate: the last batch wraps the TEST source: its first records "
                            "count twice in the detection figures")
            accumulators = {name: DetectionAccumulator() for name in evaluators}
            for _ in range(iterations):
                net.forward_from_to()
                for name, acc in accumulators.items():
                    acc.add(np.asarray(net.blobs[name].data).reshape(-1, 5))
            return dict(_detection_report(accumulators, names, ap_version, iterations),
                        source_records=records)
        pair = _find_pair(net, scores_blob, label_blob)
        acc = _Classes(*pair)
        for i in range(iterations):
            net.forward_from_to()
            keep = last if i == iterations - 1 and last is not None else None
            acc.add(np.asarray(net.blobs[pair[0]].data, np.float64)[:keep],
                    np.asarray(net.blobs[pair[1]].data)[:keep])
        return dict(acc.report(names), iterations=iterations, source_records=records)
    finally:
        net.close()


def _detection_report(accumulators, names, ap_version, iterations):
    def label_name(k):
        return names[k] if names and 0 <= k < len(names) else str(k)

    outputs = {}
    for name, acc in accumulators.items():
        aps = acc.average_precisions(ap_version)
        outputs[name] = {"map": float(acc.mean_average_precision(ap_version)),
                         "ap_per_class": {label_name(int(k)): float(v)
                                          for k, v in sorted(aps.items())}}
    return {"kind": "detection", "ap_version": ap_version, "iterations": iterations,
            "outputs": outputs}


def format_report(report):
    """The report as text: the headline figures, per-class figures, the confusion matrix."""
    lines = []
    if report["kind"] == "detection":
        for name, out in report["outputs"].items():
            lines.append("%s: mAP = %.4f (%s)" % (name, out["map"], report["ap_version"]))
            for cls, ap in out["ap_per_class"].items():
                lines.append("  class %s: AP = %.4f" % (cls, ap))
        return "\n".join(lines)
    if report["kind"] == "segmentation":
        lines.append("pixels: %d  pixel accuracy = %.4f  mean IoU = %.4f"
                     % (report["pixels"], report["pixel_accuracy"], report["mean_iou"]))
        per = [("IoU", report["iou_per_class"]), ("accuracy", report["per_class_accuracy"])]
    else:
        lines.append("samples: %d  top-1 = %.4f  top-5 = %.4f"
                     % (report["samples"], report["top1"], report["top5"]))
        per = [("accuracy", report["per_class_accuracy"])]
    for what, values in per:
        lines.append("per-class %s:" % what)
        for cls, v in values.items():
            lines.append("  %s: %s" % (cls, "-" if v is None else "%.4f" % v))
    lines.append("confusion matrix (rows: true class, columns: predicted):")
    m = report["confusion_matrix"]
    width = max([len(str(v)) for row in m for v in row] + [len(str(len(m) - 1))])
    lines.append(" " * (width + 2) + " ".join("%*d" % (width, k) for k in range(len(m))))
    for k, row in enumerate(m):
        lines.append("%*d: " % (width, k) + " ".join("%*d" % (width, v) for v in row))
    return "\n".join(lines)


def need_matplotlib(what="the confusion matrix PNG"):
    """matplotlib's pyplot on the Agg backend; a CaffeError naming ``what`` without it."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CaffeError("%s needs matplotlib, which is not installed: %s"
                         % (what, install_hint("plot", "matplotlib"))) from None
    return plt


def plot_confusion(report, png_path):
    """A PNG of the confusion matrix (needs matplotlib: the ``plot`` extra)."""
    plt = need_matplotlib()
    m = np.asarray(report["confusion_matrix"])
    names = report["classes"]
    size = max(4.0, 0.35 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(m, cmap="Blues")
    fig.colorbar(image, ax=ax)
    ticks = range(len(names))
    ax.set_xticks(ticks, [n[:20] for n in names], rotation=90)
    ax.set_yticks(ticks, [n[:20] for n in names])
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if len(names) <= 30:
        for (i, j), v in np.ndenumerate(m):
            ax.text(j, i, str(v), ha="center", va="center",
                    color="white" if v > m.max() / 2 else "black", fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return png_path
