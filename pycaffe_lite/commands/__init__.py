"""Subcommands of the ``pycaffe-lite`` command line.

Each module here defines ``COMMANDS``: a list of ``(name, help, add_arguments, run)`` where
``add_arguments(parser)`` declares the flags and ``run(args)`` returns an exit code. The CLI
discovers the modules, so adding a command never touches the CLI itself; :data:`MODULE_OF`
says which module holds each command, so that ``pycaffe-lite <command>`` imports that one
module alone, and :data:`TABLE` has each command's one-line help too, so that ``pycaffe-lite
--help`` imports none (a module's ``COMMANDS`` takes its help from there: :func:`help_of`;
tests/test_import_cost.py checks the table against the modules' ``COMMANDS``).
"""

import importlib
import pkgutil

# {command: (the module of this package that declares it, its one-line help)}, in the order
# ``pycaffe-lite --help`` lists them (the modules by name, each one's commands as it declares
# them): the list is printed from here without importing a module
TABLE = {
    "compare": ("compare",
           "run one input through our net and other engines, layer by layer, and name the first "
           "layer where one diverges"),
    "compute_image_mean": ("compute_image_mean",
           "compute the mean image of a database of Datums"),
    "convert_annoset": ("convert_annoset",
           "convert images with annotations to an LMDB/LevelDB of AnnotatedDatum (SSD)"),
    "convert_cifar_data": ("convert_example_data",
           "convert the CIFAR-10 binary batches to LMDB/LevelDB databases of Datums (BVLC's "
           "examples/cifar10 converter)"),
    "convert_mnist_siamese_data": ("convert_example_data",
           "convert MNIST IDX files to a database of random image pairs (BVLC's examples/siamese "
           "converter)"),
    "convert_imageset": ("convert_imageset",
           "convert a list of images to an LMDB/LevelDB of Datums"),
    "convert_mnist": ("convert_mnist",
           "convert MNIST IDX files to an LMDB/LevelDB of Datums"),
    "convert_mnist_data": ("convert_mnist",
           "convert MNIST IDX files to an LMDB/LevelDB of Datums (Caffe's name)"),
    "darknet2caffe": ("darknet2caffe",
           "convert a Darknet .cfg (+ .weights) to a prototxt (+ .caffemodel) and a solver"),
    "device_query": ("device_query",
           "show the GPU device that --gpu would use"),
    "download_model": ("download_model",
           "download a model zoo entry's weights (readme.md front matter)"),
    "draw_net": ("draw_net",
           "draw a net definition as a graph (DOT text, or an image through Graphviz)"),
    "evaluate": ("evaluate",
           "accuracy, confusion matrix, IoU or mAP of a net over its TEST data"),
    "export_onnx": ("export_onnx",
           "export a Caffe net and its weights to ONNX"),
    "export_pytorch": ("export_pytorch",
           "export a Caffe net and its weights as PyTorch source and a state_dict"),
    "extract_features": ("extract_features",
           "write blobs of a trained net, batch by batch, into databases of Datums (float_data)"),
    "import_mxnet": ("import_mxnet",
           "convert an MXNet model (symbol JSON + .params) to a Caffe prototxt and caffemodel"),
    "import_onnx": ("import_onnx",
           "convert an ONNX model to a Caffe prototxt and caffemodel"),
    "quantize": ("quantize",
           "int8 calibration: a QDQ ONNX model, Intel Caffe's quantized prototxt and the accuracy "
           "int8 costs"),
    "summary": ("summary",
           "count a model's parameters, multiply-accumulates and activation memory"),
    "test": ("test",
           "score a model"),
    "time": ("time",
           "benchmark model execution time"),
    "train": ("train",
           "train or fine-tune a model"),
    "upgrade_net_proto_text": ("upgrade",
           "upgrade a legacy (V0/V1) net prototxt to the current format"),
    "upgrade_net_proto_binary": ("upgrade",
           "upgrade a legacy binary net (.caffemodel) to the current format"),
    "upgrade_solver_proto_text": ("upgrade",
           "upgrade a solver prototxt (solver_type enum -> type string)"),
}
# {command: its module}
MODULE_OF = {name: stem for name, (stem, _) in TABLE.items()}


def help_of(name):
    """The one-line help of the command ``name``, from :data:`TABLE` (a module's ``COMMANDS``
    takes it from there)."""
    return TABLE[name][1]


def all_commands():
    """Every command of every module here, the modules in name order."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(__name__ + "." + info.name)
        found.extend(getattr(module, "COMMANDS", []))
    return found


def commands_named(name):
    """The ``COMMANDS`` entry of the command ``name`` alone (only its module imported), or
    None where :data:`MODULE_OF` does not know it."""
    stem = MODULE_OF.get(name)
    if stem is None:
        return None
    module = importlib.import_module(__name__ + "." + stem)
    found = [entry for entry in getattr(module, "COMMANDS", []) if entry[0] == name]
    return found or None


def add_no_python_layers(p):
    """The ``--no_python_layers`` flag of the commands that read nets (the CLI applies it)."""
    p.add_argument("--no_python_layers", action="store_true",
                   help="refuse nets with Python layers (which import and run the module "
                        "they name) before anything is imported: for net files you do not "
                        "trust (also PYCAFFE_LITE_ALLOW_PYTHON_LAYERS=0)")


def add_net_flags(p):
    """The flags of the commands that build nets: ``--plugin`` (the CLI imports the modules
    before the command runs) and ``--no_python_layers``."""
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import this module first, so that the layer types it registers "
                        "(@caffe.register_layer) can be used; repeat for several (also "
                        "PYCAFFE_LITE_PLUGINS=mod1,mod2 and installed entry points of the "
                        "group pycaffe_lite.plugins)")
    add_no_python_layers(p)


def add_int8_flag(p):
    """``--int8 on|off``: whether convolutions with Intel Caffe's ``quantization_param`` run in
    int8 (TEST phase; the default) or in float."""
    p.add_argument("--int8", default=None, choices=("on", "off"), type=str.lower,
                   help="run Intel Caffe's int8 calibration (quantization_param) as int8 "
                        "(on, the default unless PYCAFFE_LITE_INT8=0) or compute those layers "
                        "in float (off)")


def int8_choice(args):
    """``--int8`` as :class:`~pycaffe_lite.net.Net`'s ``int8``: True, False, or None (not
    given: ``PYCAFFE_LITE_INT8`` decides, on by default)."""
    return None if args.int8 is None else args.int8 == "on"


def weight_files(value):
    """The file names of a ``--weights`` flag (separated by ','); a CaffeError where the
    flag is given but names none (``--weights ,``), which would leave the fillers' weights."""
    from ..errors import CaffeError

    files = [name for name in (value or "").split(",") if name.strip()]
    if value and not files:
        raise CaffeError("--weights %r names no weights file (give file names separated by "
                         "',')" % value)
    return files


def check_weights_flags(args, what):
    """``--weights`` or ``--random_weights``, exactly one, for the export commands: ``what``
    names what would hold the fillers' values (a CaffeError otherwise)."""
    from ..errors import CaffeError

    if not args.weights and not args.random_weights:
        raise CaffeError("no --weights: %s would hold the fillers' random weights, not "
                         "trained ones; give --weights w.caffemodel, or --random_weights to "
                         "export the fillers' values on purpose" % what)
    if args.weights and args.random_weights:
        raise CaffeError("--weights and --random_weights exclude each other")
