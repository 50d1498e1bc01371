"""Build hooks: compile proto/caffe.proto into pycaffe_lite/proto/caffe_pb2.py, and the
optional C kernels (pycaffe_lite/ops/cpu/kernels.c) into an extension module.

The message module is always produced from the schema by protoc (grpcio-tools), for regular
and editable installs alike, so the two can never drift apart. Generated code only runs on a
protobuf runtime of the same major version and at least its own version, so the protobuf
requirement is derived from the module actually generated here (a user's older protobuf is
then upgraded by pip instead of failing at import).

The C kernels are an optional build: where no C compiler is found, or the compile fails, a
warning is printed and the package installs without them (its NumPy code then runs).
"""

import os
import re

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
GENERATED = os.path.join(HERE, "pycaffe_lite", "proto", "caffe_pb2.py")


def compile_schema():
    from grpc_tools import protoc

    args = [
        "grpc_tools.protoc",
        "-I" + os.path.join(HERE, "proto"),
        "--python_out=" + os.path.dirname(GENERATED),
        os.path.join(HERE, "proto", "caffe.proto"),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed to compile proto/caffe.proto")


def protobuf_requirement():
    """``protobuf>=X.Y.Z,<X+1`` for the gencode version written in the generated module."""
    with open(GENERATED) as f:
        m = re.search(r"Protobuf Python Version: (\d+)\.(\d+)\.(\d+)", f.read())
    if not m:
        return "protobuf>=5.28"
    major, minor, patch = (int(v) for v in m.groups())
    return "protobuf>=%d.%d.%d,<%d" % (major, minor, patch, major + 1)


class BuildPyWithSchema(build_py):
    def run(self):
        compile_schema()
        super().run()


class BuildExtOptional(build_ext):
    """Compiler flags by compiler family; exact IEEE arithmetic (no fast-math, no contraction
    into fused multiply-adds), so the kernels give the NumPy code's results bit for bit."""

    def build_extensions(self):
        if self.compiler.compiler_type == "msvc":
            flags = ["/O2", "/fp:precise"]
        else:
            flags = ["-O3", "-ffp-contract=off", "-fno-fast-math", "-fno-math-errno", "-std=c99"]
        for ext in self.extensions:
            ext.extra_compile_args = flags
        super().build_extensions()


KERNELS = Extension("pycaffe_lite.ops.cpu._kernels", ["pycaffe_lite/ops/cpu/kernels.c"],
                    depends=["pycaffe_lite/ops/cpu/kernels_impl.h",
                             "pycaffe_lite/ops/cpu/conv_impl.h",
                             "pycaffe_lite/ops/cpu/blocked_impl.h",
                             "pycaffe_lite/ops/cpu/blocked_body.h",
                             "pycaffe_lite/ops/cpu/train_impl.h"], optional=True)

compile_schema()
setup(
    cmdclass={"build_py": BuildPyWithSchema, "build_ext": BuildExtOptional},
    ext_modules=[KERNELS],
    install_requires=["numpy>=1.23", protobuf_requirement(), "lmdb>=1.4", "Pillow>=9.0"],
)
