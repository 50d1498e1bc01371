"""``pycaffe-lite compare``: one input through our net and OpenCV, onnxruntime and PyTorch,
layer by layer; the first layer where an engine diverges. Exit 0 when all agree, 1 when one
diverges, 2 on bad input, 3 when no engine asked for is installed (nothing was compared)."""

import os
import sys

import numpy as np

from ..errors import CaffeError
from . import add_net_flags, help_of

# pytorch.compare.ENGINES, named here so that building the command line imports no converter
ENGINES = ("opencv", "onnxruntime", "pytorch")


def add_arguments(p):
    p.add_argument("--model", required=True, help="the net (.prototxt), built in the TEST phase")
    p.add_argument("--weights", help="its weights (.caffemodel or .h5); without them the net's "
                   "fillers give the weights, the same for every engine")
    p.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES),
                   help="the engines to compare with (default: all)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=file.npy | image",
                   help="an input blob's value from a .npy file (repeat for several inputs), "
                   "or an image for the net's single input (resized, BGR, 0-255); default: "
                   "uniform random values in [-1, 1]")
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="largest relative difference (to the value's largest magnitude) that "
                   "counts as agreeing (default 1e-4)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random input")
    add_net_flags(p)


def check_inputs_only(net, model):
    """A CaffeError naming the first data layer that is not an Input layer: the engines are
    given one input, through the net's Input layers (the deploy net)."""
    from ..onnx.export import DATA_TYPES

    for name, layer in zip(net.layer_names, net.layers):
        if layer.type in DATA_TYPES and layer.type != "Input":
            raise CaffeError("%s: layer '%s' (type %s) reads its own data, which compare cannot "
                             "give the other engines; compare the deploy net, whose inputs "
                             "are Input layers" % (model, name, layer.type))


def read_inputs(net, specs, seed):
    """{input name: array} from ``--input`` values; a CaffeError naming what is wrong."""
    names = list(net.inputs)
    if not specs:
        rng = np.random.default_rng(seed)
        return {n: rng.uniform(-1, 1, net.blobs[n].shape).astype(np.float32) for n in names}
    out = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            if len(names) != 1:
                raise CaffeError("--input %s: an image is the input of a net with one input; "
                                 "this net has %d (%s): use NAME=file.npy"
                                 % (spec, len(names), ", ".join(names)))
            out[names[0]] = _image(net, names[0], spec)
            continue
        if name not in names:
            raise CaffeError("--input %s: '%s' is not an input of the net (inputs: %s)"
                             % (spec, name, ", ".join(names)))
        try:
            with open(path, "rb") as f:
                magic = f.read(6)
            if magic != b"\x93NUMPY":
                raise CaffeError("--input %s: %s is not a .npy file (no NumPy header): give an "
                                 "array saved with numpy.save, or an image for a net with one "
                                 "input" % (spec, path))
            value = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise CaffeError("--input %s: cannot read %s as a .npy array (%s)"
                             % (spec, path, exc)) from None
        value = np.asarray(value, dtype=np.float32)
        shape = tuple(net.blobs[name].shape)
        if value.ndim != len(shape) or value.shape[1:] != shape[1:]:
            raise CaffeError("--input %s: shape %s, the net's input '%s' is %s (any batch "
                             "size)" % (spec, value.shape, name, shape))
        out[name] = value
    missing = [n for n in names if n not in out]
    if missing:
        raise CaffeError("no --input for %s (inputs: %s)" % (", ".join(missing),
                                                              ", ".join(names)))
    return out


def _image(net, name, path):
    from .. import io

    shape = tuple(net.blobs[name].shape)
    if len(shape) != 4 or shape[1] not in (1, 3):
        raise CaffeError("--input %s: the net's input '%s' of shape %s is not an image batch"
                         % (path, name, shape))
    if not os.path.isfile(path):
        raise CaffeError("--input %s: no such image file" % path)
    image = io.load_image(path, color=shape[1] == 3)
    image = io.resize_image(image, shape[2:]) * 255.0
    if shape[1] == 3:
        image = image[:, :, ::-1]  # RGB -> BGR, Caffe's order
    return np.ascontiguousarray(image.transpose(2, 0, 1)[None], dtype=np.float32)


def run(args):
    from ..pytorch.compare import compare, format_table, prepare
    from ..pytorch.export import build_net

    try:
        if not args.tolerance >= 0:
            raise CaffeError("--tolerance must be >= 0, got %r" % args.tolerance)
        net = build_net(args.model, args.weights)
        check_inputs_only(net, args.model)
        inputs = read_inputs(net, args.input, args.seed)
    except (CaffeError, OSError) as exc:
        print("pycaffe-lite compare: error: %s" % " ".join(str(exc).split()), file=sys.stderr)
        return 2
    import tempfile

    with tempfile.TemporaryDirectory(prefix="pycaffe_lite_compare_") as tmp:
        weights = os.path.join(tmp, "weights.caffemodel")
        net.save(weights)  # every engine gets the weights our net holds
        engines = prepare(args.engines, args.model, weights, net)
        if not engines:
            print("pycaffe-lite compare: error: nothing was compared: none of the engines "
                  "asked for (%s) is installed; install the tools extra "
                  "(pip install '.[tools]' in pycaffe-lite's source tree) or name an "
                  "installed engine with --engines" % ", ".join(args.engines), file=sys.stderr)
            return 3
        rows, first = compare(net, engines, inputs, args.tolerance)
    names = [e.name for e in engines]
    print(format_table(rows, names))
    diverged = False
    for name in names:
        k = first[name]
        if k is None:
            print("%s: agrees (largest relative difference <= %g)" % (name, args.tolerance))
            continue
        diverged = True
        if isinstance(k, str):
            print("%s: %s" % (name, k))
            continue
        layer, blob, diffs = rows[k]
        print("%s: first diverges at layer '%s' (blob %s): relative difference %.3g > %g"
              % (name, layer, blob, diffs[name][1], args.tolerance))
    return 1 if diverged else 0


COMMANDS = [("compare", help_of("compare"), add_arguments, run)]
