#!/usr/bin/env python
"""Test mAP of a trained ssd_shapes model, through the net's DetectionEvaluate layer.

``python models/ssd_shapes/evaluate_map.py WEIGHTS [--net PROTOTXT] [--iters N]
[--ap_version 11point|MaxIntegral|Integral]`` runs the TEST phase of the net over the test
LMDB (``--iters`` batches; default: the solver's 12 x 25 = all 300 images), gathers the
true/false-positive rows of ``detection_eval`` and prints ``mAP = ...`` as the SSD fork's
solver computes it.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def evaluate(weights, net_file, iters, ap_version="11point"):
    import pycaffe_lite as caffe
    from pycaffe_lite.layers.detection.average_precision import DetectionAccumulator

    net = caffe.Net(net_file, caffe.TEST, weights=weights)
    acc = DetectionAccumulator()
    try:
        for _ in range(iters):
            net.forward()
            acc.add(net.blobs["detection_eval"].data.reshape(-1, 5))
    finally:
        for layer in net.layers:
            if hasattr(layer, "close"):
                layer.close()
    return acc.mean_average_precision(ap_version), acc.average_precisions(ap_version)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("weights")
    p.add_argument("--net", default=os.path.join(HERE, "ssd_shapes.prototxt"))
    p.add_argument("--iters", type=int, default=12)
    p.add_argument("--ap_version", default="11point")
    a = p.parse_args(argv)
    m, per_class = evaluate(a.weights, a.net, a.iters, a.ap_version)
    names = {1: "circle", 2: "square", 3: "triangle"}
    for label, ap in sorted(per_class.items()):
        print("AP %-8s = %.4f" % (names.get(label, label), ap))
    print("mAP = %.4f" % m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
