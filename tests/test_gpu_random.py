"""Random numbers drawn where the data lives (``backend.random_uniform``), on the simulated
device (pycaffe_lite.testing.simdevice; every machine).

In GPU mode Dropout and STOCHASTIC Pooling / SPP draw on the device, from the device
module's generator, and copy nothing host->device in a forward pass. The draws are checked
for what they are used for (the kept fraction, the sampled values, seeding), since they are
not the host's numbers. On the CPU the draws are the host generator's, as before: same seeds,
same masks, same snapshots.
"""

import numpy as np
import pytest

from pycaffe_lite import backend
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.layers.vision.spp_layer import level_geometry
from pycaffe_lite.testing import empty_blobs, make_layer, random_blobs
from pycaffe_lite.testing.simdevice import DeviceArray, simulated_device

SIGMAS = 5  # binomial tolerance of the frequency checks

DROPOUT = 'type: "Dropout" dropout_param { dropout_ratio: 0.3 }'
POOLING = 'type: "Pooling" pooling_param { pool: STOCHASTIC kernel_size: 3 stride: 2 }'
SPP = 'type: "SPP" spp_param { pyramid_height: 3 pool: STOCHASTIC }'  # no padding at 8x8


@pytest.fixture
def gpu():
    """A simulated device, GPU mode; CPU mode again afterwards."""
    with simulated_device() as dev:
        backend.set_mode_gpu()
        try:
            yield dev
        finally:
            backend.set_mode_cpu()


def _setup(text, x, dtype=np.float32):
    layer = make_layer(text, dtype)
    bottom, top = random_blobs([x], dtype=dtype), empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    return layer, bottom, top


def _positive(shape, seed=0):
    """Distinct positive values (a shuffled ramp), so that a value names its position."""
    n = int(np.prod(shape))
    return ((np.random.default_rng(seed).permutation(n) + 1.0).reshape(shape) / n).astype(
        np.float32)


def _within(count, n, p):
    sigma = np.sqrt(n * p * (1 - p))
    assert abs(count - n * p) <= SIGMAS * sigma, (count, n, p)


# ---- no host->device copy ----------------------------------------------------------------------
@pytest.mark.parametrize("text,shape", [(DROPOUT, (4, 3, 5, 6)), (POOLING, (2, 3, 7, 6)),
                                        (SPP, (2, 3, 8, 8))], ids=["Dropout", "Pooling", "SPP"])
def test_train_forward_draws_on_the_device_without_uploads(gpu, text, shape):
    backend.set_random_seed(3)
    layer, bottom, top = _setup(text, _positive(shape))
    bottom[0].read_data()  # the bottom goes up now, the top is allocated there
    layer.Forward(bottom, top)
    top[0].diff[...] = 1.0
    top[0].read_diff()
    before = gpu.counts()
    with gpu.forbid("to_device"):
        layer.Forward(bottom, top)
        layer.Backward(top, [True], bottom)
    assert gpu.counts()["to_device"] == before["to_device"]
    assert isinstance(top[0].read_data(), DeviceArray)


def test_random_uniform_gives_device_arrays_of_the_dtype_in_0_1(gpu):
    backend.set_random_seed(1)
    xp = backend.device_module()
    with gpu.forbid("to_device"):
        for dtype in (np.float32, np.float64):
            u = backend.random_uniform((1000, 100), dtype, xp)
            assert isinstance(u, DeviceArray) and u.dtype == dtype and u.shape == (1000, 100)
            assert bool((u >= 0).all()) and bool((u < 1).all())
            _within(int((u < 0.25).sum()), u.size, 0.25)


def test_random_uniform_accepts_float32_and_float64_only():
    with pytest.raises(CaffeError, match="dtype must be float32 or float64, got float16"):
        backend.random_uniform((2,), np.float16, np)
    with simulated_device() as dev, pytest.raises(TypeError, match="float32 and float64"):
        dev.random.random_sample((2,), np.int32)  # as cupy.random refuses it


# ---- the device draws do their job -------------------------------------------------------------
def test_dropout_on_the_device_keeps_1_minus_ratio_and_backward_uses_the_mask(gpu):
    backend.set_random_seed(7)
    x = np.random.default_rng(0).uniform(0.5, 1.5, (8, 50, 25, 20)).astype(np.float32)
    layer, bottom, top = _setup(DROPOUT, x)
    layer.Forward(bottom, top)
    dy = np.random.default_rng(1).uniform(0.5, 1.5, x.shape).astype(np.float32)
    top[0].diff[...] = dy
    layer.Backward(top, [True], bottom)
    y, dx = top[0].data, bottom[0].diff
    kept = y != 0
    _within(int(kept.sum()), x.size, 1 - 0.3)
    scale = np.float32(1 / (1 - 0.3))
    np.testing.assert_allclose(y[kept], x[kept] * scale, rtol=1e-6)
    np.testing.assert_array_equal(dx != 0, kept)
    np.testing.assert_allclose(dx[kept], dy[kept] * scale, rtol=1e-6)


def _dropout_mask(shape=(6, 40, 50)):
    layer, bottom, top = _setup(DROPOUT, np.ones(shape, np.float32))
    layer.Forward(bottom, top)
    return top[0].data != 0


def test_dropout_masks_on_the_device_follow_the_seed(gpu):
    backend.set_random_seed(5)
    first = _dropout_mask()
    backend.set_random_seed(5)
    np.testing.assert_array_equal(_dropout_mask(), first)
    backend.set_random_seed(6)
    assert not np.array_equal(_dropout_mask(), first)
    # the device's own stream, not the host's numbers uploaded
    assert not np.array_equal(first, np.random.default_rng(5).random(first.shape,
                                                                     dtype=np.float32) >= 0.3)


def test_a_seed_set_before_gpu_mode_or_another_device_module_holds():
    backend.set_random_seed(5)  # CPU mode: the device generator gets the seed before its draw
    with simulated_device():
        backend.set_mode_gpu()
        try:
            first = _dropout_mask()
            backend.set_random_seed(5)
            np.testing.assert_array_equal(_dropout_mask(), first)
        finally:
            backend.set_mode_cpu()
    with simulated_device():  # a fresh device module is seeded too
        backend.set_mode_gpu()
        try:
            np.testing.assert_array_equal(_dropout_mask(), first)
        finally:
            backend.set_mode_cpu()


def test_stochastic_pooling_on_the_device_picks_a_value_of_each_window(gpu):
    backend.set_random_seed(2)
    x = _positive((2, 3, 7, 6))
    layer, bottom, top = _setup(POOLING, x)
    layer.Forward(bottom, top)
    y = top[0].data
    maxima = np.empty_like(y)
    for ph in range(y.shape[2]):
        for pw in range(y.shape[3]):
            window = x[:, :, 2 * ph:2 * ph + 3, 2 * pw:2 * pw + 3].reshape(2, 3, -1)
            assert (window == y[:, :, ph, pw][..., None]).any(axis=-1).all(), (ph, pw)
            maxima[:, :, ph, pw] = window.max(axis=-1)
    assert (y < maxima).any()  # sampled, not the maximum every time


def test_stochastic_pooling_on_the_device_samples_in_proportion_to_the_values(gpu):
    backend.set_random_seed(4)
    x = np.empty((4, 10, 500, 2), np.float32)
    x[..., 0], x[..., 1] = 1.0, 3.0  # 1 x 2 windows: 3 is picked with probability 3/4
    layer, bottom, top = _setup('type: "Pooling" pooling_param { pool: STOCHASTIC kernel_h: 1 '
                                'kernel_w: 2 stride_h: 1 stride_w: 2 }', x)
    layer.Forward(bottom, top)
    y = top[0].data
    assert set(np.unique(y)) <= {1.0, 3.0}
    _within(int((y == 3.0).sum()), y.size, 0.75)
    top[0].diff[...] = 1.0
    layer.Backward(top, [True], bottom)
    dx = bottom[0].diff  # the gradient goes to the picked element
    np.testing.assert_array_equal(dx[..., 1] == 1.0, y[..., 0] == 3.0)
    np.testing.assert_array_equal(dx.sum(axis=-1), 1.0)


def test_stochastic_spp_on_the_device_picks_a_value_of_each_bin(gpu):
    backend.set_random_seed(8)
    x = _positive((2, 3, 8, 8))
    layer, bottom, top = _setup(SPP, x)
    layer.Forward(bottom, top)
    y = top[0].data.reshape(2, -1)
    start = 0
    for level in range(3):
        k, pad = level_geometry(level, 8)
        assert pad == 0
        bins = 2 ** level
        got = y[:, start:start + 3 * bins * bins].reshape(2, 3, bins, bins)
        start += 3 * bins * bins
        windows = x.reshape(2, 3, bins, k, bins, k).transpose(0, 1, 2, 4, 3, 5)
        windows = windows.reshape(2, 3, bins, bins, k * k)
        assert (windows == got[..., None]).any(axis=-1).all(), level


# ---- the CPU path is unchanged -----------------------------------------------------------------
def test_dropout_mask_on_the_cpu_is_the_host_generators_draw():
    shape = (3, 4, 5, 6)
    backend.set_random_seed(13)
    mask = _dropout_mask(shape)
    expected = np.random.default_rng(13).random(shape, dtype=np.float32) >= 0.3
    np.testing.assert_array_equal(mask, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_uniform_on_the_host_continues_the_host_stream(dtype):
    backend.set_random_seed(21)
    reference = np.random.default_rng(21)
    for shape in [(3, 4), (5,)]:
        u = backend.random_uniform(shape, dtype, np)
        assert type(u) is np.ndarray and u.dtype == dtype
        np.testing.assert_array_equal(u, reference.random(shape, dtype=dtype))
    assert backend.get_rng_state() == reference.bit_generator.state
