"""Memory of a training iteration with and without shared activation diffs (net_memory).

    python benchmarks/bench_train_memory.py [--net resnet50] [--batch 8] [--iterations 2]
                                            [--settings off diffs on]

The zoo's deploy net becomes a training net (an Input of ``--batch`` images and labels,
BatchNorm on batch statistics, SoftmaxWithLoss in place of the Softmax); each setting builds
it in a fresh process and runs ``--iterations`` forward/backward passes on the CPU. Printed per
setting (``off``: Caffe's, every diff kept; ``diffs``: activation diffs shared; ``on``: and an
in-place Scale after BatchNorm keeping BatchNorm's array instead of a copy): the bytes the blobs
hold (net_memory.memory_report: data, diffs, params) and the peak of NumPy's allocations over
the build and the passes (tracemalloc: the layers' own buffers, BatchNorm's normalised copy
and the convolution workspaces, included).
"""

import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def train_text(net, batch):
    """The zoo deploy net ``net`` as a training net of batch ``batch``."""
    with open(os.path.join(ROOT, "models", "zoo", "%s_deploy.prototxt" % net)) as f:
        text = f.read()
    text = re.sub(r"(input_param \{\s*shape \{\s*dim: )1", r"\g<1>%d" % batch, text, count=1)
    text = text.replace("use_global_stats: true", "use_global_stats: false")
    text = re.sub(r'layer \{\s*name: "prob"\s*type: "Softmax"\s*bottom: "([^"]+)"\s*'
                  r'top: "prob"\s*\}',
                  r'layer { name: "label" type: "Input" top: "label" input_param { shape { '
                  r'dim: %d } } }\nlayer { name: "loss" type: "SoftmaxWithLoss" bottom: "\1" '
                  r'bottom: "label" top: "loss" }' % batch, text)
    if '"SoftmaxWithLoss"' not in text:
        raise SystemExit("%s: no Softmax layer named prob to turn into a loss" % net)
    return text


SETTINGS = {"off": "every diff kept", "diffs": "diffs shared, Scale copies its input",
            "on": "diffs shared, Scale keeps BatchNorm's x_norm"}


def probe(path, iterations, setting):
    """(In a fresh process) {report, peak}: one setting's figures."""
    import tracemalloc

    import numpy as np

    import pycaffe_lite as caffe
    from pycaffe_lite import net_memory

    tracemalloc.start()
    net = caffe.Net(path, caffe.TRAIN)
    if setting != "off":
        net_memory.attach(net, True)
    if setting == "diffs":
        for layer in net.layers:
            if layer.type == "Scale":
                layer.input_source = None
    rng = np.random.default_rng(0)
    net.blobs["data"].data[...] = rng.uniform(-1, 1, net.blobs["data"].shape)
    net.blobs["label"].data[...] = rng.integers(0, 1000, net.blobs["label"].shape)
    for _ in range(iterations):
        net.forward_backward()
    _, peak = tracemalloc.get_traced_memory()
    return {"report": net_memory.memory_report(net), "peak": peak}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--net", default="resnet50")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=["off", "on"])
    p.add_argument("--probe", choices=sorted(SETTINGS), help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.probe:
        print(json.dumps(probe(args.path, args.iterations, args.probe)))
        return 0
    import tempfile

    mib = 2.0 ** 20
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "train.prototxt")
        with open(path, "w") as f:
            f.write(train_text(args.net, args.batch))
        print("%s, batch %d, %d forward/backward passes on the CPU (MiB)"
              % (args.net, args.batch, args.iterations))
        print("| setting | blob data | blob diffs | params | NumPy peak |")
        print("|---|---|---|---|---|")
        for share in args.settings:
            out = subprocess.run([sys.executable, __file__, "--probe", share, "--path", path,
                                  "--iterations", str(args.iterations)],
                                 check=True, capture_output=True, text=True).stdout
            got = json.loads(out.strip().splitlines()[-1])
            r = got["report"]
            print("| %s | %.1f | %.1f | %.1f | %.1f |" % (
                SETTINGS[share], r["data"] / mib, r["diff"] / mib, r["params"] / mib,
                got["peak"] / mib))
    return 0


if __name__ == "__main__":
    sys.exit(main())
