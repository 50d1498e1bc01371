"""What every benchmark prints before it times anything: the BLAS kernel NumPy's OpenBLAS runs
(as threadpoolctl reports it), the OpenBLAS variables that can pin that kernel, and the load
average of the machine.

``OPENBLAS_CORETYPE`` forces OpenBLAS's kernel choice (``Haswell`` runs the AVX2 kernels on an
AVX-512 core: about half the sgemm rate there) and ``OPENBLAS_L2_SIZE`` its blocking. PyTorch,
OpenCV and onnxruntime ignore both, so a comparison run with them set handicaps NumPy alone.
The documented benchmark commands unset them for the benchmark process only::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/run.py ...

(tests and CI keep the machine's environment).
"""

import os
import sys

PINNING = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
COMMAND = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python"


def blas_info():
    """[{internal_api, version, architecture, num_threads}] of the BLAS libraries loaded in
    this process (NumPy's first), or ``None`` without threadpoolctl."""
    import numpy  # noqa: F401  (loads OpenBLAS, so threadpoolctl sees it)
    try:
        import threadpoolctl
    except ImportError:
        return None
    return [{k: info.get(k) for k in ("internal_api", "version", "architecture",
                                      "num_threads", "filepath")}
            for info in threadpoolctl.threadpool_info() if info.get("user_api") == "blas"]


def load_average():
    """The 1, 5 and 15 minute load averages (``uptime``'s figures)."""
    return tuple(round(v, 2) for v in os.getloadavg())


def print_load(when, out=None):
    out = out or sys.stdout
    load = load_average()
    print("load average (%s): %.2f %.2f %.2f" % ((when,) + load), file=out)
    return load


def report(out=None):
    """Print the BLAS kernel, the pinning variables (with a warning where set) and the load
    average; return them as a dict for the JSON results."""
    out = out or sys.stdout
    blas = blas_info()
    if blas is None:
        print("BLAS kernel: unknown (threadpoolctl is not installed)", file=out)
    for info in blas or ():
        print("BLAS: %s %s, kernel %s, %s threads" % (
            info["internal_api"], info["version"], info["architecture"], info["num_threads"]),
            file=out)
    env = {name: os.environ.get(name) for name in PINNING}
    print("  ".join("%s=%s" % (k, "(unset)" if v is None else v) for k, v in env.items()),
          file=out)
    pinned = [k for k, v in env.items() if v is not None]
    if pinned:
        print("WARNING: %s set: NumPy's OpenBLAS is pinned (the other engines ignore it); "
              "run the benchmark as `%s benchmarks/...`" % (" and ".join(pinned), COMMAND),
              file=out)
    load = print_load("start", out)
    return {"blas": blas, "openblas_env": env, "load_start": load}
