"""MXNet's files read without MXNet (every NDArray layout, damaged files), the import_mxnet
command and tools/mxnet2caffe.py, and an imported net fine-tuned by our solver."""

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
from google.protobuf import text_format
from helpers.mxnet import (FIXTURES, array_bytes, assert_matches, files, inputs, ndarray_list,
                           references)

import pycaffe_lite
from pycaffe_lite import mxnet
from pycaffe_lite.proto import protoio
from pycaffe_lite.cli import main
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import caffe_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- the .params format ----------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["v2", "v3", "v1", "legacy"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_every_layout_and_float_type(layout, dtype):
    rng = np.random.default_rng(0)
    arrays = {"arg:w": rng.normal(size=(3, 2, 2, 2)).astype(dtype),
              "aux:m": rng.normal(size=(5,)).astype(dtype)}
    parsed = mxnet.parse_params(ndarray_list(arrays, layout))
    assert list(parsed) == ["arg:w", "aux:m"]
    for key, arr in arrays.items():
        assert parsed[key].dtype == arr.dtype
        np.testing.assert_array_equal(parsed[key], arr)


def test_read_params_splits_args_and_aux(tmp_path):
    path = tmp_path / "m.params"
    path.write_bytes(ndarray_list({"arg:w": np.ones((2, 2), np.float16),
                                   "aux:v": np.arange(3.0), "plain": np.zeros(1, np.float32)}))
    args, aux = mxnet.read_params(str(path))
    assert sorted(args) == ["plain", "w"] and sorted(aux) == ["v"]
    assert args["w"].dtype == np.float32 and aux["v"].tolist() == [0.0, 1.0, 2.0]


def test_a_list_without_keys_is_numbered():
    parsed = mxnet.parse_params(ndarray_list({"a": np.ones(2, np.float32),
                                              "b": np.zeros(1, np.float32)}, keys=False))
    assert list(parsed) == ["0", "1"]


def test_the_real_files_parse_to_their_own_sizes():
    """Every params file MXNet wrote for the references parses to its end (the reader checks
    that nothing follows the last key)."""
    for name in sorted(os.listdir(FIXTURES)):
        if name.endswith(".params"):
            with open(os.path.join(FIXTURES, name), "rb") as f:
                mxnet.parse_params(f.read(), name)


def test_truncated_files_name_the_file_and_offset(tmp_path):
    with open(files("legacy_json")[1], "rb") as f:
        data = f.read()
    path = str(tmp_path / "cut.params")
    for cut in (3, 8, 20, 27, 40, 60, len(data) // 2, len(data) - 1):
        with open(path, "wb") as f:
            f.write(data[:cut])
        with pytest.raises(CaffeError) as info:
            mxnet.read_params(path)
        message = str(info.value)
        assert message.startswith(path + ": byte offset "), message
        offset = int(message.split("byte offset ")[1].split(":")[0])
        assert 0 <= offset <= cut
        assert "ends" in message


def test_corrupt_headers_name_the_offset():
    good = ndarray_list({"arg:w": np.ones(2, np.float32)})
    with pytest.raises(CaffeError, match="f.params: byte offset 0: not an MXNet NDArray file"):
        mxnet.parse_params(b"\x13" + good[1:], "f.params")
    bad_magic = good[:24] + struct.pack("<I", 0x12345678) + good[28:]
    with pytest.raises(CaffeError, match="byte offset 24: array 0 starts with 0x12345678"):
        mxnet.parse_params(bad_magic, "f.params")
    bad_type = good.replace(struct.pack("<ii", 1, 0) + struct.pack("<i", 0),
                            struct.pack("<ii", 1, 0) + struct.pack("<i", 99))
    with pytest.raises(CaffeError, match="byte offset 52: array 0 has type flag 99"):
        mxnet.parse_params(bad_type, "f.params")
    sparse = good[:28] + struct.pack("<i", 1) + good[32:]
    with pytest.raises(CaffeError, match="byte offset 24: array 0 is stored sparse"):
        mxnet.parse_params(sparse, "f.params")
    with pytest.raises(CaffeError, match="byte offset %d: 2 bytes follow" % len(good)):
        mxnet.parse_params(good + b"\0\0", "f.params")


def test_an_empty_array_is_skipped():
    empty = struct.pack("<Iii", 0xF993FAC9, 0, 0)  # V2, dense, ndim 0: nothing follows
    data = (struct.pack("<QQQ", 0x112, 0, 2) + empty + array_bytes(np.ones(1, np.float32)) +
            struct.pack("<Q", 2) + struct.pack("<Q", 5) + b"arg:e" + struct.pack("<Q", 5) +
            b"arg:x")
    assert mxnet.parse_params(data)["arg:e"] is None
    assert mxnet.parse_params(data)["arg:x"].tolist() == [1.0]


# -- the symbol JSON ---------------------------------------------------------------------------
def test_symbol_errors_name_the_file(tmp_path):
    path = tmp_path / "m-symbol.json"
    path.write_text('{"nodes": [}')
    with pytest.raises(CaffeError, match=r"m-symbol.json:1:\d+: not valid JSON"):
        mxnet.read_symbol(str(path))
    path.write_text(json.dumps({"nodes": [{"op": "null", "name": "x", "inputs": []}],
                                "heads": [[3, 0, 0]]}))
    with pytest.raises(CaffeError, match="heads: refers to node 3"):
        mxnet.read_symbol(str(path))
    path.write_text(json.dumps({"arg_nodes": []}))
    with pytest.raises(CaffeError, match="not an MXNet symbol file"):
        mxnet.read_symbol(str(path))


def test_old_param_and_attr_keys_are_read():
    sym = mxnet.read_symbol(files("legacy_json")[0])
    bn = [n for n in sym.nodes if n.name == "bn"][0]
    assert bn.attrs["fix_gamma"] == "True" and bn.attrs["ctx_group"] == "stage1"
    assert len(bn.inputs) == 3  # no moving statistics among the inputs before MXNet 1.0


# -- command line and tool ---------------------------------------------------------------------
def test_import_mxnet_command(tmp_path, capsys):
    symbol, params = files("se_narrow")
    prefix = str(tmp_path / "se")
    assert main(["import_mxnet", "--symbol", symbol, "--params", params, "--output-prefix",
                 prefix, "--input-shape", "data=2,3,9,9"]) == 0
    assert "outputs: senet0_dense0_fwd" in capsys.readouterr().out
    net = pycaffe_lite.Net(prefix + ".prototxt", prefix + ".caffemodel", pycaffe_lite.TEST)
    net.blobs["data"].data[...] = inputs("se_narrow")["data"]
    net.forward()
    assert_matches(net.blobs["senet0_dense0_fwd"].data, references("se_narrow")[0], "se")


def test_import_mxnet_errors_exit_1_on_one_line(tmp_path, capsys):
    symbol, params = files("se_narrow")
    assert main(["import_mxnet", "--symbol", symbol, "--params", params, "--output-prefix",
                 str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "import_mxnet: error:" in err and "'data'" in err
    cut = tmp_path / "cut.params"
    with open(params, "rb") as f:
        cut.write_bytes(f.read()[:100])
    assert main(["import_mxnet", "--symbol", symbol, "--params", str(cut), "--output-prefix",
                 str(tmp_path / "x"), "--input-shape", "data=2,3,9,9"]) == 1
    assert "%s: byte offset" % cut in capsys.readouterr().err


def test_tools_script(tmp_path):
    symbol, params = files("legacy_json")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "mxnet2caffe.py"),
                           "--symbol", symbol, "--params", params, "--output-prefix",
                           str(tmp_path / "m"), "--input-shape", "data=1,2,8,8"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "m.prototxt").exists() and (tmp_path / "m.caffemodel").exists()


# -- fine-tuning ---------------------------------------------------------------------------------
def test_an_imported_net_fine_tunes(tmp_path):
    """The imported squeeze-excitation net, a SoftmaxWithLoss on top, trained by SGD on a
    fixed batch: the loss falls."""
    prototxt, caffemodel, outputs = mxnet.to_caffe(*files("se_narrow"), str(tmp_path / "se"),
                                                   {"data": (2, 3, 9, 9)})
    net = protoio.read_net_param(prototxt)
    label = net.layer.add(name="label", type="Input", top=["label"])
    label.input_param.shape.add().dim.append(2)
    net.layer.add(name="loss", type="SoftmaxWithLoss", bottom=[outputs[0], "label"],
                  top=["loss"])
    solver = caffe_pb2.SolverParameter()
    text_format.Merge('base_lr: 0.05 lr_policy: "fixed" momentum: 0.9 max_iter: 100 '
                      'snapshot_after_train: false', solver)
    solver.net_param.CopyFrom(net)
    sgd = pycaffe_lite.SGDSolver(solver)
    sgd.net.copy_from(caffemodel)
    sgd.net.blobs["data"].data[...] = inputs("se_narrow")["data"]
    sgd.net.blobs["label"].data[...] = [1, 3]
    losses = []
    for _ in range(8):
        sgd.step(1)
        losses.append(float(sgd.net.blobs["loss"].data))
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.parametrize("key, shape, match", [
    ("arg:conv_weight", (4, 3, 3, 3), r"node 'conv' \(op Convolution\).*expected \(4, 2, 3, 3\)"),
    ("arg:fc_weight", (3, 5), r"node 'fc' \(op FullyConnected\).*5 inputs per output; the "
                              r"data gives 64"),
    ("aux:bn_moving_var", (5,), r"node 'bn' \(op BatchNorm\).*\(5,\), expected \(4,\)"),
])
def test_a_parameter_of_the_wrong_shape_names_the_node(tmp_path, key, shape, match):
    symbol, params = files("legacy_json")
    with open(params, "rb") as f:
        arrays = mxnet.parse_params(f.read())
    arrays[key] = np.zeros(shape, np.float32)
    (tmp_path / "m.params").write_bytes(ndarray_list(arrays))
    with pytest.raises(CaffeError, match=match):
        mxnet.convert(symbol, str(tmp_path / "m.params"), {"data": (1, 2, 8, 8)})


def test_the_shape_written_in_the_symbol_file_is_used(tmp_path):
    """A symbol-API file that records the data shape (``__shape__``) needs no input_shapes;
    Gluon's zeros do not count as a shape."""
    symbol, params = files("legacy_json")
    with open(symbol) as f:
        doc = json.load(f)
    doc["nodes"][0]["attrs"] = {"__shape__": "(1, 2, 8, 8)"}
    (tmp_path / "s.json").write_text(json.dumps(doc))
    net, outputs = mxnet.convert(str(tmp_path / "s.json"), params)
    assert list(net.layer[0].input_param.shape[0].dim) == [1, 2, 8, 8] and outputs == ["fc"]
    doc["nodes"][0]["attrs"] = {"__shape__": "(0, 2, 8, 8)"}
    (tmp_path / "s.json").write_text(json.dumps(doc))
    with pytest.raises(CaffeError, match=r"the file gives \(0, 2, 8, 8\)"):
        mxnet.convert(str(tmp_path / "s.json"), params)


def test_damaged_files_give_caffe_errors_only(tmp_path):
    """Random byte changes and cuts in a real params file and symbol file: each either reads
    or is a CaffeError, never another exception."""
    symbol, params = files("legacy_json")
    rng = np.random.default_rng(23)
    with open(params, "rb") as f:
        data = bytearray(f.read())
    for _ in range(300):
        bad = bytearray(data)
        for pos in rng.integers(0, len(bad), rng.integers(1, 4)):
            bad[pos] = int(rng.integers(0, 256))
        if rng.random() < 0.3:
            bad = bad[:int(rng.integers(0, len(bad)))]
        try:
            mxnet.parse_params(bytes(bad), "p.params")
        except CaffeError as exc:
            assert str(exc).startswith("p.params: byte offset ")
    with open(symbol) as f:
        doc = json.load(f)
    keys = ["kernel", "num_filter", "pad", "stride", "pool_type", "num_hidden", "eps"]
    values = ["(0, 0)", "-3", "(1,)", "x", "()", "None", "1e40", "(2, 2, 2)", "0"]
    path = tmp_path / "s.json"
    for _ in range(150):
        bad = json.loads(json.dumps(doc))
        node = bad["nodes"][int(rng.integers(0, len(bad["nodes"])))]
        node.setdefault("param", {})[keys[int(rng.integers(len(keys)))]] = \
            values[int(rng.integers(len(values)))]
        path.write_text(json.dumps(bad))
        try:
            mxnet.convert(str(path), params, {"data": (1, 2, 8, 8)})
        except CaffeError as exc:
            assert "MXNet" in str(exc) or str(path) in str(exc), exc


def test_a_label_path_is_left_out(tmp_path):
    """A training symbol: what only the loss's label reads (an op with no conversion here)
    is not converted, and the label is no input of the deploy net."""
    nodes = [{"op": "null", "name": "data", "inputs": []},
             {"op": "null", "name": "fc_weight", "inputs": []},
             {"op": "FullyConnected", "name": "fc", "attrs": {"num_hidden": "3",
                                                              "no_bias": "True"},
              "inputs": [[0, 0, 0], [1, 0, 0]]},
             {"op": "null", "name": "softmax_label", "inputs": []},
             {"op": "one_hot", "name": "onehot", "attrs": {"depth": "3"},
              "inputs": [[3, 0, 0]]},
             {"op": "SoftmaxOutput", "name": "softmax", "inputs": [[2, 0, 0], [4, 0, 0]]}]
    (tmp_path / "t-symbol.json").write_text(json.dumps(
        {"nodes": nodes, "arg_nodes": [0, 1, 3], "heads": [[5, 0, 0]]}))
    w = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    (tmp_path / "t.params").write_bytes(ndarray_list({"arg:fc_weight": w}))
    net = mxnet.load(str(tmp_path / "t-symbol.json"), str(tmp_path / "t.params"),
                     {"data": (2, 4)})
    assert list(net.blobs)[:1] == ["data"] and "softmax_label" not in net.blobs
    x = np.random.default_rng(1).normal(size=(2, 4)).astype(np.float32)
    net.blobs["data"].data[...] = x
    net.forward()
    z = x.astype(np.float64) @ w.T
    p = np.exp(z - z.max(1, keepdims=True))
    np.testing.assert_allclose(net.blobs["softmax"].data, p / p.sum(1, keepdims=True),
                               rtol=1e-5)


def test_several_input_shapes_after_one_flag(tmp_path, capsys):
    symbol, params = files("arithmetic")
    prefix = str(tmp_path / "a")
    assert main(["import_mxnet", "--symbol", symbol, "--params", params, "--output-prefix",
                 prefix, "--input-shape", "data=2,3,4,5", "other=2,3,4,5"]) == 0
    net = pycaffe_lite.Net(prefix + ".prototxt", prefix + ".caffemodel", pycaffe_lite.TEST)
    assert net.blobs["other"].data.shape == (2, 3, 4, 5)


def _one_op(tmp_path, op, attrs, params=None):
    """A symbol file of one op on ``data`` (and its parameters) and its params file."""
    nodes = [{"op": "null", "name": "data", "inputs": []}]
    for key in params or {}:
        nodes.append({"op": "null", "name": key, "inputs": []})
    nodes.append({"op": op, "name": "node", "attrs": attrs,
                  "inputs": [[i, 0, 0] for i in range(len(nodes))]})
    (tmp_path / "o-symbol.json").write_text(json.dumps(
        {"nodes": nodes, "arg_nodes": list(range(len(nodes) - 1)),
         "heads": [[len(nodes) - 1, 0, 0]]}))
    (tmp_path / "o.params").write_bytes(ndarray_list(
        {"arg:" + k: np.ones(v, np.float32) for k, v in (params or {}).items()}))
    return str(tmp_path / "o-symbol.json"), str(tmp_path / "o.params")


BN = {"g": (2,), "b": (2,), "m": (2,), "v": (2,)}


@pytest.mark.parametrize("op, attrs, params, match", [
    ("Pooling", {"kernel": "(2, 2)", "pool_type": "lp", "p_value": "2"}, None,
     "pool_type lp does not convert"),
    ("Pooling", {"kernel": "(2, 2)", "pooling_convention": "same"}, None,
     "pooling_convention same does not convert"),
    ("Pooling", {"kernel": "(2, 2)", "layout": "NHWC"}, None, "layout NHWC"),
    ("Convolution", {"kernel": "(1, 1)", "num_filter": "2", "layout": "NHWC",
                     "no_bias": "True"}, {"w": (2, 2, 1, 1)}, "layout NHWC"),
    ("Deconvolution", {"kernel": "(3, 3)", "num_filter": "2", "stride": "(2, 2)",
                       "adj": "(1, 1)", "dilate": "(2, 2)"}, {"w": (2, 2, 3, 3)},
     "adj \\[1, 1\\] larger than pad \\[0, 0\\] with dilate"),
    ("BatchNorm", {"output_mean_var": "True"}, BN, "output_mean_var"),
    ("BatchNorm", {"axis": "3"}, BN, "axis=3"),
    ("Dropout", {"mode": "always"}, None, "mode=always"),
    ("mean", {"axis": "(1,)"}, None, "reduction over axes \\[1\\]"),
    ("softmax", {"use_length": "True"}, None, "use_length"),
    ("Activation", {"act_type": "cube"}, None, "act_type cube"),
])
def test_what_does_not_convert_names_the_node(tmp_path, op, attrs, params, match):
    symbol, params_path = _one_op(tmp_path, op, attrs, params)
    with pytest.raises(CaffeError, match="MXNet node 'node' \\(op %s\\): .*%s" % (op, match)):
        mxnet.convert(symbol, params_path, {"data": (1, 2, 5, 5)})
