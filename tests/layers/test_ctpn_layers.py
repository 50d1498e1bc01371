"""CTPN's Lstm, Reverse and Transpose layers: hand computations and numerical gradients."""

import numpy as np

from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

LSTM = ('type: "Lstm" lstm_param { num_output: 3 weight_filler { type: "uniform" min: -0.5 '
        'max: 0.5 } bias_filler { type: "uniform" min: -0.3 max: 0.3 } }')


def sig(v):
    return 1 / (1 + np.exp(-v))


def lstm_reference(x, w_x, w_h, b, cont, h, c):
    """The fork's recurrence written step by step, one sequence at a time."""
    t_len, n = x.shape[:2]
    hdim = w_h.shape[1]
    out = np.zeros((t_len, n, hdim))
    for s in range(n):
        hp, cp = h[s].copy(), c[s].copy()
        for t in range(t_len):
            z = w_x @ x[t, s].ravel() + b
            if cont[t, s]:
                z = z + w_h @ hp
            i, f, o, g = sig(z[:hdim]), sig(z[hdim:2 * hdim]), sig(z[2 * hdim:3 * hdim]), \
                np.tanh(z[3 * hdim:])
            if not cont[t, s]:
                f = 0 * f
            cp = f * cp + i * g
            hp = o * np.tanh(cp)
            out[t, s] = hp
    return out


def test_lstm_against_the_recurrence_and_gradient():
    layer, bottom, top = check_layer(LSTM, [(4, 2, 2, 1)], reshape_batch=False)
    w_x, w_h, b = (blob.data for blob in layer.blobs)
    assert w_x.shape == (12, 2) and w_h.shape == (12, 3) and b.shape == (12,)
    cont = np.arange(4)[:, None].repeat(2, axis=1) > 0
    zero = np.zeros((2, 3))
    np.testing.assert_allclose(top[0].data, lstm_reference(bottom[0].data, w_x, w_h, b, cont,
                                                           zero, zero), rtol=1e-12)


def test_lstm_clip_gradient():
    # clip 0 at step 0: no state carried between the checker's passes
    x, clip = random_blobs([(3, 2, 2), np.array([[0, 0], [1, 0], [0, 1]], np.float64)])
    check_layer(LSTM, [x, clip], check_bottom=[0], reshape_batch=False)


def test_lstm_with_clip_carries_the_state():
    x, clip = random_blobs([(3, 2, 2), np.array([[1, 0], [1, 1], [0, 1]], np.float64)])
    layer, top = make_layer(LSTM), empty_blobs(1)
    layer.SetUp([x, clip], top)
    layer.Forward([x, clip], top)
    w_x, w_h, b = (blob.data for blob in layer.blobs)
    # a second pass continues from the first pass's last state where clip[0] is 1
    first = top[0].data.copy()
    h_last = first[-1]
    c_prev = np.zeros((2, 3))  # recompute the first pass's cell state
    cont = clip.data != 0
    out = lstm_reference(x.data, w_x, w_h, b, cont, np.zeros((2, 3)), c_prev)
    np.testing.assert_allclose(first, out, rtol=1e-12)
    layer2 = make_layer(layer.to_proto())
    top2 = empty_blobs(1)
    layer2.SetUp([x, clip], top2)
    layer2.Forward([x, clip], top2)
    c_last = _cell_after(x.data, w_x, w_h, b, cont)
    layer2.Forward([x, clip], top2)
    np.testing.assert_allclose(top2[0].data, lstm_reference(x.data, w_x, w_h, b, cont, h_last,
                                                            c_last), rtol=1e-12)


def _cell_after(x, w_x, w_h, b, cont):
    hdim = w_h.shape[1]
    c_out = np.zeros((x.shape[1], hdim))
    for s in range(x.shape[1]):
        hp, cp = np.zeros(hdim), np.zeros(hdim)
        for t in range(x.shape[0]):
            z = w_x @ x[t, s] + b + (w_h @ hp if cont[t, s] else 0)
            i, f, o, g = (sig(z[:hdim]), sig(z[hdim:2 * hdim]) * bool(cont[t, s]),
                          sig(z[2 * hdim:3 * hdim]), np.tanh(z[3 * hdim:]))
            cp = f * cp + i * g
            hp = o * np.tanh(cp)
        c_out[s] = cp
    return c_out


def test_reverse_and_its_gradient():
    layer, bottom, top = check_layer('type: "Reverse" reverse_param { axis: 1 }', [(2, 3, 4)])
    np.testing.assert_array_equal(top[0].data, bottom[0].data[:, ::-1])


def test_transpose_and_its_gradient():
    text = 'type: "Transpose" transpose_param { dim: 3 dim: 0 dim: 2 dim: 1 }'
    layer, bottom, top = check_layer(text, [(2, 3, 4, 5)], reshape_batch=False)
    assert top[0].shape == (5, 2, 4, 3)
    np.testing.assert_array_equal(top[0].data[4, 1, 2, 0], bottom[0].data[1, 0, 2, 4])
    np.testing.assert_array_equal(top[0].data, bottom[0].data.transpose(3, 0, 2, 1))


CTPN_PROPOSAL = """
name: "ctpn_head"
input: "scores" input_shape { dim: 1 dim: 20 dim: 3 dim: 4 }
input: "deltas" input_shape { dim: 1 dim: 20 dim: 3 dim: 4 }
input: "im_info" input_shape { dim: 1 dim: 3 }
layer { name: "proposal" type: "Python" bottom: "scores" bottom: "deltas" bottom: "im_info"
        top: "rois" top: "scores_out"
        python_param { module: "layers.text_proposal_layer" layer: "ProposalLayer"
                       param_str: "'feat_stride': 16" } }
"""


def test_ctpn_text_proposals_built_in(tmp_path):
    import pycaffe_lite as caffe

    path = tmp_path / "ctpn.prototxt"
    path.write_text(CTPN_PROPOSAL)
    net = caffe.Net(str(path), caffe.TEST)
    rng = np.random.default_rng(0)
    scores = rng.uniform(0, 1, (1, 20, 3, 4)).astype(np.float32)
    deltas = rng.normal(0, 0.2, (1, 20, 3, 4)).astype(np.float32)
    info = np.array([[40, 60, 1]], np.float32)
    out = net.forward(scores=scores, deltas=deltas, im_info=info)
    # CTPN's code: int32 anchors around (7.5, 7.5), 16 wide, ten heights; per cell, per anchor
    base = np.zeros((10, 4), np.int32)
    for k, h in enumerate([11, 16, 23, 33, 48, 68, 97, 139, 198, 283]):
        base[k] = [7.5 - 8, 7.5 - h / 2, 7.5 + 8, 7.5 + h / 2]
    rows, kept = [], []
    for y in range(3):
        for x in range(4):
            for k in range(10):
                a = base[k] + np.array([x, y, x, y]) * 16
                dy, dh = deltas[0, 2 * k:2 * k + 2, y, x]
                ah = a[3] - a[1] + 1.0
                h = np.exp(dh) * ah
                top = dy * ah + (a[1] + a[3]) / 2.0 - h / 2
                box = [a[0], top, a[2], top + h]
                rows.append([min(max(box[0], 0), 59), min(max(box[1], 0), 39),
                             min(max(box[2], 0), 59), min(max(box[3], 0), 39)])
                kept.append(scores[0, 10 + k, y, x])
    np.testing.assert_allclose(out["rois"], rows, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(out["scores_out"].ravel(), kept)
