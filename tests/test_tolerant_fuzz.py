"""Fuzzing the binary readers field by field: real files (a LeNet .caffemodel and the
.solverstate of a short training run, a mean .binaryproto, Datum and AnnotatedDatum records,
and open_nsfw's published .caffemodel where the download cache holds it) with one field, at
any depth, given another wire type, another payload (random bytes, a string, another
message), another number, dropped or doubled. Reading either works or raises our CaffeError,
never another exception; what was read writes back and reads again to the same bytes.

Runs are bounded and reproducible as in tests/test_fuzz.py (``derandomize``; more examples
with PYCAFFE_LITE_FUZZ_SCALE).
"""

import os

import numpy as np
import pytest
from helpers.wire_bytes import varint

import pycaffe_lite as caffe
from pycaffe_lite.data.datum import DataError, parse_datum
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.layers.data.annotated_data_layer import parse_annotated
from pycaffe_lite.proto import caffe_pb2, protoio, tolerant, upgrade
from pycaffe_lite.weights import copy_trained_layers_from_param

pytest.importorskip("hypothesis", reason="hypothesis (the fuzzing) is a test dependency")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCALE = float(os.environ.get("PYCAFFE_LITE_FUZZ_SCALE", "1"))
FUZZ = settings(derandomize=os.environ.get("PYCAFFE_LITE_FUZZ_RANDOM") != "1", database=None,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture],
                print_blob=True)
LENET = os.path.join(HERE, "..", "models", "lenet", "lenet.prototxt")
NSFW = os.path.join(os.environ.get("PYCAFFE_LITE_TEST_CACHE", os.path.join(
    os.path.expanduser("~"), ".cache", "pycaffe-lite-tests")), "open_nsfw",
    "resnet_50_1by2_nsfw.caffemodel")

SOLVER = """
base_lr: 0.01  lr_policy: "fixed"  momentum: 0.9  max_iter: 2  snapshot_prefix: "%s/snap"
random_seed: 1  snapshot_after_train: false
net_param {
  layer { name: "data" type: "DummyData" top: "x" top: "y"
          dummy_data_param { shape { dim: 4 dim: 1 dim: 8 dim: 8 } shape { dim: 4 dim: 3 }
                             data_filler { type: "gaussian" } } }
  layer { name: "conv" type: "Convolution" bottom: "x" top: "c"
          convolution_param { num_output: 2 kernel_size: 3 weight_filler { type: "xavier" } } }
  layer { name: "ip" type: "InnerProduct" bottom: "c" top: "z"
          inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.1 } } }
  layer { name: "loss" type: "EuclideanLoss" bottom: "z" bottom: "y" top: "loss" }
}
"""


def _records():
    datum = caffe.io.array_to_datum(np.arange(12, dtype=np.uint8).reshape(3, 2, 2), label=4)
    anno = caffe_pb2.AnnotatedDatum(type=caffe_pb2.AnnotatedDatum.BBOX)
    anno.datum.CopyFrom(datum)
    group = anno.annotation_group.add(group_label=1)
    for i in range(2):
        box = group.annotation.add(instance_id=i).bbox
        box.xmin, box.ymin, box.xmax, box.ymax = 0.1 * i, 0.2, 0.5, 0.6 + 0.1 * i
    return datum.SerializeToString(), anno.SerializeToString()


@pytest.fixture(scope="module")
def real_files(tmp_path_factory):
    """{name: (bytes, message class, reader)} of files written by the real writers."""
    folder = tmp_path_factory.mktemp("real")
    param = caffe_pb2.SolverParameter()
    protoio.parse_text(SOLVER % folder, param)
    solver = caffe.get_solver(param)
    solver.step(2)
    solver.snapshot()
    lenet = caffe.Net(LENET, caffe.TEST)
    lenet.save(str(folder / "lenet.caffemodel"))
    mean = caffe.io.array_to_blobproto(np.linspace(0, 255, 12).reshape(1, 3, 2, 2))
    datum, anno = _records()
    files = {
        "caffemodel": ((folder / "lenet.caffemodel").read_bytes(), caffe_pb2.NetParameter),
        "solverstate": ((folder / "snap_iter_2.solverstate").read_bytes(),
                        caffe_pb2.SolverState),
        "binaryproto": (mean.SerializeToString(), caffe_pb2.BlobProto),
        "datum": (datum, caffe_pb2.Datum),
        "annotated": (anno, caffe_pb2.AnnotatedDatum),
    }
    return files


# ---- a file as a tree of fields ------------------------------------------------------------
def tree(data, descriptor):
    """[(number, wire, value)]: value is a list (a message this schema declares there, whose
    bytes walk) or the raw bytes after the key."""
    nodes = []
    for number, wire, key_at, start, end in tolerant.walk(data):
        field = descriptor.fields_by_number.get(number)
        raw = data[start:end]
        if field is not None and field.type == field.TYPE_MESSAGE and wire == 2:
            _, body = tolerant._varint(data, start, 0)
            payload = data[body:end]
            try:
                nodes.append([number, wire, tree(payload, field.message_type)])
                continue
            except tolerant.Broken:
                pass
        nodes.append([number, wire, raw])
    return nodes


def encode(nodes):
    out = []
    for number, wire, value in nodes:
        if isinstance(value, list):
            body = encode(value)
            value = varint(len(body)) + body
        out.append(varint(number << 3 | wire) + value)
    return b"".join(out)


def every_node(nodes, found=None):
    found = [] if found is None else found
    for node in nodes:
        found.append((nodes, node))
        if isinstance(node[2], list):
            every_node(node[2], found)
    return found


ANOTHER_MESSAGE = caffe_pb2.PSROIPoolingParameter(spatial_scale=0.0625, output_dim=21,
                                                  group_size=7).SerializeToString()


@st.composite
def mutated(draw, data, descriptor):
    nodes = tree(data, descriptor)
    for _ in range(draw(st.integers(1, 3))):
        places = every_node(nodes)
        if not places:  # a small message whose every field was dropped
            break
        parent, node = places[draw(st.integers(0, len(places) - 1))]
        op = draw(st.sampled_from(["wire", "payload", "string", "message", "number", "drop",
                                   "double"]))
        if op == "wire":
            node[1] = draw(st.sampled_from([0, 1, 2, 5, 3, 6]))
            if isinstance(node[2], list):
                node[2] = varint(len(encode(node[2]))) + encode(node[2])
        elif op in ("payload", "string", "message"):
            body = {"payload": lambda: draw(st.binary(max_size=24)),
                    "string": lambda: b"com.yahoo.ml.caffe.ImageDataFrame",
                    "message": lambda: ANOTHER_MESSAGE}[op]()
            node[1], node[2] = 2, varint(len(body)) + body
        elif op == "number":
            node[0] = draw(st.sampled_from([1, 2, 5, 7, 100, 119, 149, 10001, 536870911,
                                            draw(st.integers(1, 1 << 20))]))
        elif op == "drop":
            parent.remove(node)
        else:
            parent.append(list(node))
    return encode(nodes)


def load(name, data, cls):
    """Read ``data`` as the file's readers do. A CaffeError is an accepted outcome."""
    if name == "datum":
        return parse_datum(data, "record 0")
    if name == "annotated":
        return parse_annotated(data, "record 0")
    return protoio.parse_binary(data, cls(), name)


def check(name, data, cls, net=None):
    """Whether ``data`` loads (False: our error); what loads writes back and reads again.
    With ``net``, the weights read are copied into it too, as ``Net.copy_from`` does."""
    try:
        message = load(name, data, cls)
        if net is not None:
            upgraded = cls()
            upgraded.CopyFrom(message)
            upgrade.upgrade_net_as_needed(upgraded, name)
            copy_trained_layers_from_param(net, upgraded, name)
    except (CaffeError, DataError):
        return False
    written = tolerant.serialize(message)
    again = load(name, written, cls)
    assert tolerant.serialize(again) == written
    return True


EXAMPLES = int(250 * SCALE)


@pytest.mark.parametrize("name", ["caffemodel", "solverstate", "binaryproto", "datum",
                                  "annotated"])
def test_mutated_fields_load_or_raise_our_error(real_files, name):
    data, cls = real_files[name]
    net = caffe.Net(LENET, caffe.TEST) if name == "caffemodel" else None
    assert check(name, data, cls, net)  # the real file itself loads
    outcomes = []

    @settings(FUZZ, max_examples=EXAMPLES)
    @given(st.data())
    def run(draw):
        outcomes.append(check(name, draw.draw(mutated(data, cls.DESCRIPTOR)), cls, net))

    run()
    assert len(outcomes) >= EXAMPLES // 2 and any(outcomes)


def test_mutated_fields_of_a_published_caffemodel(real_files):
    if not os.path.exists(NSFW):
        pytest.skip("open_nsfw is not in the download cache (tests/test_published_models.py "
                    "fetches it): %s" % NSFW)
    with open(NSFW, "rb") as f:
        data = f.read()
    nodes = tree(data, caffe_pb2.NetParameter.DESCRIPTOR)
    layers = [encode([n]) for n in nodes]
    head = b"".join(layers[:12])  # the data layer and the first blocks, blobs included
    outcomes = []

    @settings(FUZZ, max_examples=int(40 * SCALE))
    @given(st.data())
    def run(draw):
        outcomes.append(check("caffemodel", draw.draw(mutated(head, caffe_pb2.NetParameter
                                                              .DESCRIPTOR)),
                              caffe_pb2.NetParameter))

    run()
    assert any(outcomes)
