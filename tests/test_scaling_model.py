"""benchmarks/scaling_model.py as performance.md runs it: the ring allreduce's figures by hand,
every net of a bench_parallel.py file modelled, and inputs it cannot use refused with a message
naming them instead of an empty output or a traceback."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "scaling_model.py")


def run(*args, cwd=None):
    return subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def test_caffenet_at_600_ms_as_performance_md_gives_it():
    """performance.md: CaffeNet's 244 MB of gradients take 195 ms at 10 Gb/s on 2 ranks (one
    pass of B through the link: 2(N-1)/N = 1) and 389 ms at 256 (2 x 255/256)."""
    proc = run("--compute", "caffenet=600")
    assert proc.returncode == 0, proc.stderr
    nbytes = 4 * 60_965_224
    two = nbytes / (10e9 / 8)                       # 0.195 s
    many = 2 * 255 / 256 * nbytes / (10e9 / 8)      # 0.389 s
    assert round(1000 * two) == 195 and round(1000 * many) == 389
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 2 |")
            or line.startswith("| 256 |")]
    assert rows[0].split("|")[2].strip() == "%.0f ms, %.0f%%, %.1fx" % (
        1000 * two, 100 * 0.6 / (0.6 + two), 2 * 0.6 / (0.6 + two))
    assert rows[1].split("|")[2].strip().startswith("389 ms, ")


def test_every_net_of_a_bench_file_is_modelled(tmp_path):
    """A bench_parallel.py --json file of LeNet alone (`--nets lenet`) printed nothing and
    exited 0: only CaffeNet and ResNet-50 were looked for. Each net with a 1 rank x 1 thread
    run is modelled with the parameter count the file gives."""
    bench = tmp_path / "parallel.json"
    bench.write_text(json.dumps({"runs": [
        {"net": "lenet", "ranks": 1, "threads": 1, "ms_per_iter": 4.0, "params": 431080},
        {"net": "lenet", "ranks": 2, "threads": 1, "ms_per_iter": 9.0, "params": 431080}]}))
    proc = run("--bench", str(bench))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("lenet: 0.4 M parameters (2 MB of float32 gradients), "
                                  "t_c = 4 ms per iteration")
    t = 4 * 431080 / (10e9 / 8)
    row = [line for line in proc.stdout.splitlines() if line.startswith("| 2 |")][0]
    assert row.split("|")[2].strip() == "%.0f ms, %.0f%%, %.1fx" % (
        1000 * t, 100 * 0.004 / (0.004 + t), 2 * 0.004 / (0.004 + t))


def test_a_net_of_unknown_size_takes_params(tmp_path):
    proc = run("--compute", "googlenet=900")
    assert proc.returncode == 2
    assert "googlenet" in proc.stderr and "--params googlenet=" in proc.stderr
    proc = run("--compute", "googlenet=900", "--params", "googlenet=6998552")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("googlenet: 7.0 M parameters (28 MB of float32 gradients), "
                                  "t_c = 900 ms per iteration")


def test_inputs_it_cannot_use_are_named(tmp_path):
    nothing = run()
    assert nothing.returncode == 2 and "nothing to model" in nothing.stderr
    for args, named in [(["--compute", "caffenet=abc"], "caffenet=abc"),
                        (["--compute", "caffenet"], "caffenet"),
                        (["--compute", "caffenet=-5"], "caffenet=-5"),
                        (["--params", "lenet=x", "--compute", "lenet=3"], "lenet=x"),
                        (["--bench", str(tmp_path / "missing.json")], "missing.json")]:
        proc = run(*args)
        assert proc.returncode == 2, (args, proc.stdout)
        assert named in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)
    (tmp_path / "bad.json").write_text("{not json")
    proc = run("--bench", str(tmp_path / "bad.json"))
    assert proc.returncode == 2 and "bad.json" in proc.stderr
    assert "Traceback" not in proc.stderr
