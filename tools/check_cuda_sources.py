#!/usr/bin/env python
"""Compile every CUDA source of ``pycaffe_lite.ops.gpu`` with NVRTC, without a GPU.

    python tools/check_cuda_sources.py [-v]

Imports each module of ``pycaffe_lite.ops.gpu``, finds its ``RawModuleCache`` objects and
compiles each one's code as the cache does on first use (its prelude, ``typedef ... T`` by
default, then the source), for every variant the cache lists (``T=float`` and ``T=double``;
``T=half`` too for the kernels with float16 variants, which include ``cuda_fp16.h``), with
``--gpu-architecture=compute_90 --std=c++11`` and ``-I`` the first CUDA include folder found
that holds ``cuda_fp16.h`` (``CUDA_PATH``/``CUDA_HOME``, CuPy's CUDA path, ``/usr/local/cuda``,
the ``nvidia`` packages' headers: CuPy passes its own to NVRTC likewise); it also checks that
every kernel name the cache will ask for is defined in the source with ``extern "C"``. NVRTC
needs no driver: ``cupy_backends`` (installed with CuPy, e.g. ``cupy-cuda12x``) and the NVRTC
library are enough.

Exit status: 0 when everything compiled, 1 naming each module that failed (with NVRTC's log),
2 when NVRTC cannot be loaded.
"""

import functools
import importlib
import os
import pkgutil
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

OPTIONS = ["--gpu-architecture=compute_90", "--std=c++11"]


@functools.lru_cache(maxsize=1)
def include_dirs():
    """The CUDA include folders that hold ``cuda_fp16.h`` (NVRTC searches none by itself);
    looked for once per run."""
    roots = [os.environ.get(v) for v in ("CUDA_PATH", "CUDA_HOME")]
    try:  # where CuPy finds the CUDA toolkit (its own kernels include cuda_fp16.h too)
        from cupy import _environment
        roots.append(_environment.get_cuda_path())
    except Exception:  # no CuPy, or one that does not say
        pass
    roots.append("/usr/local/cuda")
    candidates = [os.path.join(r, "include") for r in roots if r]
    for entry in sys.path:
        nvidia = os.path.join(entry, "nvidia")
        if os.path.isdir(nvidia):
            candidates += [os.path.join(nvidia, d, "include") for d in sorted(os.listdir(nvidia))]
    found = []
    for d in candidates:
        if os.path.isfile(os.path.join(d, "cuda_fp16.h")) and d not in found:
            found.append(d)
    return tuple(found[:1])


def find_sources():
    """``[(module name, attribute name, RawModuleCache)]`` for the package's GPU kernels."""
    import pycaffe_lite.ops.gpu as gpu
    from pycaffe_lite.ops.gpu._util import RawModuleCache

    found = []
    for info in sorted(pkgutil.iter_modules(gpu.__path__), key=lambda i: i.name):
        name = "%s.%s" % (gpu.__name__, info.name)
        module = importlib.import_module(name)
        for attr, value in sorted(vars(module).items()):
            if isinstance(value, RawModuleCache):
                found.append((name, attr, value))
    return found


def load_nvrtc():
    from cupy_backends.cuda.libs import nvrtc
    return nvrtc


def compile_source(nvrtc, code, name="kernels.cu"):
    """NVRTC's verdict on ``code`` (a cache's whole code for one variant): ``(ok, log)``."""
    prog = nvrtc.createProgram(code, name, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, OPTIONS + ["-I" + d for d in include_dirs()])
            ok = True
        except Exception as exc:  # NVRTCError: the log says why
            ok = False
            first = str(exc)
        log = nvrtc.getProgramLog(prog)
        if isinstance(log, bytes):
            log = log.decode("utf-8", "replace")
        return ok, log if ok else (log or first)
    finally:
        nvrtc.destroyProgram(prog)


def missing_names(cache):
    """The names the cache lists that its source does not define as ``extern "C"`` kernels."""
    defined = set(re.findall(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(', cache.source))
    return [n for n in cache.names if n not in defined]


def check(nvrtc, sources, out=sys.stdout, verbose=False):
    """Compile each source for each of its variants; returns the failures (text per
    failure)."""
    failures = []
    for module, attr, cache in sources:
        where = "%s.%s" % (module, attr)
        for name in missing_names(cache):
            failures.append("%s: kernel '%s' is listed but not defined in the source"
                            % (where, name))
        for ctype in cache.ctypes:
            ok, log = compile_source(nvrtc, cache.code(ctype), module.rsplit(".", 1)[-1] + ".cu")
            if not ok:
                failures.append("%s (T=%s): NVRTC failed:\n%s" % (where, ctype, log.strip()))
            elif verbose:
                print("ok  %s (T=%s)%s" % (where, ctype, ("\n" + log.strip()) if log.strip()
                                          else ""), file=out)
    return failures


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    verbose = "-v" in argv
    try:
        nvrtc = load_nvrtc()
    except Exception as exc:
        print("check_cuda_sources: NVRTC is not available (%s: %s); install CuPy "
              "(cupy-cuda12x) to run this check" % (type(exc).__name__, exc), file=sys.stderr)
        return 2
    sources = find_sources()
    failures = check(nvrtc, sources, verbose=verbose)
    for text in failures:
        print("FAILED " + text, file=sys.stderr)
    variants = []
    for _, _, cache in sources:
        variants += [c for c in cache.ctypes if c not in variants]
    print("check_cuda_sources: %d sources in %d modules, compiled for %s: %d failures"
          % (len(sources), len({m for m, _, _ in sources}), ", ".join(variants),
             len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
