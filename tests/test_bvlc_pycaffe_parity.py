"""What BVLC's own pycaffe tests and scripts (python/caffe/test/*.py, python/train.py,
python/classify.py, tools/extra/*) lean on without asserting it: the batched calls, the
Net's name maps, the io helpers. Values are worked out by hand from pycaffe.py's and
_caffe.cpp's definitions."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.errors import NetError

# A net fed by a data layer (no inputs): data is all ones (batch 2 x 3), out = data @ W.T with
# W all ones (2 x 3), so out = 3 on every entry and d out / d data = out_diff @ W: each row of
# data's diff is the sum of that row's two out diffs, on all three columns.
DATA_FED = """
force_backward: true
layer { name: "d" type: "DummyData" top: "data"
        dummy_data_param { shape { dim: 2 dim: 3 } data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "out"
        inner_product_param { num_output: 2 bias_term: false
                              weight_filler { type: "constant" value: 1 } } }
"""


def _net(tmp_path, text, phase=caffe.TEST, name="net.prototxt"):
    path = tmp_path / name
    path.write_text(text)
    return caffe.Net(str(path), phase)


def test_forward_backward_all_batches_top_diffs_alone_on_a_data_fed_net(tmp_path):
    net = _net(tmp_path, DATA_FED)
    top_diffs = np.arange(10, dtype=np.float32).reshape(5, 2)  # 5 items: 2 + 2 + 1 (padded)
    outs, diffs = net.forward_backward_all(blobs=["data"], diffs=["data"], out=top_diffs)
    assert outs["out"].shape == (5, 2) and outs["data"].shape == (5, 3)
    np.testing.assert_array_equal(outs["out"], np.full((5, 2), 3.0))
    np.testing.assert_array_equal(outs["data"], np.ones((5, 3)))
    expected = np.repeat(top_diffs.sum(axis=1, keepdims=True), 3, axis=1)  # 1, 5, 9, 13, 17
    np.testing.assert_array_equal(diffs["data"], expected)


def test_forward_all_and_forward_backward_all_without_arrays_are_errors(tmp_path):
    net = _net(tmp_path, DATA_FED)
    with pytest.raises(NetError, match=r"forward_all\(\) needs arrays.*outputs: out"):
        net.forward_all()
    with pytest.raises(NetError, match=r"forward_backward_all\(\) needs arrays"):
        net.forward_backward_all(blobs=["data"])


def test_draw_has_pycaffes_pooling_types_dict_and_lr_mult_helpers():
    from pycaffe_lite import draw
    from pycaffe_lite.proto import caffe_pb2

    # caffe.proto: enum PoolMethod { MAX = 0; AVE = 1; STOCHASTIC = 2; }
    assert draw.get_pooling_types_dict() == {0: "MAX", 1: "AVE", 2: "STOCHASTIC"}
    layer = caffe_pb2.LayerParameter(name="c", type="Convolution")
    assert draw.get_layer_lr_mult(layer) == (1.0, 1.0)      # no param: ParamSpec's default 1
    layer.param.add(lr_mult=0.5)
    assert draw.get_layer_lr_mult(layer) == (0.5, 1.0)
    layer.param.add(lr_mult=2)
    assert draw.get_layer_lr_mult(layer) == (0.5, 2.0)
    layer.param.add(lr_mult=3)
    with pytest.raises(ValueError, match="layer 'c'.*3 param"):
        draw.get_layer_lr_mult(layer)
    with pytest.raises(ValueError, match="layer 'p': Pooling layers have no learning rate"):
        draw.get_layer_lr_mult(caffe_pb2.LayerParameter(name="p", type="Pooling"))


# A solver's log without a test net, in glog's format (tools/extra/parse_log.py's input).
NO_TEST_LOG = """\
I0102 10:00:00.000000  1 solver.cpp:280] Solving tiny
I0102 10:00:01.000000  1 solver.cpp:229] Iteration 0, loss = 2.5
I0102 10:00:01.000100  1 solver.cpp:245]     Train net output #0: loss = 2.5 (* 1 = 2.5 loss)
I0102 10:00:01.000200  1 sgd_solver.cpp:106] Iteration 0, lr = 0.01
I0102 10:00:03.000000  1 solver.cpp:229] Iteration 10, loss = 1.5
I0102 10:00:03.000100  1 solver.cpp:245]     Train net output #0: loss = 1.5 (* 1 = 1.5 loss)
I0102 10:00:03.000200  1 sgd_solver.cpp:106] Iteration 10, lr = 0.01
"""


def test_parse_log_writes_no_table_without_rows_as_caffes_script(tmp_path, capsys):
    from pycaffe_lite.tools_log import parse_log, save_csv_files

    log = tmp_path / "run.log"
    log.write_text(NO_TEST_LOG)
    train, test = parse_log(str(log))  # Seconds: the output line's stamp - "Solving"'s
    assert test == []
    written = save_csv_files(str(log), str(tmp_path), train, test, delimiter=",", verbose=True)
    assert written == (str(tmp_path / "run.log.train"),)
    assert not (tmp_path / "run.log.test").exists()
    assert (tmp_path / "run.log.train").read_text().splitlines() == [
        "NumIters,Seconds,LearningRate,loss", "0,1.0001,0.01,2.5", "10,3.0001,0.01,1.5"]
    out = capsys.readouterr().out.splitlines()
    assert out == ["Wrote %s" % (tmp_path / "run.log.train"),
                   "Not writing %s; no lines to write" % (tmp_path / "run.log.test")]


# CuPy's NCCL binding: get_unique_id() is a tuple of the 128 C ``char`` values of
# ncclUniqueId, and NcclCommunicator(ndev, commId, rank) takes only a tuple, each value
# converted back to a C char (OverflowError outside its range: -128..127 where char is
# signed, as on x86; 0..255 where it is unsigned, as on ARM).
UID_VALUES = tuple(range(-128, -64)) + tuple(range(64))  # 128 values: -128..-65, 0..63


def _cupy_like_nccl(signed_char):
    from helpers import fake_nccl

    low, high = (-128, 127) if signed_char else (0, 255)

    class Communicator(fake_nccl.FakeCommunicator):
        def __init__(self, ndev, comm_id, rank):
            if not isinstance(comm_id, tuple):
                raise TypeError("Argument 'commId' has incorrect type (expected tuple)")
            if any(not low <= v <= high for v in comm_id):
                raise OverflowError("value out of range for char")
            super().__init__(ndev, comm_id, rank)

    ids = UID_VALUES if signed_char else tuple(v & 0xFF for v in UID_VALUES)
    return dict(vars(fake_nccl.nccl), NcclCommunicator=Communicator,
                get_unique_id=lambda: ids), ids


@pytest.mark.parametrize("signed_char", [True, False])
def test_nccl_new_uid_is_bytes_and_a_communicator_takes_it(monkeypatch, signed_char):
    import types

    from helpers import fake_nccl
    from pycaffe_lite import backend
    from pycaffe_lite.parallel.comm import NCCLComm

    fake, ids = _cupy_like_nccl(signed_char)
    monkeypatch.setattr(backend, "nccl", lambda: types.SimpleNamespace(**fake))
    monkeypatch.setattr(backend, "device_module", lambda: fake_nccl.cupy)
    monkeypatch.setitem(fake_nccl.STATE, "hang", False)
    uid = caffe.NCCL.new_uid()
    # pycaffe (python/caffe/test/test_nccl.py): a uid is bytes under Python 3, the 128 bytes
    # of ncclUniqueId: char -128 is byte 0x80, -65 is 0xbf, 5 is 0x05
    assert isinstance(uid, bytes) and len(uid) == 128
    assert uid[0] == 0x80 and uid[63] == 0xBF and uid[69] == 5
    comm = NCCLComm(uid, rank=0, size=1)
    assert comm.comm.uid == ids  # CuPy's communicator got back the values CuPy gave


def test_preprocess_names_the_input_when_the_mean_does_not_fit_the_data():
    t = caffe.io.Transformer({"data": (1, 3, 4, 5)})
    t.set_mean("data", np.array([1.0, 2.0, 3.0]))  # per channel: (3, 1, 1)
    image = np.zeros((4, 5, 3), dtype=np.float32)  # H x W x K, no set_transpose
    # (4, 5, 3) - (3, 1, 1) cannot broadcast (4 against 3)
    from pycaffe_lite.errors import ShapeError
    with pytest.raises(ShapeError, match=r"preprocess 'data': the data is \(4, 5, 3\) after "
                       r"resize, the mean \(3, 1, 1\) \(the input is \(3, 4, 5\)\).*"
                       r"set_transpose\('data', \(2, 0, 1\)\)"):
        t.preprocess("data", image)
    t.set_transpose("data", (2, 0, 1))
    out = t.preprocess("data", image)
    np.testing.assert_array_equal(out[:, 0, 0], [-1.0, -2.0, -3.0])
