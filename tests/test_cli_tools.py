"""tools/parse_log.py and tools/plot_training_log.py on a log in Caffe's own format."""

import csv
import importlib.util
import math
import os
import subprocess
import sys

import pytest

from pycaffe_lite.errors import CaffeError
from pycaffe_lite.tools_log import chart_series, parse_log, plot_chart, plot_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A log as BVLC Caffe writes it (glog prefixes, its solver's message texts).
def _caffe_line(stamp, where, message):
    if "net output" in message:
        message = "    " + message  # Caffe indents the output lines
    return "I0210 13:39:%s 25210 %s] %s\n" % (stamp, where, message)


CAFFE_LOG = "Log file created at: 2016/02/10 13:39:20\n" + "".join(
    _caffe_line(*line) for line in [
        ('20.100000', 'caffe.cpp:185', 'Using GPUs 0'),
        ('22.381027', 'solver.cpp:280', 'Solving LeNet'),
        ('22.381069', 'solver.cpp:281', 'Learning Rate Policy: inv'),
        ('22.382015', 'solver.cpp:338', 'Iteration 0, Testing net (#0)'),
        ('23.500000', 'solver.cpp:406', 'Test net output #0: accuracy = 0.0797'),
        ('23.500100', 'solver.cpp:406', 'Test net output #1: loss = 2.39438 (* 1 = 2.39438 loss)'),
        ('23.510000', 'solver.cpp:229', 'Iteration 0, loss = 2.40967'),
        ('23.510100', 'solver.cpp:245', 'Train net output #0: loss = 2.40967 (* 1 = 2.40967 loss)'),
        ('23.510200', 'sgd_solver.cpp:106', 'Iteration 0, lr = 0.01'),
        ('24.600000', 'solver.cpp:229', 'Iteration 100, loss = 0.202145'),
        ('24.600100', 'solver.cpp:245',
         'Train net output #0: loss = 0.202145 (* 1 = 0.202145 loss)'),
        ('24.600200', 'sgd_solver.cpp:106', 'Iteration 100, lr = 0.00992565'),
        ('25.700000', 'solver.cpp:338', 'Iteration 200, Testing net (#0)'),
        ('26.000000', 'solver.cpp:406', 'Test net output #0: accuracy = 0.9651'),
        ('26.000100', 'solver.cpp:406', 'Test net output #1: loss = 0.109 (* 1 = 0.109 loss)'),
        ('26.100000', 'solver.cpp:229', 'Iteration 200, loss = 1.5e-01'),
        ('26.100100', 'solver.cpp:245', 'Train net output #0: loss = 1.5e-01 (* 1 = 0.15 loss)'),
        ('26.100200', 'sgd_solver.cpp:106', 'Iteration 200, lr = 0.00985258'),
    ])


@pytest.fixture
def caffe_log(tmp_path):
    path = tmp_path / "caffe.INFO"
    path.write_text(CAFFE_LOG)
    return path


def test_parse_caffe_log_rows(caffe_log):
    train, test = parse_log(str(caffe_log))
    assert [list(r) for r in train[:1]] == [["NumIters", "Seconds", "LearningRate", "loss"]]
    # as Caffe's parse_log.py: a row's rate is the last one logged before its outputs (Caffe
    # logs "lr =" after the outputs, so it lags one display), the first row's from the second
    assert [(r["NumIters"], r["loss"], r["LearningRate"]) for r in train] == [
        (0, 2.40967, 0.01), (100, 0.202145, 0.01), (200, 0.15, 0.00992565)]
    assert [r["Seconds"] for r in train] == [pytest.approx(1.129073),
                                             pytest.approx(2.219073),
                                             pytest.approx(3.719073)]
    assert [(r["NumIters"], r["accuracy"], r["loss"], r["LearningRate"]) for r in test] == [
        (0, 0.0797, 2.39438, 0.00992565), (200, 0.9651, 0.109, 0.00992565)]
    assert list(test[0]) == ["NumIters", "Seconds", "LearningRate", "accuracy", "loss"]


def _run_tool(name, *args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "tools", name), *args],
                          capture_output=True, text=True, timeout=600)


def test_parse_log_tool_writes_caffe_csv_files(caffe_log, tmp_path):
    out = _run_tool("parse_log.py", str(caffe_log), str(tmp_path), "--verbose")
    assert out.returncode == 0, out.stderr
    assert "Wrote %s" % (tmp_path / "caffe.INFO.train") in out.stdout
    with open(tmp_path / "caffe.INFO.train") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["NumIters", "Seconds", "LearningRate", "loss"]
    assert rows[2][0] == "100" and float(rows[2][3]) == 0.202145
    with open(tmp_path / "caffe.INFO.test") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["NumIters", "Seconds", "LearningRate", "accuracy", "loss"]
    assert len(rows) == 3 and float(rows[2][3]) == 0.9651


def test_parse_log_tool_delimiter_and_errors(caffe_log, tmp_path):
    out = _run_tool("parse_log.py", str(caffe_log), str(tmp_path), "--delimiter", ";")
    assert out.returncode == 0
    assert (tmp_path / "caffe.INFO.train").read_text().splitlines()[0] == \
        "NumIters;Seconds;LearningRate;loss"
    out = _run_tool("parse_log.py", str(tmp_path / "nope.log"), str(tmp_path))
    assert out.returncode == 1 and "cannot read log file" in out.stderr


def test_log_without_timestamps_still_parses(tmp_path):
    path = tmp_path / "plain.log"
    path.write_text("Iteration 5, loss = 1\n    Train net output #0: loss = 1\n"
                    "Iteration 10, lr = 0.5\n    Train net output #0: loss = 0.5\n")
    train, test = parse_log(str(path))
    assert [(r["NumIters"], r["loss"]) for r in train] == [(5, 1.0), (10, 0.5)]
    assert math.isnan(train[0]["LearningRate"]) is False and test == []


# A diverged run: glog prints NaN and infinity as C++ streams do (nan, -nan on Linux, inf, -inf).
DIVERGED_LOG = "".join(_caffe_line(*line) for line in [
    ('22.381027', 'solver.cpp:280', 'Solving LeNet'),
    ('22.382015', 'solver.cpp:338', 'Iteration 0, Testing net (#0)'),
    ('23.500000', 'solver.cpp:406', 'Test net output #0: accuracy = 0.0797'),
    ('23.500100', 'solver.cpp:406', 'Test net output #1: loss = -inf (* 1 = -inf loss)'),
    ('23.510000', 'solver.cpp:229', 'Iteration 0, loss = -nan'),
    ('23.510100', 'solver.cpp:245', 'Train net output #0: loss = -nan (* 1 = -nan loss)'),
    ('23.510200', 'sgd_solver.cpp:106', 'Iteration 0, lr = 0.01'),
    ('24.600000', 'solver.cpp:229', 'Iteration 100, loss = nan'),
    ('24.600100', 'solver.cpp:245', 'Train net output #0: loss = nan (* 1 = nan loss)'),
    ('24.600200', 'sgd_solver.cpp:106', 'Iteration 100, lr = 0.00992565'),
    ('25.700000', 'solver.cpp:338', 'Iteration 200, Testing net (#0)'),
    ('26.000000', 'solver.cpp:406', 'Test net output #0: accuracy = -nan'),
    ('26.000100', 'solver.cpp:406', 'Test net output #1: loss = inf (* 1 = inf loss)'),
    ('26.100000', 'solver.cpp:229', 'Iteration 200, loss = -inf'),
    ('26.100100', 'solver.cpp:245', 'Train net output #0: loss = -inf (* 1 = -inf loss)'),
    ('26.100200', 'sgd_solver.cpp:106', 'Iteration 200, lr = 0.00985258'),
    ('27.100000', 'solver.cpp:229', 'Iteration 300, loss = inf'),
    ('27.100100', 'solver.cpp:245', 'Train net output #0: loss = inf (* 1 = inf loss)'),
    ('27.100200', 'sgd_solver.cpp:106', 'Iteration 300, lr = 0.00978075'),
])


def test_nan_and_infinite_outputs_parse(tmp_path):
    path = tmp_path / "diverged.log"
    path.write_text(DIVERGED_LOG)
    train, test = parse_log(str(path))
    assert [r["NumIters"] for r in train] == [0, 100, 200, 300]
    loss = [r["loss"] for r in train]
    assert math.isnan(loss[0]) and math.isnan(loss[1])
    assert loss[2:] == [-math.inf, math.inf]
    assert [r["LearningRate"] for r in train] == [0.01, 0.01, 0.00992565, 0.00985258]
    assert [r["NumIters"] for r in test] == [0, 200]
    assert test[0]["accuracy"] == 0.0797 and test[0]["loss"] == -math.inf
    assert math.isnan(test[1]["accuracy"]) and test[1]["loss"] == math.inf
    out = _run_tool("parse_log.py", str(path), str(tmp_path))
    assert out.returncode == 0, out.stderr
    rows = (tmp_path / "diverged.log.train").read_text().splitlines()
    assert [r.split(",")[3] for r in rows] == ["loss", "nan", "nan", "-inf", "inf"]


def test_a_value_that_is_not_a_number_names_the_line(tmp_path):
    path = tmp_path / "bad.log"
    lines = DIVERGED_LOG.splitlines(True)
    lines[8] = lines[8].replace("loss = nan", "loss = -")
    path.write_text("".join(lines))
    out = _run_tool("parse_log.py", str(path), str(tmp_path))
    assert out.returncode == 1
    assert out.stderr == ("parse_log: error: %s:9: net output 'loss' = '-' is not a number\n"
                          % path)
    assert not (tmp_path / "bad.log.train").exists()


def test_a_stamp_that_steps_back_is_a_small_step_not_a_year(tmp_path):
    # lines of several processes out of order: iteration 100's output 1 ms before the line
    # above it; the end of daylight saving time: the clock back from 13:39:26.1 to 12:59:27
    log = CAFFE_LOG.replace("13:39:24.600100", "13:39:24.599000")
    log = log.replace("I0210 13:39:26.1", "I0210 12:59:27.1")
    assert log.count("24.599000") == 1 and log.count("12:59:27.1") == 3
    path = tmp_path / "caffe.INFO"
    path.write_text(log)
    train, test = parse_log(str(path))
    # seconds from "Solving" at 13:39:22.381027
    assert [r["Seconds"] for r in train] == [pytest.approx(1.129073),
                                             pytest.approx(2.217973),
                                             pytest.approx(-2395.280927)]
    assert [r["Seconds"] for r in test] == [pytest.approx(1.118973),
                                            pytest.approx(3.618973)]


def _at(stamp, message):
    return "I%s 12345 solver.cpp:229] %s\n" % (stamp, message)


def test_a_log_that_crosses_new_year(tmp_path):
    path = tmp_path / "caffe.INFO"
    path.write_text("".join([
        _at("1231 23:59:58.500000", "Solving LeNet"),
        _at("1231 23:59:59.900000", "Iteration 0, loss = 2.3"),
        _at("1231 23:59:59.900100", "    Train net output #0: loss = 2.3"),
        _at("0101 00:00:01.250000", "Iteration 100, loss = 0.5"),
        _at("0101 00:00:01.250100", "    Train net output #0: loss = 0.5"),
        _at("0229 12:00:00.000000", "Iteration 200, loss = 0.25"),
        _at("0229 12:00:00.000100", "    Train net output #0: loss = 0.25"),
        _at("0301 00:00:01.250000", "Iteration 300, loss = 0.125"),
        _at("0301 00:00:01.250100", "    Train net output #0: loss = 0.125"),
    ]))
    # last written in 2024, so it started on December 31, 2023 and ran into a leap year
    os.utime(path, (1717243200, 1717243200))  # 2024-06-01 12:00 UTC
    train, _ = parse_log(str(path))
    day = 86400
    assert [(r["NumIters"], r["loss"]) for r in train] == [
        (0, 2.3), (100, 0.5), (200, 0.25), (300, 0.125)]
    assert [r["Seconds"] for r in train] == [
        pytest.approx(1.4001), pytest.approx(2.7501),
        pytest.approx(1.5 + 59 * day + 12 * 3600 + 0.0001),  # 31 days of January, 28 of February
        pytest.approx(1.5 + 60 * day + 1.2501)]


HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def test_plot_training_log(caffe_log, tmp_path):
    png = tmp_path / "curves.png"
    out = _run_tool("plot_training_log.py", str(caffe_log), str(png))
    if HAVE_MATPLOTLIB:
        assert out.returncode == 0, out.stderr
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.stat().st_size > 5000
    else:
        assert out.returncode == 1
        assert "plotting needs matplotlib: pip install matplotlib" in out.stderr


def test_plot_refuses_a_file_that_is_not_a_training_log(tmp_path):
    path = tmp_path / "other.log"
    path.write_text("hello\n")
    with pytest.raises(CaffeError, match="no 'Train net output' or 'Test net output' lines"):
        plot_log(str(path), str(tmp_path / "x.png"))


def _module_command(*argv):
    return subprocess.run([sys.executable, "-m", "pycaffe_lite"] + list(argv),
                          capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env=dict(os.environ, PYTHONPATH=ROOT))


def test_python_dash_m_pycaffe_lite_is_the_command_line():
    from pycaffe_lite import __version__

    done = _module_command("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pycaffe-lite " + __version__
    done = _module_command("summary", "--model", os.path.join(ROOT, "models", "lenet",
                                                               "lenet.prototxt"))
    assert done.returncode == 0, done.stderr
    assert "conv1" in done.stdout


def test_no_command_is_a_usage_error():
    done = _module_command()
    assert done.returncode == 2
    assert done.stderr.startswith("usage: pycaffe-lite ")
    assert "error: a command is required (one of: compare," in done.stderr


def test_an_unknown_flag_shows_the_commands_usage():
    done = _module_command("summary", "--model", "m.prototxt", "--bogus", "1")
    assert done.returncode == 2
    assert done.stderr.startswith("usage: pycaffe-lite summary ")
    assert done.stderr.strip().splitlines()[-1] == \
        "pycaffe-lite summary: error: unrecognized arguments: --bogus 1"


# Caffe's chart types read off CAFFE_LOG by hand: Seconds from "Solving" at 13:39:22.381027; a
# test row's time is its first output line's, the train loss and rate are the solver's
# "Iteration N, loss = x" and "Iteration N, lr = x" lines.
TEST_ITERS = [0, 200]
TEST_SECONDS = [1.118973, 3.618973]  # 23.5, 26.0
TRAIN_ITERS = [0, 100, 200]
LOSS_SECONDS = [1.128973, 2.218973, 3.718973]  # 23.51, 24.6, 26.1
LR_SECONDS = [1.129173, 2.219173, 3.719173]  # 23.5102, 24.6002, 26.1002
EXPECTED_CHARTS = {
    0: (TEST_ITERS, [0.0797, 0.9651]),
    1: (TEST_SECONDS, [0.0797, 0.9651]),
    2: (TEST_ITERS, [2.39438, 0.109]),
    3: (TEST_SECONDS, [2.39438, 0.109]),
    4: (TRAIN_ITERS, [0.01, 0.00992565, 0.00985258]),
    5: (LR_SECONDS, [0.01, 0.00992565, 0.00985258]),
    6: (TRAIN_ITERS, [2.40967, 0.25, 0.15]),
    7: (LOSS_SECONDS, [2.40967, 0.25, 0.15]),
}


@pytest.fixture
def chart_log(tmp_path):
    # the smoothed loss of iteration 100 differs from its train net output (average_loss > 1),
    # in the display line of newer Caffe (with iter/s)
    path = tmp_path / "run1.log"
    log = CAFFE_LOG.replace("Iteration 100, loss = 0.202145",
                            "Iteration 100 (91.7 iter/s, 1.09s/100 iters), loss = 0.25")
    assert log != CAFFE_LOG
    path.write_text(log)
    return path


@pytest.mark.parametrize("chart_type", range(8))
def test_chart_series_of_caffes_chart_types(chart_log, chart_type):
    xs, ys = chart_series(chart_type, str(chart_log))
    want_xs, want_ys = EXPECTED_CHARTS[chart_type]
    assert xs == pytest.approx(want_xs, abs=1e-6) and ys == want_ys


def test_chart_series_named_outputs_and_errors(chart_log, tmp_path):
    # --loss names a net output: the train net's for the train loss, the test net's for the test
    assert chart_series(6, str(chart_log), loss_key="loss") == (TRAIN_ITERS,
                                                                 [2.40967, 0.202145, 0.15])
    assert chart_series(2, str(chart_log), loss_key="loss")[1] == [2.39438, 0.109]
    with pytest.raises(CaffeError, match=r"run1.log: Test accuracy vs. Iters: no Test net "
                       r"output named 'top5' \(its outputs: accuracy, loss\)$"):
        chart_series(0, str(chart_log), accuracy_key="top5")
    train_only = tmp_path / "train_only.log"
    train_only.write_text("".join(line for line in CAFFE_LOG.splitlines(True)
                                  if "Test" not in line))
    assert chart_series(4, str(train_only))[1] == [0.01, 0.00992565, 0.00985258]
    with pytest.raises(CaffeError, match=r"train_only.log: Test loss vs. Seconds: no 'Test "
                       r"net output' lines; is it a training log\?$"):
        chart_series(3, str(train_only))
    renamed = tmp_path / "renamed.log"
    renamed.write_text(CAFFE_LOG.replace("#0: accuracy", "#0: top1"))
    with pytest.raises(CaffeError, match=r"no Test net output whose name has 'acc' \(its "
                       r"outputs: top1, loss\); name one with --accuracy$"):
        chart_series(1, str(renamed))
    assert chart_series(1, str(renamed), accuracy_key="top1")[1] == [0.0797, 0.9651]


@pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="needs matplotlib")
def test_plot_chart_draws_one_line_per_log(chart_log, tmp_path):
    second = tmp_path / "caffe.INFO"
    second.write_text(CAFFE_LOG.replace("accuracy = 0.9651", "accuracy = 0.9712"))
    drawn = plot_chart(0, str(tmp_path / "acc.svg"), [str(chart_log), str(second)])
    assert drawn == [("run1", [0, 200], [0.0797, 0.9651]),
                     ("caffe.INFO", [0, 200], [0.0797, 0.9712])]
    svg = (tmp_path / "acc.svg").read_text()
    assert svg.startswith("<?xml") and "<svg" in svg
    with pytest.raises(CaffeError, match=r"x.bmpx: unknown image type '.bmpx' \(the "
                       r"extension names the image type: .*\.png"):
        plot_chart(0, str(tmp_path / "x.bmpx"), [str(chart_log)])
    assert not (tmp_path / "x.bmpx").exists()


def test_plot_training_log_takes_caffes_arguments(chart_log, tmp_path):
    png = tmp_path / "loss.png"
    out = _run_tool("plot_training_log.py", "7", str(png), str(chart_log), str(chart_log))
    if HAVE_MATPLOTLIB:
        assert out.returncode == 0, out.stderr
        assert out.stdout == "Wrote %s\n" % png
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert out.returncode == 1
        assert "plotting needs matplotlib: pip install matplotlib" in out.stderr
    for bad in ("8", "-1", "loss"):
        out = _run_tool("plot_training_log.py", bad, str(png), str(chart_log))
        assert out.returncode == 2 and out.stderr.startswith("usage: plot_training_log.py")
        assert ("error: '%s' is not a chart type (0-7; see --help)" % bad) in out.stderr
    out = _run_tool("plot_training_log.py", "6", str(png))
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1].endswith("error: no log to plot: CHART_TYPE OUT.png "
                                                "LOG [LOG ...]")
    out = _run_tool("plot_training_log.py", "6", str(png), str(tmp_path / "nope.log"))
    assert out.returncode == 1
    assert out.stderr == ("plot_training_log: error: cannot read log file %s: No such file or "
                          "directory\n" % (tmp_path / "nope.log"))
    out = _run_tool("plot_training_log.py", "--help")
    assert out.returncode == 0
    assert "  4: Train learning rate vs. Iters\n" in out.stdout
