"""The error catalogue: for every kind of bad input a user can give, one exception of ours (a
CaffeError subclass) whose message names where (file and line, or layer and blob) and says
what to do; from the command line, exit code 1 and a one-line message, never a traceback.

Each case below makes one kind of mistake and lists what the message must contain. A case
fails if anything other than the expected CaffeError subclass escapes (a NumPy, protobuf or
OS exception from deep inside), if nothing is raised (a silent wrong result), or if the
message does not name the place.
"""

import errno
import os

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import cli
from pycaffe_lite.proto import protoio
from pycaffe_lite.data import db as dbmod
from pycaffe_lite.data.datum import array_to_datum
from pycaffe_lite.errors import (CaffeError, LayerError, NetError, ProtoError, ShapeError,
                                 SnapshotError)
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.registry import UnknownTypeError
from pycaffe_lite.solvers import get_solver

# ---- nets and files the cases start from -------------------------------------------------
INPUT = ('layer { name: "in" type: "Input" top: "x" top: "label"\n'
         '        input_param { shape { dim: 2 dim: 3 dim: 5 dim: 5 } shape { dim: 2 } } }\n')

CLASSIFIER = INPUT + """\
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "score"
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" }
layer { name: "acc" type: "Accuracy" bottom: "score" bottom: "label" top: "acc" }
"""

TRAIN_NET = """\
name: "dummy"
layer { name: "data" type: "DummyData" top: "x" top: "y"
        dummy_data_param { shape { dim: 8 dim: 3 } shape { dim: 8 dim: 2 }
                           data_filler { type: "gaussian" } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "z" bottom: "y" top: "loss" }
"""

SOLVER = """\
net: "net.prototxt"
base_lr: 0.01
lr_policy: "fixed"
max_iter: 4
snapshot: 2
snapshot_prefix: "snaps/run"
random_seed: 1
snapshot_after_train: false
"""


def write(folder, name, text):
    path = folder / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return str(path)


def build(folder, text, name="net.prototxt", phase=caffe.TRAIN):
    """Write ``text`` and build a Net from the file (a forward pass too, when it builds)."""
    net = caffe.Net(write(folder, name, text), phase)
    net.forward()
    return net


def _message(make):
    """The message of the CaffeError that ``make()`` raises."""
    try:
        make()
    except CaffeError as exc:
        return str(exc)
    raise AssertionError("no error")


def layer(text):
    """A net of INPUT and one more layer line (line 3 of the file)."""
    return INPUT + text + "\n"


def classifier(folder):
    return caffe.Net(write(folder, "net.prototxt", CLASSIFIER), caffe.TRAIN)


def saved_weights(folder, name="w.caffemodel"):
    net = classifier(folder)
    net.save(str(folder / name))
    return net, folder / name


def edited_weights(folder, edit):
    net, path = saved_weights(folder)
    model = protoio.read_binary(str(path), caffe_pb2.NetParameter())
    edit([lp for lp in model.layer if lp.name == "ip"][0])
    protoio.write_binary(model, str(folder / "edited.caffemodel"))
    return net, str(folder / "edited.caffemodel")


def solver_project(folder, solver_text=SOLVER, net_text=TRAIN_NET):
    (folder / "snaps").mkdir(exist_ok=True)
    write(folder, "net.prototxt", net_text)
    return write(folder, "solver.prototxt", solver_text)


def trained_snapshot(folder, monkeypatch):
    """A solver project trained for 2 iterations with its snapshot written; the solver."""
    monkeypatch.chdir(folder)
    solver = get_solver(solver_project(folder))
    solver.step(2)
    return solver


def lmdb_of(folder, records, name="db"):
    """An LMDB at folder/name holding the given serialized values under keys 0, 1, ..."""
    path = str(folder / name)
    with dbmod.open_db(path, "lmdb", dbmod.NEW) as db:
        txn = db.transaction()
        for i, value in enumerate(records):
            txn.put("%08d" % i, value)
        txn.commit()
    return path


def datum_bytes(label=0, shape=(1, 4, 4)):
    arr = np.arange(int(np.prod(shape)), dtype=np.uint8).reshape(shape)
    return array_to_datum(arr, label).SerializeToString()


def data_net(source, backend="LMDB", batch_size=2):
    return ('layer { name: "data" type: "Data" top: "data" top: "label"\n'
            '        data_param { source: "%s" batch_size: %d backend: %s prefetch: 0 } }\n'
            % (source, batch_size, backend))


# ---- the catalogue -------------------------------------------------------------------------
CASES = []


def case(exc, *needles):
    """Register a case: it must raise ``exc`` (a CaffeError subclass) with every needle in
    its message (``{tmp}`` stands for the case's folder)."""
    def deco(fn):
        CASES.append(pytest.param(fn, exc, needles, id=fn.__name__))
        return fn
    return deco


# -- prototxt and other files
@case(ProtoError, "net.prototxt:3:", "Expected \"}\"")
def malformed_prototxt(tmp):
    build(tmp, layer('layer { name: "r" type: "ReLU" bottom: "x" top: "x"'))


@case(ProtoError, "net.prototxt:3:", "no field named \"num_outputs\"",
      "Did you mean 'num_output'?")
def unknown_field(tmp):
    build(tmp, layer('layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" '
                     'inner_product_param { num_outputs: 2 } }'))


@case(ProtoError, "net.prototxt:3:", "caffe.LayerParameter\" has no field named \"botom\"",
      "Did you mean 'bottom'?")
def misspelt_layer_field(tmp):
    build(tmp, layer('layer { name: "r" type: "ReLU" botom: "x" top: "y" }'))


@case(ProtoError, "solver.prototxt:1:1:", "NetParameter\" has no field named \"net\"",
      "('net' is a field of SolverParameter: is this a solver file")
def solver_given_as_the_net(tmp):
    solver = solver_project(tmp)
    assert "missing above" not in _message(lambda: caffe.Net(solver, caffe.TEST))
    caffe.Net(solver, caffe.TEST)


@case(ProtoError, "net.prototxt:1:1:", "SolverParameter\" has no field named \"name\"",
      "('name' is a field of NetParameter: is this a net definition")
def net_given_as_the_solver(tmp):
    get_solver(write(tmp, "net.prototxt", TRAIN_NET))


@case(ProtoError, "net.prototxt:3:", "no value named MAXX", "Did you mean MAX?",
      # caffe.proto's PoolMethod: MAX = 0, AVE = 1, STOCHASTIC = 2
      "Values: MAX, AVE, STOCHASTIC.")
def wrong_enum_value(tmp):
    build(tmp, layer('layer { name: "p" type: "Pooling" bottom: "x" top: "y" '
                     'pooling_param { pool: MAXX kernel_size: 2 } }'))


@case(ProtoError, "net.prototxt:5:1:", "caffe.LayerParameter\" has no field named \"layer\"",
      "is a '}' missing above this line")
def missing_closing_brace(tmp):
    # the ReLU's '}' is missing: the next 'layer {' is read inside it
    build(tmp, layer('layer { name: "r" type: "ReLU" bottom: "x" top: "y"\n') +
          'layer { name: "s" type: "Sigmoid" bottom: "y" top: "z" }\n')


@case(ProtoError, "net.prototxt:3:", "caffe.ConvolutionParameter\" has no field named \"top\"",
      "'top' is a field of LayerParameter, which holds the ConvolutionParameter: is a '}' "
      "missing above this line")
def field_left_in_an_inner_block(tmp):
    build(tmp, layer('layer { name: "c" type: "Convolution" bottom: "x" '
                     'convolution_param { num_output: 2 kernel_size: 1 top: "y" } }'))


@case(ProtoError, "net.prototxt:3:", "Couldn't parse integer")
def wrong_value_type(tmp):
    build(tmp, layer('layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" '
                     'inner_product_param { num_output: "four" } }'))


@case(ProtoError, "net.prototxt:3:", "out of range: -4")
def negative_unsigned_value(tmp):
    build(tmp, layer('layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" '
                     'inner_product_param { num_output: -4 } }'))


@case(ProtoError, "net.prototxt:3:17", "not UTF-8", "save the file as UTF-8")
def non_utf8_layer_name(tmp):
    build(tmp, layer('layer { name: "r\xe9lu" type: "ReLU" bottom: "x" top: "y" }')
          .encode("latin-1"))


@case(ProtoError, "net.prototxt", "file is empty")
def empty_prototxt(tmp):
    build(tmp, "\n\n")


@case(ProtoError, "missing.prototxt", "file not found")
def missing_prototxt(tmp):
    caffe.Net(str(tmp / "missing.prototxt"), caffe.TEST)


@case(ProtoError, "{tmp}", "is a directory")
def prototxt_is_a_directory(tmp):
    caffe.Net(str(tmp), caffe.TEST)


@case(ProtoError, "net.prototxt", "cannot decode", "NetParameter")
def binary_garbage_as_prototxt(tmp):
    build(tmp, bytes(range(256)) * 4)


@case(ProtoError, "solver.prototxt:3:", "momentun")
def solver_unknown_field(tmp):
    get_solver(solver_project(tmp, "base_lr: 0.1\nlr_policy: \"fixed\"\nmomentun: 0.9\n"))


@case(CaffeError, "solver.prototxt", "must specify a train net")
def solver_without_net(tmp):
    get_solver(solver_project(tmp, SOLVER.replace('net: "net.prototxt"', "")))


@case(CaffeError, "solver.prototxt", "net file 'nope.prototxt' not found", "Fix the path")
def solver_net_file_missing(tmp):
    get_solver(solver_project(tmp, SOLVER.replace("net.prototxt", "nope.prototxt")))


@case(UnknownTypeError, "solver.prototxt", "'fixd'", "did you mean 'fixed'")
def unknown_lr_policy(tmp):
    get_solver(solver_project(tmp, SOLVER.replace('"fixed"', '"fixd"')))


@case(UnknownTypeError, "solver.prototxt", "'SDG'", "did you mean 'SGD'")
def unknown_solver_type(tmp):
    get_solver(solver_project(tmp, SOLVER + 'type: "SDG"\n'))


@case(CaffeError, "solver.prototxt", "base_lr must be >= 0")
def negative_base_lr(tmp):
    get_solver(solver_project(tmp, SOLVER.replace("0.01", "-0.01")))


@case(CaffeError, "solver.prototxt", "test_interval is 0", "set test_interval")
def solver_test_iter_without_test_interval(tmp):
    get_solver(solver_project(tmp, SOLVER + "test_iter: 2\n"))


@case(CaffeError, "solver.prototxt", "stepsize", "set stepsize")
def step_policy_without_stepsize(tmp):
    get_solver(solver_project(tmp, SOLVER.replace('"fixed"', '"step"'))).step(1)


@case(CaffeError, "the diff of blob 'z' is not kept", "blob 'z1' has written it",
      "PYCAFFE_LITE_SHARE_DIFFS=0", "set_share_diffs(False)")
def reading_a_shared_diff_after_a_step(tmp):
    chain = TRAIN_NET.replace(
        'bottom: "x" top: "z"',
        'bottom: "x" top: "z1"\n'
        '        inner_product_param { num_output: 5 } }\n'
        'layer { name: "ip2" type: "InnerProduct" bottom: "z1" top: "z2"\n'
        '        inner_product_param { num_output: 5 } }\n'
        'layer { name: "ip3" type: "InnerProduct" bottom: "z2" top: "z"')
    solver = get_solver(solver_project(tmp, SOLVER.replace("snapshot: 2", "snapshot: 0"),
                                       chain))
    solver.step(1)
    solver.net.blobs["z"].diff  # going down, ip2 wrote z1 into z's buffer


# -- net structure
@case(UnknownTypeError, "layer 'r'", "unknown layer type 'Relu'", "did you mean 'ReLU'")
def unknown_layer_type(tmp):
    build(tmp, layer('layer { name: "r" type: "Relu" bottom: "x" top: "y" }'))


@case(NetError, "layer 'r'", "unknown bottom blob 'nope'")
def missing_bottom(tmp):
    build(tmp, layer('layer { name: "r" type: "ReLU" bottom: "nope" top: "y" }'))


@case(NetError, "layer 'r2'", "top blob 'y' is produced by more than one layer")
def duplicate_top(tmp):
    build(tmp, layer('layer { name: "r1" type: "ReLU" bottom: "x" top: "y" }\n'
                     'layer { name: "r2" type: "Sigmoid" bottom: "x" top: "y" }'))


@case(LayerError, "layer 'r' (type ReLU)", "takes exactly 1 bottom blob, got 2")
def wrong_bottom_count(tmp):
    build(tmp, layer('layer { name: "r" type: "ReLU" bottom: "x" bottom: "label" top: "y" }'))


@case(LayerError, "layer 'r' (type ReLU)", "takes exactly 1 top blob, got 0")
def wrong_top_count(tmp):
    build(tmp, layer('layer { name: "r" type: "ReLU" bottom: "x" }'))


@case(NetError, "layer 'r'", "either include rules or exclude rules")
def include_and_exclude(tmp):
    build(tmp, layer('layer { name: "r" type: "ReLU" bottom: "x" top: "y" '
                     'include { phase: TRAIN } exclude { phase: TEST } }'))


@case(NetError, "layer 'loss'", "propagate_down must be given once per bottom")
def propagate_down_count(tmp):
    build(tmp, CLASSIFIER.replace('top: "loss"', 'top: "loss" propagate_down: true'))


@case(NetError, "layer 'r' (type ReLU)", "1 param specs given", "only 0 parameter blobs")
def too_many_param_specs(tmp):
    build(tmp, layer('layer { name: "r" type: "ReLU" bottom: "x" top: "y" param { lr_mult: 1 } }'))


@case(LayerError, "layer 'r' (type ReLU)", "loss_weight must be unspecified or given once "
      "per top")
def loss_weight_count(tmp):
    build(tmp, layer('layer { name: "r" type: "ReLU" bottom: "x" top: "y" loss_weight: 1 '
                     'loss_weight: 2 }'))


@case(ShapeError, "param 'w'", "layer 'a'", "layer 'b'", "shape mismatch")
def shared_param_shape_mismatch(tmp):
    build(tmp, layer('layer { name: "a" type: "InnerProduct" bottom: "x" top: "y" param { name: '
                     '"w" } inner_product_param { num_output: 2 } }\n'
                     'layer { name: "b" type: "InnerProduct" bottom: "x" top: "z" param { name: '
                     '"w" } inner_product_param { num_output: 3 } }'))


# -- invalid layer parameters
@case(LayerError, "layer 'c' (type Convolution)", "kernel extent 7", "larger than the padded "
      "input 5")
def conv_kernel_larger_than_padded_input(tmp):
    build(tmp, layer('layer { name: "c" type: "Convolution" bottom: "x" top: "y" '
                     'convolution_param { num_output: 2 kernel_size: 7 } }'))


@case(LayerError, "layer 'p' (type Pooling)", "larger than the padded input")
def pool_kernel_larger_than_padded_input(tmp):
    build(tmp, layer('layer { name: "p" type: "Pooling" bottom: "x" top: "y" '
                     'pooling_param { kernel_size: 7 } }'))


@case(LayerError, "layer 'roi' (type ROIPooling)", "regions (bottom 1) must be R x 5",
      "got shape (2,)")
def roi_pooling_regions_not_5_wide(tmp):
    build(tmp, layer('layer { name: "roi" type: "ROIPooling" bottom: "x" bottom: "label" '
                     'top: "y" roi_pooling_param { pooled_h: 2 pooled_w: 2 } }'))


@case(LayerError, "layer 's' (type ShuffleChannel)", "the 3 channels", "not a multiple of "
      "group 2")
def shuffle_channel_group_does_not_divide(tmp):
    build(tmp, layer('layer { name: "s" type: "ShuffleChannel" bottom: "x" top: "y" '
                     'shuffle_channel_param { group: 2 } }'))


@case(LayerError, "layer 'a' (type Axpy)", "N = 2, C = 3", "got shape (2,)")
def axpy_scale_shape_mismatch(tmp):
    build(tmp, layer('layer { name: "a" type: "Axpy" bottom: "label" bottom: "x" bottom: "x" '
                     'top: "y" }'))


@case(LayerError, "layer 'c' (type Convolution)", "input channels (3) must be a multiple of "
      "group (2)")
def group_not_dividing_channels(tmp):
    build(tmp, layer('layer { name: "c" type: "Convolution" bottom: "x" top: "y" '
                     'convolution_param { num_output: 4 kernel_size: 3 group: 2 } }'))


@case(LayerError, "layer 'c' (type Convolution)", "num_output (4) must be a multiple of group "
      "(3)")
def group_not_dividing_num_output(tmp):
    build(tmp, layer('layer { name: "c" type: "Convolution" bottom: "x" top: "y" '
                     'convolution_param { num_output: 4 kernel_size: 3 group: 3 } }'))


@case(LayerError, "layer 'c' (type Convolution)", "stride", "nonzero")
def conv_zero_stride(tmp):
    build(tmp, layer('layer { name: "c" type: "Convolution" bottom: "x" top: "y" '
                     'convolution_param { num_output: 2 kernel_size: 3 stride: 0 } }'))


@case(LayerError, "layer 'c' (type Convolution)", "kernel_size must be specified")
def conv_without_kernel(tmp):
    build(tmp, layer('layer { name: "c" type: "Convolution" bottom: "x" top: "y" '
                     'convolution_param { num_output: 2 } }'))


@case(LayerError, "layer 'p' (type Pooling)", "pad must be smaller than the kernel")
def pool_pad_not_smaller_than_kernel(tmp):
    build(tmp, layer('layer { name: "p" type: "Pooling" bottom: "x" top: "y" '
                     'pooling_param { kernel_size: 2 pad: 2 } }'))


@case(LayerError, "layer 'd' (type Dropout)", "dropout_ratio must be in [0, 1), got -0.5")
def negative_dropout_ratio(tmp):
    build(tmp, layer('layer { name: "d" type: "Dropout" bottom: "x" top: "y" '
                     'dropout_param { dropout_ratio: -0.5 } }'))


@case(LayerError, "layer 'd' (type Dropout)", "dropout_ratio must be in [0, 1), got 1")
def dropout_ratio_one(tmp):
    build(tmp, layer('layer { name: "d" type: "Dropout" bottom: "x" top: "y" '
                     'dropout_param { dropout_ratio: 1 } }'))


@case(LayerError, "layer 'ip' (type InnerProduct)", "num_output must be > 0")
def inner_product_without_outputs(tmp):
    build(tmp, layer('layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" }'))


@case(LayerError, "layer 'ip' (type InnerProduct)", "axis 5 is out of range")
def inner_product_axis_out_of_range(tmp):
    build(tmp, layer('layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" '
                     'inner_product_param { num_output: 2 axis: 5 } }'))


@case(LayerError, "layer 'cat' (type Concat)", "bottom 1 has shape (2, 3, 5, 4)")
def concat_shape_mismatch(tmp):
    build(tmp, layer('layer { name: "in2" type: "Input" top: "z" input_param { shape { dim: 2 '
                     'dim: 3 dim: 5 dim: 4 } } }\n'
                     'layer { name: "cat" type: "Concat" bottom: "x" bottom: "z" top: "y" }'))


@case(LayerError, "layer 'e' (type Eltwise)", "same shape", "bottom 1 has shape (2, 3, 5, 4)")
def eltwise_shape_mismatch(tmp):
    build(tmp, layer('layer { name: "in2" type: "Input" top: "z" input_param { shape { dim: 2 '
                     'dim: 3 dim: 5 dim: 4 } } }\n'
                     'layer { name: "e" type: "Eltwise" bottom: "x" bottom: "z" top: "y" }'))


@case(LayerError, "layer 'r' (type Reshape)", "must be divisible", "(2, 3, 5, 5)")
def reshape_count_mismatch(tmp):
    build(tmp, layer('layer { name: "r" type: "Reshape" bottom: "x" top: "y" '
                     'reshape_param { shape { dim: 7 dim: -1 } } }'))


@case(LayerError, "layer 's' (type Slice)", "slice_point 9 is beyond the size 3 of axis 1")
def slice_point_beyond_axis(tmp):
    build(tmp, layer('layer { name: "s" type: "Slice" bottom: "x" top: "a" top: "b" '
                     'slice_param { slice_point: 9 } }'))


@case(LayerError, "layer 'ip' (type InnerProduct)", "unknown filler type 'gausian'",
      "did you mean 'gaussian'")
def unknown_filler_type(tmp):
    build(tmp, layer('layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" '
                     'inner_product_param { num_output: 2 weight_filler { type: "gausian" } } }'))


@case(LayerError, "layer 'sm' (type Softmax)", "axis 7 is out of range", "[-4, 4)")
def softmax_axis_out_of_range(tmp):
    build(tmp, layer('layer { name: "sm" type: "Softmax" bottom: "x" top: "y" '
                     'softmax_param { axis: 7 } }'))


@case(LayerError, "layer 'n' (type LRN)", "odd values for local_size, got 4")
def lrn_even_local_size(tmp):
    build(tmp, layer('layer { name: "n" type: "LRN" bottom: "x" top: "y" '
                     'lrn_param { local_size: 4 } }'))


@case(LayerError, "layer 'cr' (type Crop)", "out of bounds")
def crop_larger_than_input(tmp):
    build(tmp, layer('layer { name: "in2" type: "Input" top: "z" input_param { shape { dim: 2 '
                     'dim: 3 dim: 9 dim: 9 } } }\n'
                     'layer { name: "cr" type: "Crop" bottom: "x" bottom: "z" top: "y" }'))


@case(LayerError, "layer 'lg' (type Log)", "base must be strictly positive")
def log_negative_base(tmp):
    build(tmp, layer('layer { name: "lg" type: "Log" bottom: "x" top: "y" '
                     'log_param { base: -2 } }'))


@case(LayerError, "layer 's' (type Scale)", "does not match bottom[0]")
def scale_shape_mismatch(tmp):
    build(tmp, layer('layer { name: "in2" type: "Input" top: "z" input_param { shape { dim: 5 '
                     '} } }\nlayer { name: "s" type: "Scale" bottom: "x" bottom: "z" top: "y" }'))


@case(LayerError, "layer 'c' (type Clip)", "min (2) must not be greater than clip_param.max (1)")
def clip_min_above_max(tmp):
    build(tmp, layer('layer { name: "c" type: "Clip" bottom: "x" top: "y" '
                     'clip_param { min: 2 max: 1 } }'))


@case(LayerError, "layer 'py' (type Python)", "cannot import python_param.module "
      "'no_such_module'")
def python_layer_module_missing(tmp):
    build(tmp, layer('layer { name: "py" type: "Python" bottom: "x" top: "y" '
                     'python_param { module: "no_such_module" layer: "L" } }'))


@case(LayerError, "layer 'py' (type Python)", "cannot import python_param.module "
      "'layer_needing_a_dependency': ModuleNotFoundError: No module named "
      "'no_such_dependency_xyz' (at {tmp}/layer_needing_a_dependency.py, line 2: the module "
      "was found, its code failed)")
def python_layer_module_whose_import_fails(tmp, monkeypatch):
    # the module is there (in the working directory); what it imports is not
    write(tmp, "layer_needing_a_dependency.py", "import os\nimport no_such_dependency_xyz\n")
    monkeypatch.chdir(tmp)
    build(tmp, layer('layer { name: "py" type: "Python" bottom: "x" top: "y" '
                     'python_param { module: "layer_needing_a_dependency" layer: "L" } }'))


@case(LayerError, "layer 'loss' (type SoftmaxWithLoss)", "number of labels must match")
def softmax_label_count_mismatch(tmp):
    build(tmp, CLASSIFIER.replace('"ip" type: "InnerProduct" bottom: "x"',
                                  '"ip" type: "Convolution" bottom: "x"').replace(
        "inner_product_param { num_output: 4", "convolution_param { num_output: 4 kernel_size: 1"))


@case(NetError, "layer 'c' (type Convolution): quantization_param", "2 scale_params for 4 "
      "output channels")
def int8_scale_params_count_mismatch(tmp):
    build(tmp, layer('layer { name: "c" type: "Convolution" bottom: "x" top: "y" '
                     'convolution_param { num_output: 4 kernel_size: 1 } quantization_param '
                     '{ bw_layer_in: 8 bw_layer_out: 8 bw_params: 8 scale_in: 10 scale_out: 5 '
                     'scale_params: 3 scale_params: 4 } }'), phase=caffe.TEST)


@case(NetError, "layer 'c' (type Convolution): quantization_param needs scale_in")
def int8_scales_missing(tmp):
    build(tmp, layer('layer { name: "c" type: "Convolution" bottom: "x" top: "y" '
                     'convolution_param { num_output: 4 kernel_size: 1 } quantization_param '
                     '{ bw_layer_in: 8 bw_layer_out: 8 bw_params: 8 scale_out: 5 '
                     'scale_params: 3 } }'), phase=caffe.TEST)


# -- running the net
@case(ShapeError, "input 'x'", "(2, 3, 5, 4)", "expects (2, 3, 5, 5)")
def wrong_input_shape_on_forward(tmp):
    classifier(tmp).forward(x=np.zeros((2, 3, 5, 4)), label=np.zeros(2))


@case(ShapeError, "input 'x'", "call net.reshape() first")
def wrong_batch_size_on_forward(tmp):
    classifier(tmp).forward(x=np.zeros((3, 3, 5, 5)), label=np.zeros(2))


@case(NetError, "input 'x'", "pass a numeric array")
def non_numeric_input(tmp):
    classifier(tmp).forward(x=[["a"] * 5] * 2, label=np.zeros(2))


@case(NetError, "'score' is not an input of this net", "inputs: x, label")
def forward_to_a_non_input(tmp):
    classifier(tmp).forward(score=np.zeros((2, 4)))


@case(NetError, "forward(blobs=...)", "'prob' is not a blob")
def forward_unknown_output_blob(tmp):
    classifier(tmp).forward(blobs=["prob"])


@case(ShapeError, "diff for blob 'score'", "(3, 4)")
def wrong_diff_shape_on_backward(tmp):
    classifier(tmp).backward(score=np.zeros((3, 4)))


@case(NetError, "unknown layer 'conv1'", "layers: in")
def forward_from_unknown_layer(tmp):
    classifier(tmp).forward(start="conv1")


@case(LayerError, "layer 'loss' (type SoftmaxWithLoss)", "label value 7 is out of range",
      "[0, 4)")
def label_out_of_range_softmax(tmp):
    classifier(tmp).forward(x=np.zeros((2, 3, 5, 5)), label=np.array([1, 7]))


@case(LayerError, "layer 'acc' (type Accuracy)", "label value -1 is out of range", "[0, 4)")
def label_out_of_range_accuracy(tmp):
    text = CLASSIFIER.replace('layer { name: "loss"', '# layer { name: "loss"')
    net = caffe.Net(write(tmp, "net.prototxt", text), caffe.TEST)
    net.forward(x=np.zeros((2, 3, 5, 5)), label=np.array([-1, 0]))


@case(LayerError, "layer 'loss' (type SoftmaxWithLoss)", "label value 0.5 is not an integer")
def non_integer_label(tmp):
    classifier(tmp).forward(x=np.zeros((2, 3, 5, 5)), label=np.array([0.5, 1]))


# -- weights and solver states
@case(ShapeError, "edited.caffemodel", "layer 'ip'", "shape mismatch", "rename the layer")
def copy_from_shape_mismatch(tmp):
    def edit(lp):
        lp.blobs[0].shape.dim[0] = 3
    net, path = edited_weights(tmp, edit)
    net.copy_from(path)


@case(ShapeError, "edited.caffemodel", "layer 'ip'", "the file has 1", "has 2")
def copy_from_blob_count_mismatch(tmp):
    net, path = edited_weights(tmp, lambda lp: lp.blobs.pop())
    net.copy_from(path)


@case(ShapeError, "edited.caffemodel", "layer 'ip' param 0", "holds 5 data values")
def copy_from_blob_with_missing_values(tmp):
    net, path = edited_weights(tmp, lambda lp: lp.blobs[0].data.__delitem__(slice(5, None)))
    net.copy_from(path)


@case(ProtoError, "cut.caffemodel", "truncated", "at byte ")
def truncated_caffemodel(tmp):
    net, path = saved_weights(tmp)
    write(tmp, "cut.caffemodel", path.read_bytes()[:-9])
    net.copy_from(str(tmp / "cut.caffemodel"))


@case(ProtoError, "bad.caffemodel", "cannot decode", "at byte 0", "garbage?")
def corrupt_caffemodel(tmp):
    net, path = saved_weights(tmp)
    data = bytearray(path.read_bytes())
    data[:4] = b"\xff" * 4  # an invalid field tag
    write(tmp, "bad.caffemodel", bytes(data))
    net.copy_from(str(tmp / "bad.caffemodel"))


@case(ProtoError, "blob.caffemodel", "at byte ", ".blobs[0] is not a BlobProto")
def damaged_blob_in_caffemodel(tmp):
    # the weights themselves are damaged (a field tag of wire type 7 inside the first blob):
    # not a fork's field to set aside
    net, path = saved_weights(tmp)
    model = protoio.read_binary(str(path), caffe_pb2.NetParameter())
    blob = [lp for lp in model.layer if lp.name == "ip"][0].blobs[0].SerializeToString()
    data = path.read_bytes()
    at = data.index(blob)
    write(tmp, "blob.caffemodel", data[:at] + b"\x0f" + data[at + 1:])
    net.copy_from(str(tmp / "blob.caffemodel"))


@case(ProtoError, "empty.caffemodel", "file is empty", "use an earlier copy")
def empty_caffemodel(tmp):
    write(tmp, "empty.caffemodel", b"")
    classifier(tmp).copy_from(str(tmp / "empty.caffemodel"))


@case(ProtoError, "missing.caffemodel", "not found")
def missing_caffemodel(tmp):
    classifier(tmp).copy_from(str(tmp / "missing.caffemodel"))


@case(ProtoError, "{tmp}/net.prototxt: this is a text file (a .prototxt net or solver "
      "definition?), not binary weights")
def prototxt_given_as_the_weights(tmp):
    classifier(tmp).copy_from(str(tmp / "net.prototxt"))


@case(ProtoError, "run_iter_2.caffemodel: this is a weights file (.caffemodel), not a solver "
      "state", "--weights")
def weights_given_as_the_snapshot(tmp, monkeypatch):
    solver = trained_snapshot(tmp, monkeypatch)
    solver.restore(str(tmp / "snaps" / "run_iter_2.caffemodel"))


@case(ProtoError, "solver.prototxt: this is a text file", "not a binary solver state")
def solver_prototxt_given_as_the_snapshot(tmp, monkeypatch):
    solver = trained_snapshot(tmp, monkeypatch)
    solver.restore(str(tmp / "solver.prototxt"))


@case(ProtoError, "{tmp}", "is a directory")
def caffemodel_is_a_directory(tmp):
    classifier(tmp).copy_from(str(tmp))


@case(ProtoError, "run_iter_2.solverstate: this is a solver state", "resume training from it "
      "with --snapshot", "run_iter_2.caffemodel")
def solverstate_given_as_weights(tmp, monkeypatch):
    trained_snapshot(tmp, monkeypatch)
    caffe.Net(str(tmp / "net.prototxt"), caffe.TRAIN).copy_from(
        str(tmp / "snaps" / "run_iter_2.solverstate"))


@case(ProtoError, "cut.solverstate", "truncated")
def truncated_solverstate(tmp, monkeypatch):
    solver = trained_snapshot(tmp, monkeypatch)
    write(tmp, "cut.solverstate", (tmp / "snaps" / "run_iter_2.solverstate").read_bytes()[:-5])
    solver.restore(str(tmp / "cut.solverstate"))


@case(ProtoError, "empty.solverstate", "file is empty")
def empty_solverstate(tmp, monkeypatch):
    solver = trained_snapshot(tmp, monkeypatch)
    write(tmp, "empty.solverstate", b"")
    solver.restore(str(tmp / "empty.solverstate"))


@case(CaffeError, "run_iter_2.solverstate", "incorrect length of history blobs",
      "another solver type")
def solverstate_of_another_solver_type(tmp, monkeypatch):
    trained_snapshot(tmp, monkeypatch)
    get_solver(solver_project(tmp, SOLVER + 'type: "Adam"\n')).restore(
        str(tmp / "snaps" / "run_iter_2.solverstate"))


@case(ProtoError, "run_iter_2.solverstate", "run_iter_2.caffemodel",
      "keep the .caffemodel next to its .solverstate")
def solverstate_without_its_weights(tmp, monkeypatch):
    solver = trained_snapshot(tmp, monkeypatch)
    os.remove(tmp / "snaps" / "run_iter_2.caffemodel")
    solver.restore(str(tmp / "snaps" / "run_iter_2.solverstate"))


@case(ProtoError, "bad.caffemodel.h5", "cannot open as HDF5")
def corrupt_hdf5_weights(tmp):
    write(tmp, "bad.caffemodel.h5", b"\x89HDF\r\n\x1a\n" + b"\x00garbage" * 40)
    classifier(tmp).copy_from(str(tmp / "bad.caffemodel.h5"))


@case(ProtoError, "cut.solverstate.h5", "cannot open as HDF5")
def truncated_hdf5_solverstate(tmp, monkeypatch):
    monkeypatch.chdir(tmp)
    solver = get_solver(solver_project(tmp, SOLVER + "snapshot_format: HDF5\n"))
    solver.step(2)
    data = (tmp / "snaps" / "run_iter_2.solverstate.h5").read_bytes()
    write(tmp, "cut.solverstate.h5", data[:len(data) // 2])
    solver.restore(str(tmp / "cut.solverstate.h5"))


# -- data sources
@case(LayerError, "layer 'data' (type Data)", "'{tmp}/nope' not found", "create the database")
def missing_data_source(tmp):
    build(tmp, data_net(str(tmp / "nope")))


@case(LayerError, "layer 'data' (type Data)", "'db' not found", "the path does not exist (a "
      "relative path: from the working directory {tmp}/elsewhere)")
def data_source_relative_to_another_directory(tmp, monkeypatch):
    # Caffe opens a relative source from the working directory: a script run from another
    # folder than the one the path was written for
    lmdb_of(tmp, [datum_bytes()])
    (tmp / "elsewhere").mkdir()
    monkeypatch.chdir(tmp / "elsewhere")
    build(tmp, data_net("db"))


@case(LayerError, "layer 'data' (type Data)", "mean_file '{tmp}/mean.npy' is a NumPy .npy file",
      "BlobProto (.binaryproto")
def numpy_file_as_the_mean_file(tmp):
    np.save(str(tmp / "mean.npy"), np.zeros((3, 4, 4), np.float32))
    build(tmp, data_net(lmdb_of(tmp, [datum_bytes()])).replace(
        "data_param", 'transform_param { mean_file: "%s" } data_param' % (tmp / "mean.npy")))


@case(LayerError, "layer 'data' (type Data)", "source is empty", "name the database")
def empty_data_source_field(tmp):
    build(tmp, data_net(""))


@case(LayerError, "layer 'data' (type Data)", "record 1 (key b'00000001')", "not a Datum")
def corrupt_lmdb_record(tmp):
    build(tmp, data_net(lmdb_of(tmp, [datum_bytes(), b"\xff\xfe garbage \x00" * 3])))


@case(LayerError, "layer 'data' (type Data)", "record 1 (key b'00000001')", "bytes of pixel "
      "data")
def truncated_lmdb_record(tmp):
    whole = caffe_pb2.Datum.FromString(datum_bytes())
    whole.data = whole.data[:-3]
    build(tmp, data_net(lmdb_of(tmp, [datum_bytes(), whole.SerializeToString()])))


@case(LayerError, "layer 'data' (type Data)", "sets resize_param", "SSD fork",
      "only by the AnnotatedData layer")
def ssd_fork_transform_on_a_plain_data_layer(tmp):
    text = data_net(lmdb_of(tmp, [datum_bytes()])).replace(
        "prefetch: 0 }", "prefetch: 0 }\n        transform_param { resize_param { height: 8 "
        "width: 8 } }")
    build(tmp, text)


@case(LayerError, "layer 'data' (type ImageData)", "sets crop_h", "SSD fork")
def ssd_fork_crop_h_on_image_data(tmp):
    build(tmp, 'layer { name: "data" type: "ImageData" top: "data" top: "label"\n'
               '  image_data_param { source: "list.txt" batch_size: 1 }\n'
               '  transform_param { crop_h: 4 crop_w: 4 } }\n')


@case(LayerError, "layer 'data' (type Data)", "looks like a LMDB database", "set backend: LMDB")
def data_source_of_another_backend(tmp):
    build(tmp, data_net(lmdb_of(tmp, [datum_bytes()]), backend="LEVELDB"))


@case(LayerError, "layer 'data' (type Data)", "'{tmp}' is not a LMDB database (no data.mdb")
def data_source_that_is_not_a_database(tmp):
    build(tmp, data_net(str(tmp)))


@case(LayerError, "layer 'data' (type Data)", "is empty: there are no records")
def empty_lmdb(tmp):
    build(tmp, data_net(lmdb_of(tmp, [])))


@case(LayerError, "layer 'data' (type Data)", "batch_size must be positive")
def zero_batch_size(tmp):
    build(tmp, data_net(lmdb_of(tmp, [datum_bytes()]), batch_size=0))


@case(LayerError, "layer 'h' (type HDF5Data)", "list file '{tmp}/list.txt' not found")
def missing_hdf5_list(tmp):
    build(tmp, 'layer { name: "h" type: "HDF5Data" top: "data" '
               'hdf5_data_param { source: "%s" batch_size: 2 } }' % (tmp / "list.txt"))


# -- NVCaffe's types
@case(NetError, "layer 'ip' (type InnerProduct)", "forward_type: INT",
      "use FLOAT, FLOAT16 or DOUBLE")
def nvcaffe_integer_storage_type(tmp):
    build(tmp, CLASSIFIER.replace('type: "InnerProduct"', 'type: "InnerProduct" '
                                  'forward_type: INT'))


@case(CaffeError, "solver.prototxt", "solver_data_type: FLOAT16", "use FLOAT")
def nvcaffe_float16_master_weights(tmp, monkeypatch):
    monkeypatch.chdir(tmp)
    get_solver(solver_project(tmp, SOLVER + "solver_data_type: FLOAT16\n"))


@case(CaffeError, "solver.prototxt:10: larc_policy", 'unknown LARC policy "none"',
      '"scale" and "clip"')
def nvcaffe_unknown_larc_policy(tmp, monkeypatch):
    monkeypatch.chdir(tmp)
    get_solver(solver_project(tmp, SOLVER + 'larc: true\nlarc_policy: "none"\n'))


@case(CaffeError, "solver.prototxt:9: momentum_policy", 'type: "Adam"', 'use type: "SGD"')
def nvcaffe_momentum_policy_of_another_solver(tmp, monkeypatch):
    monkeypatch.chdir(tmp)
    get_solver(solver_project(tmp, SOLVER + 'momentum_policy: "opt"\ntype: "Adam"\n'))


# -- Intel Caffe's solver options
@case(CaffeError, "solver.prototxt:9: local_lr_auto", 'type: "Nesterov"', 'use type: "SGD"')
def intel_lars_of_another_solver(tmp, monkeypatch):
    monkeypatch.chdir(tmp)
    get_solver(solver_project(tmp, SOLVER + 'local_lr_auto: true\ntype: "Nesterov"\n'))


@case(CaffeError, "solver.prototxt:10: stageiter", 'lr_policy "multifixed"',
      "one stageiter per stagelr (2 stagelr, 1 stageiter)")
def intel_multifixed_stages_unpaired(tmp, monkeypatch):
    monkeypatch.chdir(tmp)
    get_solver(solver_project(tmp, SOLVER.replace('"fixed"', '"multifixed"') +
                              "stagelr: 0.01\nstageiter: 100\nstagelr: 0.001\n"))


# -- snapshots
@case(CaffeError, "solver.prototxt", "snapshot prefix 'gone/run'", "Create the folder")
def snapshot_folder_missing(tmp, monkeypatch):
    monkeypatch.chdir(tmp)
    get_solver(solver_project(tmp, SOLVER.replace("snaps/run", "gone/run")))


@case(CaffeError, "solver.prototxt", "cannot write to snapshot prefix 'snaps/run'",
      "Permission denied", "directory exists and is writeable")
def snapshot_folder_not_writable(tmp, monkeypatch):
    from pycaffe_lite.solvers import paths

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), kwargs.get("dir"))
    monkeypatch.chdir(tmp)
    monkeypatch.setattr(paths.tempfile, "mkstemp", refuse)  # as a read-only folder does
    get_solver(solver_project(tmp))


@case(SnapshotError, "Iteration 4", "run_iter_4.caffemodel", "No such file or directory",
      "last complete snapshot", "run_iter_2.solverstate", "--snapshot")
def snapshot_folder_removed_while_training(tmp, monkeypatch):
    solver = trained_snapshot(tmp, monkeypatch)
    for name in os.listdir(tmp / "snaps"):
        os.remove(tmp / "snaps" / name)
    os.rmdir(tmp / "snaps")
    solver.step(2)


@case(SnapshotError, "Iteration 4", "no space left for it", "run_iter_2.solverstate", "is intact")
def disk_full_while_snapshotting(tmp, monkeypatch):
    solver = trained_snapshot(tmp, monkeypatch)

    def no_space(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", no_space)
    solver.step(2)


@pytest.mark.parametrize("make, exc, needles", CASES)
def test_error_catalogue(make, exc, needles, tmp_path, monkeypatch):
    args = (tmp_path, monkeypatch) if make.__code__.co_argcount == 2 else (tmp_path,)
    with pytest.raises(CaffeError) as info:
        make(*args)
    error = info.value
    assert isinstance(error, exc), "%s instead of %s: %s" % (type(error).__name__,
                                                              exc.__name__, error)
    message = str(error)
    for needle in needles:
        assert needle.replace("{tmp}", str(tmp_path)) in message, message


def test_the_catalogue_covers_enough_kinds():
    assert len(CASES) >= 40


# ---- the command line ----------------------------------------------------------------------
def _cli_solver(tmp):
    return solver_project(tmp)


CLI_CASES = [
    ("missing_solver_file", lambda t: ["train", "--solver", "nope.prototxt"],
     ["nope.prototxt: file not found"]),
    ("solver_is_a_directory", lambda t: ["train", "--solver", "snaps"],
     ["snaps: is a directory"]),
    ("weights_is_a_directory", lambda t: ["train", "--solver", "solver.prototxt", "--weights",
                                          "snaps"], ["snaps: is a directory"]),
    ("truncated_snapshot", lambda t: ["train", "--solver", "solver.prototxt", "--snapshot",
                                      "cut.solverstate"], ["cut.solverstate", "truncated"]),
    ("missing_snapshot", lambda t: ["train", "--solver", "solver.prototxt", "--snapshot",
                                    "nope.solverstate"], ["nope.solverstate", "not found"]),
    ("unknown_layer_type", lambda t: ["train", "--solver", "badnet.prototxt"],
     ["layer 'ip'", "unknown layer type 'InnerProdcut'", "did you mean 'InnerProduct'"]),
    ("missing_test_weights", lambda t: ["test", "--model", "net.prototxt", "--weights",
                                        "nope.caffemodel"], ["nope.caffemodel", "not found"]),
    ("missing_snapshot_folder", lambda t: ["train", "--solver", "nofolder.prototxt"],
     ["snapshot prefix", "Create the folder"]),
]


@pytest.mark.parametrize("name, argv, needles", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_exits_with_a_one_line_message(name, argv, needles, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _cli_solver(tmp_path)
    write(tmp_path, "cut.solverstate", b"\x08\x02\x12\x40abc")
    write(tmp_path, "bad.prototxt", TRAIN_NET.replace('"InnerProduct"', '"InnerProdcut"'))
    write(tmp_path, "badnet.prototxt", SOLVER.replace("net.prototxt", "bad.prototxt"))
    write(tmp_path, "nofolder.prototxt", SOLVER.replace("snaps/run", "no/such/folder/run"))
    assert cli.main(argv(tmp_path)) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("pycaffe-lite ")]
    assert len(lines) == 1, err
    assert lines[0].startswith("pycaffe-lite %s: error: " % argv(tmp_path)[0])
    for needle in needles:
        assert needle in lines[0]


def test_cli_turns_an_os_error_into_a_message(monkeypatch, capsys):
    """An OSError escaping a command (a file it cannot write, say) is a message naming the
    file, not a traceback."""
    def fail(args):
        raise PermissionError(errno.EACCES, "Permission denied", "/srv/out/train.log")

    entries = [("train", "train", lambda p: None, fail)]
    monkeypatch.setattr(cli, "all_commands", lambda: entries)
    monkeypatch.setattr(cli, "commands_named", lambda name: entries)
    assert cli.main(["train"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "pycaffe-lite train: error: /srv/out/train.log: Permission denied" in err


def test_cli_end_to_end_in_a_subprocess(tmp_path):
    """The installed entry point: exit code 1, the message on stderr, no traceback."""
    import subprocess
    import sys
    solver_project(tmp_path, SOLVER.replace("net.prototxt", "missing_net.prototxt"))
    result = subprocess.run([sys.executable, "-m", "pycaffe_lite.cli", "train", "--solver",
                             "solver.prototxt"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "pycaffe-lite train: error: solver.prototxt: net file 'missing_net.prototxt' not " \
           "found" in result.stderr
