/* Compiled host kernels of pycaffe_lite.ops.cpu: im2col/col2im, MAX pooling forward and
 * backward, AVE pooling forward, LRN's channel sums, bias and ReLU, the SGD solver's update
 * (kernels_impl.h); the direct depthwise convolution and Winograd's F(2x2, 3x3) and F(4x4, 3x3)
 * transforms and the direct 1x1 convolution (conv_impl.h); the channel-blocked convolution
 * and pooling, float only (blocked_impl.h, blocked_body.h); BatchNorm -> Scale -> ReLU forward
 * and backward in training, the SGD update of every parameter in one call (train_impl.h).
 *
 * Plain C functions over raw arrays, called through ctypes (which releases the GIL, so
 * several threads can run parts of one kernel). setup.py builds this file as an optional
 * extension module: without a C compiler the package installs and runs the NumPy code.
 * The kernels are written once, in kernels_impl.h, conv_impl.h and train_impl.h, and instantiated for
 * float and double. Build without -ffast-math and with -ffp-contract=off: the kernels of
 * kernels_impl.h must equal NumPy's results exactly.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(_WIN32)
#define EXPORT __declspec(dllexport)
#else
#define EXPORT __attribute__((visibility("default")))
#endif

typedef int64_t idx;

/* The vector loops (col2im, MAX pooling, LRN, the SGD update, the convolution kernels) are
 * built several times, for AVX-512, AVX2 and the baseline instruction set, and the dynamic
 * loader picks the one the processor runs (GCC/Clang target_clones, ELF ifuncs): one build
 * serves every x86-64 machine. The clones compute the same IEEE operations in the same order
 * (no fused multiply-adds: -ffp-contract=off; no reassociation), only more elements at a
 * time. */
#if defined(VECTOR_CLONES) /* given by the build: -DVECTOR_CLONES= builds the baseline only */
#define PCL_CLONES_GIVEN /* the 1x1 kernel's own clones (conv_impl.h) follow it */
#elif defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && \
    ((defined(__clang__) && __clang_major__ >= 14) || (!defined(__clang__) && __GNUC__ >= 6))
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* ALWAYS_INLINE: a helper of the vector loops, inlined into each clone of its caller (a
 * helper left out of line would be built for the baseline instruction set only). */
#if defined(__GNUC__)
#define ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE static inline
#endif

/* SQRT: the correctly rounded square root of T (one instruction: built with -fno-math-errno,
 * so the vector loops keep it). */
#define T float
#define SQRT sqrtf
#define NAME(f) pcl_##f##_f32
#include "kernels_impl.h"
#include "conv_impl.h"
#include "train_impl.h"
#undef T
#undef SQRT
#undef NAME

#define T double
#define SQRT sqrt
#define NAME(f) pcl_##f##_f64
#include "kernels_impl.h"
#include "conv_impl.h"
#include "train_impl.h"
#undef T
#undef SQRT
#undef NAME

#include "blocked_impl.h"

/* An ABI number: the Python side refuses a library built from other sources. */
EXPORT int pcl_abi_version(void) { return 15; }

static struct PyModuleDef kernels_module = {
    PyModuleDef_HEAD_INIT, "_kernels",
    "Compiled host kernels (plain C functions, loaded through ctypes by pycaffe_lite.ops.cpu).",
    -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&kernels_module); }
