"""``pycaffe-lite export_pytorch``: a prototxt and its weights as PyTorch source
(``model.py``, one ``nn.Module``) and a state_dict (``weights.pt``), checked against our
forward where torch is installed."""

import numpy as np

from . import add_net_flags, check_weights_flags, help_of

DEFAULT_TOLERANCE = 1e-4


def add_arguments(p):
    p.add_argument("--model", required=True, help="the net (.prototxt), built in the TEST phase")
    p.add_argument("--weights", help="trained weights (.caffemodel or .h5); required unless "
                   "--random_weights")
    p.add_argument("--random_weights", action="store_true",
                   help="export without trained weights: the net's fillers give them (a module "
                   "to test the conversion with, not a trained one)")
    p.add_argument("--output-dir", required=True,
                   help="the folder to write model.py and weights.pt into")
    p.add_argument("--class-name", help="the module's class name (default: from the net's "
                   "name, or Net)")
    p.add_argument("--train", action="store_true",
                   help="keep Dropout and BatchNorm in their training form (module.train() "
                   "drops out and normalises with the batch's statistics)")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                   help="largest relative difference from our forward that passes the check "
                   "(default %g)" % DEFAULT_TOLERANCE)
    p.add_argument("--seed", type=int, default=0, help="seed of the check's random input")
    add_net_flags(p)


def random_inputs(net, names, seed):
    rng = np.random.default_rng(seed)
    return {n: rng.uniform(-1.0, 1.0, net.blobs[n].shape).astype(np.float32) for n in names}


def check(net, folder, report, tolerance, seed, say=print):
    """Runs the exported module and our net on one random input; the largest differences per
    output, printed; True when all are within ``tolerance`` (relative to the output's
    largest magnitude)."""
    import torch

    from ..pytorch.compare import _first_computed, difference, load_module

    module = load_module(folder).load()
    inputs = random_inputs(net, report["inputs"], seed)
    for name, value in inputs.items():
        net.blobs[name].data[...] = value
    # from the first layer that computes (a Data layer would overwrite its tops), asking for
    # the module's outputs (a train/test net's own outputs are its losses)
    first = _first_computed(net)
    if first < len(net.layer_names):
        net.forward(start=net.layer_names[first])
    ours = {name: net.blobs[name].data for name in report["outputs"]}
    with torch.no_grad():
        out = module(*[torch.from_numpy(inputs[n]) for n in report["inputs"]])
    if not isinstance(out, dict):
        out = {report["outputs"][0]: out}
    ok = True
    for name in report["outputs"]:
        abs_diff, rel = difference(ours[name], out[name].numpy())
        good = rel <= tolerance
        ok = ok and good
        say("output %s: largest difference %.3g (relative %.3g)%s"
            % (name, abs_diff, rel, "" if good else ", over the tolerance %g" % tolerance))
    return ok


def run(args):
    import os

    from ..errors import CaffeError
    from ..pytorch import export_files

    if not args.tolerance >= 0:
        raise CaffeError("--tolerance must be >= 0, got %r" % args.tolerance)
    check_weights_flags(args, "weights.pt")
    net, report = export_files(args.model, args.weights, args.output_dir, args.class_name,
                               args.train)
    for name, type_ in report["dropped"]:
        print("dropped layer '%s' (type %s): it only trains" % (name, type_))
    print("class %s: inputs %s; outputs %s" % (report["class_name"], ", ".join(report["inputs"]),
                                              ", ".join(report["outputs"])))
    print("wrote %s and %s" % (os.path.join(args.output_dir, "model.py"),
                               os.path.join(args.output_dir, "weights.pt")))
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch is not installed: the module was not run against our forward")
        return 0
    return 0 if check(net, args.output_dir, report, args.tolerance, args.seed) else 1


COMMANDS = [("export_pytorch", help_of("export_pytorch"), add_arguments, run)]
