"""TensorBoard curves: ``pycaffe-lite train --tensorboard DIR`` and
``pycaffe_lite.tensorboard.attach``. The event files are read back with TensorBoard's own reader
(EventAccumulator) and compared with the training log (parsed here and by Caffe's log parser)
and with learning rates computed by hand from the lr policy; one test serves the files with
``tensorboard --logdir`` on loopback and looks at the page in headless Chromium."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tensorboard", reason="needs the tensorboard package (the extra)")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

import pycaffe_lite as caffe  # noqa: E402
from pycaffe_lite import cli, tensorboard  # noqa: E402
from pycaffe_lite.errors import CaffeError  # noqa: E402
from pycaffe_lite import ranks  # noqa: E402
from pycaffe_lite.tools_log import parse_log  # noqa: E402

from helpers.browser import Browser, chromium_missing  # noqa: E402

NET = """
name: "tiny"
layer { name: "data" type: "DummyData" top: "x" top: "label"
        dummy_data_param { shape { dim: 8 dim: 3 } shape { dim: 8 }
                           data_filler { type: "gaussian" }
                           data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "z" bottom: "label" top: "loss" }
layer { name: "acc" type: "Accuracy" bottom: "z" bottom: "label" top: "acc" }
"""

SOLVER = """
net: "net.prototxt"
base_lr: 0.1 lr_policy: "step" gamma: 0.5 stepsize: 4
display: 2 average_loss: 3 max_iter: 10
test_iter: 2 test_interval: 5
solver_mode: CPU random_seed: 3 snapshot_after_train: false
"""


def hand_lr(iteration):
    return 0.1 * 0.5 ** (iteration // 4)  # "step": base_lr * gamma ^ floor(iter / stepsize)


def read_events(logdir):
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def scalars(acc, tag):
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def make_project(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "net.prototxt").write_text(NET)
    (folder / "solver.prototxt").write_text(SOLVER)
    return folder / "solver.prototxt"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A real ``pycaffe-lite train --tensorboard`` run: (event folder, its log text)."""
    folder = tmp_path_factory.mktemp("tb_run")
    make_project(folder)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-m", "pycaffe_lite.cli", "train", "--solver",
                          "solver.prototxt", "--tensorboard", "runs",
                          "--tensorboard_histograms", "5"],
                         cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    (folder / "caffe.INFO").write_text(out.stderr)
    return folder / "runs", folder / "caffe.INFO"


def test_scalars_match_the_log_and_the_lr_policy(trained):
    runs, log_path = trained
    acc = read_events(runs)
    log = log_path.read_text()
    smoothed = [(int(i), float(v)) for i, v in
                re.findall(r"Iteration (\d+), loss = ([-+.\deE]+)", log)]
    assert [i for i, _ in smoothed] == [0, 2, 4, 6, 8, 10]  # displays and the final one
    got = scalars(acc, "train/loss")
    assert [s for s, _ in got] == [i for i, _ in smoothed]
    np.testing.assert_allclose([v for _, v in got], [v for _, v in smoothed], rtol=1e-5)
    lr = scalars(acc, "train/lr")
    assert [s for s, _ in lr] == [0, 2, 4, 6, 8]
    np.testing.assert_allclose([v for _, v in lr], [hand_lr(s) for s, _ in lr], rtol=1e-6)
    train_rows, test_rows = parse_log(str(log_path))
    got = scalars(acc, "train/acc")
    assert [s for s, _ in got] == [r["NumIters"] for r in train_rows]
    np.testing.assert_allclose([v for _, v in got], [r["acc"] for r in train_rows], rtol=1e-5)
    for name in ("acc", "loss"):
        got = scalars(acc, "test/" + name)
        assert [s for s, _ in got] == [r["NumIters"] for r in test_rows] == [0, 5, 10]
        np.testing.assert_allclose([v for _, v in got], [r[name] for r in test_rows],
                                   rtol=1e-5)
    assert sorted(t for t in acc.Tags()["scalars"]) == [
        "test/acc", "test/loss", "train/acc", "train/loss", "train/lr"]


def test_histograms_every_n_iterations(trained):
    acc = read_events(trained[0])
    tags = acc.Tags()["tensors"]
    assert sorted(tags) == ["gradients/ip/0", "gradients/ip/1", "weights/ip/0", "weights/ip/1"]
    for tag in tags:
        events = acc.Tensors(tag)
        assert [e.step for e in events] == [0, 5]
        buckets = tensor_util.make_ndarray(events[0].tensor_proto)  # [left, right, count]
        assert buckets[:, 2].sum() == (9 if tag.endswith("/0") else 3)


def test_attach_from_python_with_two_test_nets(tmp_path):
    solver_path = make_project(tmp_path)
    solver_path.write_text(SOLVER.replace("test_iter: 2", "test_iter: 2 test_iter: 1")
                           .replace("max_iter: 10", "max_iter: 5"))
    solver = caffe.get_solver(str(solver_path))
    logger = tensorboard.attach(solver, tmp_path / "runs", histograms=4)
    before = solver.net.params["ip"][0].data.copy()
    solver.step(1)
    # the histogram of iteration 0 is that of the initial weights, taken here independently
    acc = read_events(tmp_path / "runs")
    buckets = tensor_util.make_ndarray(acc.Tensors("weights/ip/0")[0].tensor_proto)
    assert buckets[:, 2].sum() == before.size
    assert np.isclose(buckets[0, 0], before.min()) and np.isclose(buckets[-1, 1], before.max())
    solver.solve()
    solver.close()
    assert logger._closed
    acc = read_events(tmp_path / "runs")
    for k in (0, 1):
        got = scalars(acc, "test%d/acc" % k)
        assert [s for s, _ in got] == [0, 5]
        assert got[-1][1] == pytest.approx(dict(solver.test_scores[k])["acc"])
    assert "test/acc" not in acc.Tags()["scalars"]


def test_only_rank_0_writes(tmp_path):
    solver_path = make_project(tmp_path)
    solver = caffe.get_solver(str(solver_path))
    try:
        ranks.set_solver_count(2)
        ranks.set_solver_rank(1)
        assert tensorboard.attach(solver, tmp_path / "rank1") is None
    finally:
        ranks.reset()
        solver.close()
    assert not (tmp_path / "rank1").exists() and solver.listeners == []


def test_missing_tensorboard_is_a_clear_error(tmp_path, monkeypatch, capsys):
    solver_path = make_project(tmp_path)
    monkeypatch.setitem(sys.modules, "tensorboard.summary.writer.event_file_writer", None)
    with pytest.raises(CaffeError, match=r"pip install tensorboard \(or the tensorboard "
                       r"extra: pip install '\.\[tensorboard\]'"):
        tensorboard.load_writer()
    assert cli.main(["train", "--solver", str(solver_path), "--tensorboard",
                     str(tmp_path / "runs")]) == 1
    assert "tensorboard" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def _start_tensorboard(logdir):
    """``tensorboard --logdir`` on 127.0.0.1, a port of the system's choice: (process, url),
    once it says where it listens."""
    exe = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    command = [exe] if os.path.exists(exe) else [sys.executable, "-m", "tensorboard.main"]
    proc = subprocess.Popen(command + ["--logdir", str(logdir), "--host", "127.0.0.1",
                                       "--port", "0", "--load_fast", "false"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:  # ends when it exits
        m = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        if m:
            return proc, m.group(1)
    proc.wait()
    raise AssertionError("tensorboard exited (rc %s) without serving" % proc.returncode)


@pytest.mark.slow  # TensorBoard served and read by a headless browser
@pytest.mark.skipif(chromium_missing() is not None, reason=str(chromium_missing()))
def test_tensorboard_page_shows_the_train_loss_chart(trained, tmp_path):
    runs, log_path = trained
    last_iter, last_loss = re.findall(r"Iteration (\d+), loss = ([-+.\deE]+)",
                                      log_path.read_text())[-1]
    proc, url = _start_tensorboard(runs)
    browser = None
    try:
        browser = Browser()
        browser.navigate(url + "#timeseries")
        browser.wait_for("(() => { const i = document.querySelector("
                         "'input[placeholder^=\"Filter tags\"]'); if (i) i.focus(); "
                         "return !!i; })()", what="the tag filter")
        browser.page("Input.insertText", text="train/loss")
        card = ("document.querySelector('card-view tb-truncated-path.tag[title=\"train/loss\"]')"
                "?.closest('card-view')")
        # the chart's data table shows the newest point once the data arrived: a row below
        # the table's header (whose last column is "Relative"); the axes' tick labels are
        # digits too and show up before the data does
        text = browser.wait_for("(() => { const c = %s; if (!c || !c.querySelector("
                                "'line-chart canvas')) return null; const t = c.innerText; "
                                "const k = t.lastIndexOf('Relative'); "
                                "return k >= 0 && /\\d/.test(t.slice(k)) ? t : null; })()"
                                % card, what="the train/loss chart's data row")
        browser.evaluate("document.activeElement.blur()")
        assert "train/loss" in text.replace("\n", "")  # the card's title
        assert "%.4f" % float(last_loss) in text and last_iter in text.split()
        def rect_of(element):
            return browser.evaluate("(() => { const r = (%s).getBoundingClientRect(); return "
                                    "{x: r.x, y: r.y, width: r.width, height: r.height}; })()"
                                    % element)

        # wait until the line is drawn: the plot's canvas gets the run's colour (its grid and
        # axes are grey)
        plot = rect_of("(%s).querySelector('line-chart canvas')" % card)
        coloured = 0
        for _ in range(200):
            coloured = _coloured_pixels(browser.screenshot(str(tmp_path / "plot.png"), plot))
            if coloured > 50:
                break
            browser.evaluate("new Promise(r => requestAnimationFrame(() => "
                             "requestAnimationFrame(r)))")
        assert coloured > 50, "the line of train/loss was never drawn"
        png = tmp_path / "tensorboard_train_loss.png"
        browser.screenshot(str(png), clip=rect_of(card))
        browser.screenshot(str(tmp_path / "tensorboard_page.png"))
        print("screenshots: %s, %s" % (png, tmp_path / "tensorboard_page.png"))
    finally:
        if browser is not None:
            browser.close()
        proc.terminate()
        proc.wait(timeout=60)
        proc.stdout.close()


def _coloured_pixels(png_bytes):
    import io

    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(png_bytes)).convert("RGB")).astype(int)
    return int((np.abs(image - image.mean(axis=2, keepdims=True)).sum(axis=2) > 30).sum())


def test_under_mpiexec_only_rank_0_writes(tmp_path):
    from helpers.mpi import make_lmdb, mpi_available, run_ranks, tiny_project

    if not mpi_available():
        pytest.skip("needs mpi4py and mpiexec (pip install '.[mpi]')")
    solver = tiny_project(tmp_path / "p", make_lmdb(tmp_path / "db", n=24), max_iter=10,
                          snapshot=0, display=5)
    code, out = run_ranks(2, ["train", "--solver", str(solver), "--tensorboard",
                              str(tmp_path / "runs")], tmp_path)
    assert code == 0, out
    pids = dict((int(r), p) for r, p in re.findall(r"rank (\d) = pid (\d+)", out))
    assert sorted(pids) == [0, 1]
    files = os.listdir(tmp_path / "runs")
    assert len(files) == 1 and files[0].split(".")[-2] == pids[0]  # ...tfevents.T.host.pid.0
    smoothed = [int(i) for i in re.findall(r"Iteration (\d+), loss = ", out)]
    assert [s for s, _ in scalars(read_events(tmp_path / "runs"), "train/loss")] == smoothed


def test_a_detection_test_writes_its_map(tmp_path):
    from test_solver_detection_eval import EXPECTED, make_solver

    solver = make_solver('eval_type: "detection" ap_version: "Integral" '
                         'test_initialization: true')
    tensorboard.attach(solver, tmp_path / "runs")
    solver.step(1)
    solver.close()
    got = scalars(read_events(tmp_path / "runs"), "test/detection_eval")
    assert got == [(0, pytest.approx(EXPECTED["Integral"], abs=1e-6))]
