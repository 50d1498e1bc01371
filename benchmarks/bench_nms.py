"""Non-maximum suppression on 30,000 boxes: time and peak memory of each detection layer's NMS.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_nms.py [--boxes 30000]

Cases (boxes best first; the targets: under 1 s and 200 MB each):

- clustered: boxes scattered around 150 objects (a detector's raw output at a low confidence
  threshold: most boxes are suppressed), through the YOLO ports' rule (at least 0.45);
- uniform: boxes of 1 to 4 % of the image side anywhere (few overlaps: nearly all are kept, the
  hardest case for greedy suppression), SSD's ApplyNMSFast rule (at most 0.45);
- pixel: the uniform case in 1000 x 600 pixels through py-faster-rcnn's overlap (Proposal);
- yolov3: a Yolov3DetectionOutput layer (MobileNet-YOLO) with three heads of a 416 x 416 input,
  80 classes, at its confidence_threshold 0.01, whose random heads give about the requested
  number of candidate boxes: the whole forward pass (decoding included).

Time: one call. Memory: the peak of NumPy's allocations during a second call under
``tracemalloc`` (which NumPy reports to), so the interpreter and the libraries do not count.
"""

import argparse
import os
import sys
import time
import tracemalloc

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import bench_env  # noqa: E402
from pycaffe_lite.layers.detection import nms  # noqa: E402


def clustered(n, rng):
    centres = rng.uniform(0.1, 0.9, (150, 2))
    sizes = rng.uniform(0.05, 0.3, (150, 2))
    which = rng.integers(0, 150, n)
    c = centres[which] + rng.normal(0, 0.02, (n, 2))
    s = sizes[which] * rng.uniform(0.8, 1.25, (n, 2))
    return np.concatenate([c - s / 2, c + s / 2], axis=1).astype(np.float32)


def uniform(n, rng, scale=1.0):
    xy = rng.uniform(0, 1, (n, 2))
    wh = rng.uniform(0.01, 0.04, (n, 2))
    return (np.concatenate([xy, xy + wh], axis=1) * scale).astype(np.float32)


def measure(fn):
    """(result, seconds, peak MB): timed alone, then run again under ``tracemalloc`` (which
    slows allocations down) for the memory."""
    t0 = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return out, seconds, peak / 2 ** 20


def yolov3_case(n, rng):
    """A Yolov3DetectionOutput net (80 classes, heads 13, 26, 52) whose class logits are set so
    that about ``n`` (class, anchor) pairs score above 0.01."""
    from pycaffe_lite.proto import caffe_pb2
    from pycaffe_lite.testing import empty_blobs, make_layer, random_blobs

    classes, sides = 80, (13, 26, 52)
    cells = 3 * sum(s * s for s in sides)
    p_pass = n / (cells * classes)
    p = caffe_pb2.LayerParameter(name="det", type="Yolov3DetectionOutput")
    q = p.yolov3_detection_output_param
    q.num_classes, q.num_box, q.mask_group_num = classes, 3, 3
    q.confidence_threshold = 0.01
    q.biases.extend([10, 13, 16, 30, 33, 23, 30, 61, 62, 45, 59, 119, 116, 90, 156, 198, 373,
                     326])
    q.mask.extend([6, 7, 8, 3, 4, 5, 0, 1, 2])
    q.anchors_scale.extend([32, 16, 8])
    heads = []
    for s in sides:
        x = rng.normal(0, 1, (1, 3, 85, s, s)).astype(np.float32)
        x[:, :, 4] = 3.0                                  # objectness about 0.95
        # a class passes with probability p_pass: its logit above logit(0.0105) that often
        low = rng.uniform(0, 1, (1, 3, classes, s, s)) < p_pass
        x[:, :, 5:] = np.where(low, rng.uniform(-4.5, 2.0, low.shape), -8.0)
        heads.append(x.reshape(1, 255, s, s))
    layer = make_layer(p)
    bottom, top = random_blobs(heads, dtype=np.float32), empty_blobs(1)
    layer.SetUp(bottom, top)

    def run():
        layer.Forward(bottom, top)
        return np.empty(top[0].shape[2])
    return run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--boxes", type=int, default=30000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    bench_env.report()
    rng = np.random.default_rng(args.seed)
    n = args.boxes
    boxes = clustered(n, rng), uniform(n, rng), uniform(n, rng, 1000.0).astype(np.float64)
    cases = [
        ("clustered", lambda: nms.greedy(boxes[0], 0.45, nms.jaccard, nms.AT_LEAST)),
        ("uniform", lambda: nms.greedy(boxes[1], 0.45, nms.jaccard, nms.AT_MOST)),
        ("pixel", lambda: nms.greedy(boxes[2], 0.7, nms.pixel_overlaps, nms.AT_MOST)),
    ]
    print("%-10s %8s %8s %10s %10s" % ("case", "boxes", "kept", "seconds", "peak MB"))
    for name, fn in cases:
        kept, seconds, mb = measure(fn)
        print("%-10s %8d %8d %10.3f %10.1f" % (name, n, len(kept), seconds, mb))
    run = yolov3_case(n, rng)
    rows, seconds, mb = measure(run)
    print("%-10s %8s %8d %10.3f %10.1f   (whole forward pass)" % ("yolov3", "~%d" % n, len(rows),
                                                                  seconds, mb))


if __name__ == "__main__":
    main()
