#!/usr/bin/env bash
# Every GPU check in one run, for a machine with an NVIDIA GPU, CuPy, PyTorch and the cuDNN
# frontend installed: the GPU test suite, then the benchmarks that docs/gpu.md's tables come
# from. Each step writes its log (and JSON) into OUTDIR and has a time limit of its own, so a
# step that hangs or runs long costs only its share; the steps run in order of importance.
#
#   bash benchmarks/gpu_checks.sh OUTDIR [MINUTES]
#
# MINUTES (default 9) is the time the whole run may take; each step gets a fixed share of it.
# OUTDIR/summary.txt lists each step with its exit status (124: it ran past its limit).
set -u
cd "$(dirname "$0")/.."
out=${1:?usage: gpu_checks.sh OUTDIR [MINUTES]}
minutes=${2:-9}
mkdir -p "$out"
budget=$((minutes * 60))
bench=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
py=${PYTHON:-python3}

step() {  # step NAME SHARE-IN-PERCENT COMMAND...: runs COMMAND with its share of the time
    local name=$1 share=$2
    shift 2
    local limit=$((budget * share / 100))
    local start=$SECONDS
    timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    printf '%-16s exit %3d  %4d s (limit %d s)\n' "$name" "$rc" $((SECONDS - start)) "$limit" \
        | tee -a "$out/summary.txt"
}

: >"$out/summary.txt"
# the card, the driver and the versions every figure depends on; CuPy compiling a kernel
step versions 3 "$py" -c '
import cupy, numpy
print("cupy", cupy.__version__, "numpy", numpy.__version__)
print("device", cupy.cuda.runtime.getDeviceProperties(0)["name"].decode())
print("CUDA runtime", cupy.cuda.runtime.runtimeGetVersion())
k = cupy.ElementwiseKernel("float32 x", "float32 y", "y = x * 2", "gpu_checks_twice")
assert float(k(cupy.arange(4, dtype=cupy.float32))[3]) == 6.0
print("NVRTC compiles kernels")
try:
    import torch
    print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version())
except ImportError:
    print("torch is not installed")
from pycaffe_lite.ops.gpu import cudnn
print("cuDNN through the frontend:", cudnn.available(), cudnn.version(),
      cudnn.unavailable_reason() or "")
'
# correctness first: every GPU test
step pytest_gpu 40 "$py" -m pytest -m gpu -q -p no:cacheprovider -rfEs \
    --junitxml="$out/pytest_gpu.xml" tests
# docs/gpu.md's speed table (ours and PyTorch on this card)
step bench_gpu 30 "${bench[@]}" "$py" benchmarks/bench_gpu.py \
    --only resnet50_train resnet50_infer resnet50_b1 googlenet_train caffenet lenet \
    resnet50_fp16 --rounds 3 --per-round 5 --json "$out/bench_gpu.json"
# where a convolution gap lies
step profile_convs 12 "${bench[@]}" "$py" benchmarks/profile_gpu_convs.py --net resnet50 \
    --batch 32 --json "$out/profile_convs.json"
# where an iteration's time goes, layer by layer (ResNet-50 at batch 32, with its backward)
net="$out/resnet50_b32_train.prototxt"
{ echo "force_backward: true"
  sed '0,/dim: 1$/s//dim: 32/' models/zoo/resnet50_deploy.prototxt; } >"$net"
step time_layers 10 "$py" -m pycaffe_lite time --model "$net" --gpu 0 --iterations 5 \
    --cuda_graph off
step bench_eager 5 "${bench[@]}" "$py" benchmarks/bench_gpu.py --only resnet50_train lenet \
    --cuda-graph off --rounds 2 --per-round 3 --json "$out/bench_gpu_eager.json"
