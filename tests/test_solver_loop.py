"""The training loop: test nets, display and loss smoothing, callbacks, debug info, requested
actions, net construction from files and states, path resolution, reproducibility."""

import os
import re

import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.signals import SolverAction
from pycaffe_lite.solvers import SGDSolver, get_solver
from helpers.solver import batches, feed, grads, params_of, solver_param, tiny_net_text

FIXED = 'base_lr: 0.1 lr_policy: "fixed" momentum: 0.5 '


def logged_values(text, pattern):
    return [float(v) for v in re.findall(pattern, text)]


def test_test_nets_score_with_the_train_weights(caplog):
    caplog.set_level("INFO", "pycaffe_lite")
    solver = SGDSolver(solver_param(FIXED + "test_iter: 3 test_interval: 2 max_iter: 4 "
                                    "test_compute_loss: true"))
    assert len(solver.test_nets) == 1
    test_net = solver.test_nets[0]
    assert test_net.phase == caffe_pb2.TEST
    train_data, test_data = batches(4, seed=1), batches(3, seed=2)
    feed(solver.net, train_data)
    feed(test_net, test_data)
    # the test net shares the train net's weights (same storage)
    assert np.shares_memory(test_net.params["ip"][0].data, solver.net.params["ip"][0].data)
    W0, b0 = params_of(solver)
    solver.step(1)
    want = np.mean([np.float32(grads(W0, b0, x, y)[0]) for x, y in test_data])
    assert solver.test_scores[0] == [("loss", pytest.approx(want, rel=1e-5))]
    assert "Iteration 0, Testing net (#0)" in caplog.text
    assert "    Test net output #0: loss = %g (* 1 = %g loss)" % (
        solver.test_scores[0][0][1], solver.test_scores[0][0][1]) in caplog.text
    assert "Test loss: " in caplog.text
    solver.step(1)
    assert caplog.text.count("Testing net (#0)") == 1  # next test at iteration 2
    W2, b2 = params_of(solver)
    solver.step(1)
    want = np.mean([grads(W2, b2, x, y)[0] for x, y in test_data])
    assert solver.test_scores[0][0][1] == pytest.approx(want, rel=1e-5)
    assert "Iteration 2, Testing net (#0)" in caplog.text


def test_test_initialization_false_skips_the_first_test(caplog):
    caplog.set_level("INFO", "pycaffe_lite")
    solver = SGDSolver(solver_param(FIXED + "test_iter: 1 test_interval: 2 "
                                    "test_initialization: false"))
    solver.step(3)
    assert "Iteration 0, Testing" not in caplog.text
    assert "Iteration 2, Testing net (#0)" in caplog.text


@pytest.mark.parametrize("n", [0, -2])
def test_test_iter_zero_runs_no_test_batch(caplog, n):
    # Caffe's Test loops test_iter times: none here, and no output line (a way to switch
    # testing off); training goes on as without a test net
    caplog.set_level("INFO", "pycaffe_lite")
    solver = SGDSolver(solver_param(FIXED + "test_iter: %d test_interval: 1 max_iter: 3 "
                                    "test_compute_loss: true" % n))
    feed(solver.net, batches(3, seed=1))
    forwards = []
    solver.test_nets[0].forward_from_to = lambda *a, **k: forwards.append(a)
    W0, b0 = params_of(solver)
    solver.step(1)
    assert forwards == [] and solver.test_scores == [[]]
    assert "Iteration 0, Testing net (#0)" in caplog.text
    assert "Test net output" not in caplog.text and "Test loss" not in caplog.text
    x, y = batches(3, seed=1)[0]
    dW = grads(W0, b0, x, y)[1]
    assert params_of(solver)[0] == pytest.approx(W0 - 0.1 * dW, rel=1e-5, abs=1e-7)


def test_display_and_average_loss(caplog):
    caplog.set_level("INFO", "pycaffe_lite")
    solver = SGDSolver(solver_param(FIXED + "display: 1 average_loss: 3"))
    feed(solver.net, batches(7, seed=4))
    losses = []
    solver.add_callback(lambda: None,
                        lambda: losses.append(float(solver.net.blobs["loss"].data)))
    solver.step(6)
    shown = logged_values(caplog.text, r"Iteration \d+, loss = ([-\d.e+]+)")
    want = [np.mean(losses[max(0, k - 2):k + 1]) for k in range(6)]
    np.testing.assert_allclose(shown, want, rtol=1e-5)
    outputs = logged_values(caplog.text, r"Train net output #0: loss = ([-\d.e+]+) \(\* 1 = ")
    np.testing.assert_allclose(outputs, losses, rtol=1e-5)


def test_callbacks_run_before_forward_and_before_the_update():
    solver = SGDSolver(solver_param(FIXED))
    feed(solver.net, batches(2))
    events = []
    W = solver.net.params["ip"][0]

    def on_start():
        events.append(("start", solver.iter, float(np.abs(W.diff).sum()), W.data.copy()))

    def on_gradients():
        events.append(("grads", solver.iter, float(np.abs(W.diff).sum()), W.data.copy()))

    solver.add_callback(on_start, on_gradients)
    solver.step(2)
    assert [e[:2] for e in events] == [("start", 0), ("grads", 0), ("start", 1), ("grads", 1)]
    assert events[0][2] == 0 and events[1][2] > 0           # diffs cleared, then computed
    np.testing.assert_array_equal(events[0][3], events[1][3])  # no update before on_gradients
    assert not np.array_equal(events[1][3], events[2][3])    # the update happened after it


def test_debug_info_lines(caplog):
    caplog.set_level("INFO", "pycaffe_lite")
    solver = SGDSolver(solver_param(FIXED + "display: 1 debug_info: true"))
    (x, y), = batches(1, seed=5)
    feed(solver.net, [(x, y)])
    W0, b0 = params_of(solver)
    solver.step(1)
    text = caplog.text
    z = x.astype(np.float64) @ W0.T + b0
    top = logged_values(text, r"\[Forward\] Layer ip, top blob z data: ([-\d.e+]+)")
    assert top == [pytest.approx(np.abs(z).mean(), rel=1e-5)]
    assert "[Forward] Layer ip, param blob 0 data:" in text
    assert "[Backward] Layer loss, bottom blob z diff:" in text
    assert "[Backward] Layer ip, param blob 0 diff:" in text
    assert "[Backward] Layer ip, bottom blob x diff" not in text  # x needs no gradient
    assert "[Backward] All net params (data, diff): L1 norm = (" in text
    assert "[Update] Layer ip, param 0 data:" in text


def test_debug_info_lines_of_a_test_net(caplog):
    """With debug_info the test net runs layer by layer too, and its loss is the same."""
    caplog.set_level("INFO", "pycaffe_lite")
    solver = SGDSolver(solver_param(FIXED + "test_iter: 2 test_interval: 1 max_iter: 1 "
                                    "test_compute_loss: true debug_info: true"))
    test_data = batches(2, seed=7)
    feed(solver.net, batches(1, seed=6))
    feed(solver.test_nets[0], test_data)
    W0, b0 = params_of(solver)
    solver.step(1)
    want = np.mean([np.float32(grads(W0, b0, x, y)[0]) for x, y in test_data])
    assert solver.test_scores[0] == [("loss", pytest.approx(want, rel=1e-5))]
    text = caplog.text
    testing = text[text.index("Testing net (#0)"):]
    z = test_data[0][0].astype(np.float64) @ W0.T + b0
    top = logged_values(testing, r"\[Forward\] Layer ip, top blob z data: ([-\d.e+]+)")
    assert top[0] == pytest.approx(np.abs(z).mean(), rel=1e-5)


def test_requested_stop_ends_training_and_snapshots(tmp_path, caplog):
    caplog.set_level("INFO", "pycaffe_lite")
    param = solver_param(FIXED + "max_iter: 100 snapshot_after_train: true "
                         'snapshot_prefix: "%s"' % (tmp_path / "run"))
    solver = SGDSolver(param)
    requests = iter([SolverAction.NONE, SolverAction.SNAPSHOT, SolverAction.STOP])
    solver.set_action_function(lambda: next(requests, SolverAction.NONE))
    solver.solve()
    assert solver.iter == 3
    assert "Optimization stopped early." in caplog.text
    assert sorted(os.listdir(tmp_path)) == ["run_iter_2.caffemodel", "run_iter_2.solverstate",
                                            "run_iter_3.caffemodel", "run_iter_3.solverstate"]


def test_solve_final_display_test_and_snapshot(tmp_path, caplog):
    caplog.set_level("INFO", "pycaffe_lite")
    param = solver_param(FIXED + "max_iter: 4 display: 2 test_iter: 1 test_interval: 2 "
                         'snapshot_after_train: true snapshot_prefix: "%s"' % (tmp_path / "s"))
    solver = SGDSolver(param)
    solver.solve()
    text = caplog.text
    assert "Solving tiny" in text and "Learning Rate Policy: fixed" in text
    assert "Iteration 4, loss = " in text
    assert "Iteration 4, Testing net (#0)" in text
    assert text.index("Snapshotting to binary proto file %s" % (tmp_path / "s_iter_4.caffemodel")) \
        < text.index("Optimization Done.")
    assert (tmp_path / "s_iter_4.solverstate").exists()


def test_random_seed_makes_runs_reproducible():
    def run(seed):
        solver = SGDSolver(solver_param(FIXED + "random_seed: %d" % seed))
        feed(solver.net, batches(3))
        w0 = params_of(solver)[0]
        solver.step(3)
        return w0, params_of(solver)[0]

    a0, a3 = run(5)
    b0, b3 = run(5)
    c0, _ = run(6)
    np.testing.assert_array_equal(a0, b0)
    np.testing.assert_array_equal(a3, b3)
    assert not np.array_equal(a0, c0)


NET_WITH_STAGES = tiny_net_text() + """
layer { name: "extra" type: "EuclideanLoss" bottom: "z" bottom: "y" top: "extra"
        include { stage: "deep" } }
layer { name: "test_only" type: "EuclideanLoss" bottom: "z" bottom: "y" top: "t"
        include { phase: TEST } }
"""


def test_train_state_and_test_state_select_layers():
    param = solver_param(FIXED + 'test_iter: 1 test_iter: 1 test_interval: 10 '
                         'train_state { stage: "deep" } '
                         'test_state { stage: "deep" } test_state { }', NET_WITH_STAGES)
    solver = SGDSolver(param)
    assert "extra" in solver.net.layer_names and "test_only" not in solver.net.layer_names
    assert solver.net.phase == caffe_pb2.TRAIN
    first, second = solver.test_nets
    assert "extra" in first.layer_names and "test_only" in first.layer_names
    assert "extra" not in second.layer_names and "test_only" in second.layer_names


def test_train_net_and_test_net_params():
    param = caffe_pb2.SolverParameter()
    text_format.Merge(FIXED + "test_iter: 2 test_interval: 5 snapshot_after_train: false",
                      param)
    text_format.Merge(tiny_net_text(), param.train_net_param)
    text_format.Merge(tiny_net_text(lr_w=0), param.test_net_param.add())
    solver = SGDSolver(param)
    assert len(solver.test_nets) == 1 and solver.test_nets[0].phase == caffe_pb2.TEST


@pytest.mark.parametrize("text,message", [
    ("", "must specify a train net"),
    ("test_iter: 1", "test_interval is 0"),
    ("test_iter: 1 test_interval: 5 test_state { } test_state { }",
     "test_state must be unspecified or specified once per test net"),
    ("average_loss: 0", "average_loss should be >= 1"),
])
def test_bad_solver_settings(text, message):
    param = solver_param(FIXED + text)
    if message.startswith("must specify"):
        param.ClearField("net_param")
    with pytest.raises(CaffeError, match=message):
        SGDSolver(param)


def _write_files(folder, solver_text, net_name="net.prototxt"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / net_name).write_text(tiny_net_text())
    (folder / "solver.prototxt").write_text(solver_text)
    return folder / "solver.prototxt"


def test_paths_resolve_from_the_working_directory_first(tmp_path, monkeypatch):
    sub = tmp_path / "proj" / "sub"
    solver_file = _write_files(sub, FIXED + 'net: "proj/sub/net.prototxt" '
                               'snapshot: 5 snapshot_prefix: "proj/sub/snap"')
    monkeypatch.chdir(tmp_path)
    solver = get_solver(str(solver_file))
    assert solver.snapshot_prefix == "proj/sub/snap"


def test_paths_fall_back_to_the_solver_folder(tmp_path, monkeypatch, caplog):
    caplog.set_level("INFO", "pycaffe_lite")
    sub = tmp_path / "proj" / "sub"
    solver_file = _write_files(sub, FIXED + 'net: "net.prototxt" snapshot: 5 '
                               'snapshot_prefix: "snaps/run"')
    (sub / "snaps").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    solver = get_solver(str(solver_file))
    assert "net 'net.prototxt' resolved to %s" % (sub / "net.prototxt") in caplog.text
    assert solver.snapshot_prefix == str(sub / "snaps" / "run")
    solver.step(1)
    solver.snapshot()
    assert (sub / "snaps" / "run_iter_1.caffemodel").exists()


def test_missing_net_names_every_place_looked(tmp_path, monkeypatch):
    solver_file = _write_files(tmp_path / "a", FIXED + 'net: "nowhere.prototxt"')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CaffeError) as err:
        get_solver(str(solver_file))
    msg = str(err.value)
    assert "net file 'nowhere.prototxt' not found" in msg
    assert str(tmp_path) in msg and str(tmp_path / "a") in msg
    assert str(solver_file) in msg


def test_snapshot_prefix_folder_must_exist(tmp_path, monkeypatch):
    solver_file = _write_files(tmp_path, FIXED + 'net: "net.prototxt" snapshot: 10 '
                               'snapshot_prefix: "no/such/dir/run"')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CaffeError, match="cannot write to snapshot prefix 'no/such/dir/run'"):
        get_solver(str(solver_file))


def test_solve_refuses_a_missing_final_snapshot_folder_before_training(tmp_path, monkeypatch):
    """snapshot: 0 with snapshot_after_train (the default): the only snapshot is written after
    max_iter; a prefix whose folder is missing stops solve() at iteration 0, not at the end
    (where the trained weights would be lost)."""
    solver_file = _write_files(tmp_path, FIXED + 'net: "net.prototxt" max_iter: 3 '
                               'snapshot_prefix: "no/such/dir/run"')
    monkeypatch.chdir(tmp_path)
    solver = get_solver(str(solver_file))  # step() alone never needs the folder
    with pytest.raises(CaffeError, match="cannot write to snapshot prefix 'no/such/dir/run'"):
        solver.solve()
    assert solver.iter == 0
    solver.step(2)
    assert solver.iter == 2
    solver.param.snapshot_after_train = False
    solver.solve()
    assert solver.iter == 3


def test_snapshot_prefix_defaults_follow_caffe(tmp_path, monkeypatch):
    solver_file = _write_files(tmp_path, FIXED + 'net: "net.prototxt"')
    monkeypatch.chdir(tmp_path)
    assert get_solver("solver.prototxt").snapshot_prefix == "solver"
    (tmp_path / "snaps").mkdir()
    solver_file.write_text(FIXED + 'net: "net.prototxt" snapshot_prefix: "snaps"')
    assert get_solver("solver.prototxt").snapshot_prefix == os.path.join("snaps", "solver")


def test_data_sources_resolve_relative_to_the_solver_folders(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "models" / "m" / "db").mkdir(parents=True)
    net = tiny_net_text() + """
layer { name: "d" type: "Silence" bottom: "z" transform_param { mean_file: "models/m/db" } }
"""
    (root / "models" / "m" / "net.prototxt").write_text(net)
    (root / "models" / "m" / "solver.prototxt").write_text(
        FIXED + 'net: "models/m/net.prototxt" snapshot_after_train: false')
    monkeypatch.chdir(tmp_path)
    solver = get_solver(str(root / "models" / "m" / "solver.prototxt"))
    layer = solver.net.layer_dict["d"]
    assert layer.layer_param.transform_param.mean_file == str(root / "models" / "m" / "db")


def test_train_net_and_test_net_files(tmp_path, monkeypatch):
    (tmp_path / "train.prototxt").write_text(tiny_net_text())
    (tmp_path / "test.prototxt").write_text(tiny_net_text().replace('name: "tiny"',
                                                                    'name: "tiny_test"'))
    (tmp_path / "s.prototxt").write_text(
        FIXED + 'train_net: "train.prototxt" test_net: "test.prototxt" test_iter: 1 '
        "test_interval: 1 snapshot_after_train: false")
    monkeypatch.chdir(tmp_path)
    solver = get_solver("s.prototxt")
    assert solver.net.name == "tiny" and solver.net.phase == caffe_pb2.TRAIN
    assert [n.name for n in solver.test_nets] == ["tiny_test"]
    assert solver.test_nets[0].phase == caffe_pb2.TEST
    both = caffe_pb2.SolverParameter(train_net="train.prototxt", net="train.prototxt",
                                     base_lr=0.1, lr_policy="fixed")
    with pytest.raises(CaffeError, match="must not contain more than one .*it has net, "
                       "train_net"):
        get_solver(both)


def test_trainings_sharing_a_snapshot_prefix_check_it_without_racing(tmp_path):
    # each check writes and removes a probe of its own: with one shared probe name, one
    # process removing it made another's removal fail ("No such file or directory")
    import threading
    from pycaffe_lite.solvers.paths import check_writable
    errors, start = [], threading.Barrier(8)

    def check():
        start.wait()
        for _ in range(200):
            try:
                check_writable(str(tmp_path / "lenet"), "solver.prototxt")
            except Exception as exc:  # noqa: BLE001 (collected for the assertion)
                errors.append(exc)
    threads = [threading.Thread(target=check) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and os.listdir(tmp_path) == []
