import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.blob import array_to_blobproto
from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, layer_param, make_layer, random_blobs

TEXT = 'type: "Parameter" parameter_param { shape { dim: 2 dim: 3 } }'


def test_parameter_setup_zero_blob_shared_with_top():
    layer = make_layer(TEXT, dtype=np.float32)
    top = empty_blobs(1, np.float32)
    layer.SetUp([], top)
    assert len(layer.blobs) == 1 and layer.blobs[0].shape == (2, 3)
    assert layer.blobs[0].data.dtype == np.float32 and not layer.blobs[0].data.any()
    layer.Forward([], top)
    assert top[0].shape == (2, 3)
    layer.blobs[0].data[...] = np.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(top[0].data, np.arange(6).reshape(2, 3))
    top[0].diff[...] = 4.0  # a consumer writing the top's gradient writes the param's
    np.testing.assert_array_equal(layer.blobs[0].diff, np.full((2, 3), 4.0))


def test_parameter_gradient_with_stored_values():
    param = layer_param(TEXT)
    values = np.random.default_rng(0).uniform(-1, 1, (2, 3))
    param.blobs.add().CopyFrom(array_to_blobproto(values))
    layer, _, top = check_layer(param, [])
    np.testing.assert_allclose(top[0].data, values.astype(np.float32), rtol=1e-12)


def test_parameter_in_a_net_is_learnable():
    net = caffe.Net("""
        force_backward: true
        layer { name: "p" type: "Parameter" top: "p" parameter_param { shape { dim: 3 } } }
        layer { name: "loss" type: "Reduction" bottom: "p" top: "loss"
                reduction_param { operation: SUMSQ } loss_weight: 1 }
    """, caffe.TRAIN)
    blob = net.params["p"][0]
    assert any(b is blob for b in net.learnable_params)
    blob.data[...] = [1.0, -2.0, 0.5]
    assert net.forward()["loss"] == pytest.approx(5.25)
    net.clear_param_diffs()
    net.backward()
    np.testing.assert_allclose(blob.diff, [2.0, -4.0, 1.0])


def test_parameter_errors():
    with pytest.raises(LayerError, match=r"bad parameter_param.shape \(2, -1\)"):
        make_layer('type: "Parameter" parameter_param { shape { dim: 2 dim: -1 } }').SetUp(
            [], empty_blobs(1))
    with pytest.raises(LayerError, match="takes exactly 0 bottom blobs, got 1"):
        make_layer(TEXT).SetUp(random_blobs([(2, 3)]), empty_blobs(1))
    param = layer_param(TEXT)
    param.blobs.add().CopyFrom(array_to_blobproto(np.zeros(5)))
    with pytest.raises(LayerError, match=r"parameter blob of shape \(5,\) does not fit "
                                         r"parameter_param.shape \(2, 3\)"):
        make_layer(param).SetUp([], empty_blobs(1))
