// What kernels.cu needs of CUDA, on the CPU: a block's threads as OS threads that meet at a
// barrier for __syncthreads, blocks one after another, a function-level static for __shared__
// (one block at a time), and the intrinsics by their plain C arithmetic. Enough to check the
// kernels' arithmetic and indexing without a GPU (scripts/kernels_on_cpu.sh), not their speed.
#include <cmath>
#include <cstring>
#include <cstdint>
#include <thread>
#include <barrier>
#include <vector>
#include <functional>
#include <math.h>
#include <algorithm>
using std::min; using std::max;
struct D3 { unsigned x = 1, y = 1, z = 1; };
thread_local D3 threadIdx;
D3 blockIdx, blockDim, gridDim;
std::barrier<>* g_bar;
// Where a driver runs a block's threads as fibers of one OS thread, __syncthreads is its switch.
inline void (*g_fiber_sync)() = nullptr;
inline void __syncthreads() { if (g_fiber_sync) g_fiber_sync(); else g_bar->arrive_and_wait(); }
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
float g_dyn[1 << 16];
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
// Runs grid × block threads of f: blocks in turn, each block's threads as OS threads (`sync`: the
// kernel meets at __syncthreads), or one after another where it never does.
inline void launch(unsigned grid, unsigned block, bool sync, const std::function<void()>& f) {
    blockDim.x = block; gridDim.x = grid;
    for (unsigned b = 0; b < grid; ++b) {
        blockIdx.x = b;
        if (!sync) { for (unsigned t = 0; t < block; ++t) { threadIdx.x = t; f(); } continue; }
        std::barrier<> br(block); g_bar = &br;
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < block; ++t) ts.emplace_back([&, t] { threadIdx.x = t; f(); });
        for (auto& t : ts) t.join();
    }
}
