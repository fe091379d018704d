// A CUDA driver, NVRTC and cuBLAS of the CPU, so that the GPU backend's host code runs without a
// GPU (scripts/gpu_on_cpu.sh): device memory is host memory, "compiling" hands back a marker that
// a module maps to kernels.cu compiled here as C++ (shim.h's semantics; the kernels that meet at
// __syncthreads run a block's threads as fibers), a stream runs its work at once, a capture
// records it for a graph to replay, and SGEMM/SGEMV are plain loops. Only the calls the
// backend makes are here: cudarc loads each symbol when first called, and panics naming one
// that is missing. It checks the host code's logic (buffers, shapes, launches, their order,
// graphs), not a GPU's arithmetic, memory model or speed.
#include "shim.h"
#include KERNELS
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
enum { OK = 0, INVALID_VALUE = 1, NOT_FOUND = 500, STREAM_CAPTURE_UNSUPPORTED = 900 };

namespace {
template <class T> T arg_of(void* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

template <class... A, size_t... I>
void call_with(void (*f)(A...), void** p, std::index_sequence<I...>) {
    f(arg_of<A>(p[I])...);
}

// A kernel of kernels.cu: its parameters' sizes (to copy a captured launch's arguments) and how
// to call it on an array of pointers to them, as cuLaunchKernel passes them.
struct Kernel {
    bool sync;
    std::vector<size_t> sizes;
    std::function<void(void**)> call;
};

template <class... A> Kernel entry(bool sync, void (*f)(A...)) {
    return Kernel{sync, {sizeof(A)...}, [f](void** p) { call_with(f, p, std::index_sequence_for<A...>{}); }};
}

const std::map<std::string, Kernel>& kernels() {
    static const std::map<std::string, Kernel> table = {
#define K(name, sync) {#name, entry(sync, &name)},
#include KERNEL_LIST
#undef K
    };
    return table;
}

// A block's threads as fibers of this OS thread, run in turn: __syncthreads passes on to the next
// live fiber, so between two of a fiber's barriers every other fiber runs to its own; a fiber
// that returns passes on too, and the last returns to the launch. The switch saves the
// callee-saved registers on the stack it leaves (x86-64 System V; ucontext's switch makes a
// system call each time, too slow for a kernel's thousands of blocks).
extern "C" void sagd_fiber_switch(void** save_sp, void* load_sp);
asm(R"(
    .text
    .globl sagd_fiber_switch
    .hidden sagd_fiber_switch
    .type sagd_fiber_switch, @function
sagd_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
)");

struct Fibers {
    std::vector<void*> sp;
    std::vector<std::vector<char>> stacks;
    std::vector<bool> done;
    void* launch = nullptr;
    unsigned current = 0, live = 0;
    const Kernel* kernel = nullptr;
    void** args = nullptr;
};
Fibers g_fibers;

// The next live fiber after the current one, in turn (the current one if it is the only one).
unsigned next_live() {
    unsigned n = g_fibers.sp.size();
    for (unsigned step = 1; step <= n; ++step) {
        unsigned j = (g_fibers.current + step) % n;
        if (!g_fibers.done[j]) return j;
    }
    return g_fibers.current;
}

void fiber_sync() {
    unsigned me = g_fibers.current, next = next_live();
    if (next != me) {
        g_fibers.current = next;
        threadIdx.x = next;
        sagd_fiber_switch(&g_fibers.sp[me], g_fibers.sp[next]);
    }
    threadIdx.x = me;
}

[[noreturn]] void fiber_main() {
    g_fibers.kernel->call(g_fibers.args);
    unsigned me = g_fibers.current;
    g_fibers.done[me] = true;
    void* dead;
    if (--g_fibers.live == 0) sagd_fiber_switch(&dead, g_fibers.launch);
    unsigned next = next_live();
    g_fibers.current = next;
    threadIdx.x = next;
    sagd_fiber_switch(&dead, g_fibers.sp[next]);
    __builtin_unreachable();
}

// A fresh fiber's stack: the six registers the switch pops, then fiber_main as its return address
// (with a 16-byte aligned stack at its entry, as a call leaves it).
void* fresh_stack(std::vector<char>& stack) {
    auto top = reinterpret_cast<uintptr_t>(stack.data() + stack.size()) & ~uintptr_t(15);
    auto* slot = reinterpret_cast<void**>(top);
    *--slot = nullptr;
    *--slot = reinterpret_cast<void*>(&fiber_main);
    for (int r = 0; r < 6; ++r) *--slot = nullptr;
    return slot;
}

// One kernel at a time in the process: block indices, shared memory and the fibers are globals
// here, and tests open the device from several threads at once.
std::mutex g_device;

// grid × block threads of `k` on `args`: blocks in turn, each block's threads in turn, or, for a
// kernel that meets at __syncthreads, as fibers.
void run(const Kernel& k, unsigned grid, unsigned block, void** args) {
    std::lock_guard<std::mutex> one_at_a_time(g_device);
    blockDim.x = block;
    gridDim.x = grid;
    if (!k.sync) {
        for (unsigned b = 0; b < grid; ++b) {
            blockIdx.x = b;
            for (unsigned t = 0; t < block; ++t) {
                threadIdx.x = t;
                k.call(args);
            }
        }
        return;
    }
    Fibers& f = g_fibers;
    f.sp.resize(block);
    while (f.stacks.size() < block) f.stacks.emplace_back(1 << 16);
    f.kernel = &k;
    f.args = args;
    g_fiber_sync = fiber_sync;
    for (unsigned b = 0; b < grid; ++b) {
        blockIdx.x = b;
        for (unsigned t = 0; t < block; ++t) f.sp[t] = fresh_stack(f.stacks[t]);
        f.done.assign(block, false);
        f.live = block;
        f.current = 0;
        threadIdx.x = 0;
        sagd_fiber_switch(&f.launch, f.sp[0]);
    }
    g_fiber_sync = nullptr;
}

// A stream: work runs when it is issued, unless a capture records it.
struct Stream {
    std::vector<std::function<void()>>* capture = nullptr;
};
struct Graph {
    std::vector<std::function<void()>> work;
};
Stream g_default;
Stream* stream_of(void* s) { return s ? static_cast<Stream*>(s) : &g_default; }

// Runs `work` on `stream` now, or records it while the stream captures.
void issue(void* stream, std::function<void()> work) {
    Stream* s = stream_of(stream);
    if (s->capture) s->capture->push_back(std::move(work));
    else work();
}

std::mutex g_mem;
std::map<uint64_t, size_t> g_allocs;
int g_ctx_marker;
int g_module_marker;
const char MARKER[] = "// kernels of the CPU driver\n";
}  // namespace

extern "C" {
// --- driver: the device, its context and memory -------------------------------------------------
CUresult cuInit(unsigned) { return OK; }
CUresult cuDriverGetVersion(int* v) { *v = 13000; return OK; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return OK; }
CUresult cuDeviceGet(int* d, int ordinal) { if (ordinal != 0) return INVALID_VALUE; *d = 0; return OK; }
CUresult cuDeviceGetName(char* name, int len, int) { std::snprintf(name, len, "CPU driver (emulated)"); return OK; }
CUresult cuDeviceGetAttribute(int* v, int attr, int) {
    // Compute capability 9.0; no memory pools (cudarc then allocates synchronously).
    *v = attr == 75 ? 9 : 0;
    return OK;
}
CUresult cuDeviceTotalMem_v2(size_t* b, int) { *b = size_t(1) << 34; return OK; }
CUresult cuDevicePrimaryCtxRetain(void** ctx, int) { *ctx = &g_ctx_marker; return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(int) { return OK; }
CUresult cuCtxSetCurrent(void*) { return OK; }
CUresult cuCtxGetCurrent(void** ctx) { *ctx = &g_ctx_marker; return OK; }
CUresult cuCtxSynchronize() { return OK; }
CUresult cuMemGetInfo_v2(size_t* free, size_t* total) { *free = *total = size_t(1) << 34; return OK; }
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
    void* m = std::calloc(bytes ? bytes : 1, 1);
    if (!m) return 2;
    std::lock_guard<std::mutex> g(g_mem);
    *p = reinterpret_cast<uint64_t>(m);
    g_allocs[*p] = bytes;
    return OK;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
    std::lock_guard<std::mutex> g(g_mem);
    if (!g_allocs.erase(p)) return INVALID_VALUE;
    std::free(reinterpret_cast<void*>(p));
    return OK;
}
CUresult cuGetErrorName(CUresult e, const char** s) { *s = e == OK ? "CUDA_SUCCESS" : "CUDA_ERROR (CPU driver)"; return OK; }
CUresult cuGetErrorString(CUresult e, const char** s) { return cuGetErrorName(e, s); }

// --- streams, copies and graphs ------------------------------------------------------------------
CUresult cuStreamCreate(void** s, unsigned) { *s = new Stream; return OK; }
CUresult cuStreamDestroy_v2(void* s) { delete static_cast<Stream*>(s); return OK; }
CUresult cuStreamSynchronize(void*) { return OK; }
CUresult cuStreamWaitEvent(void*, void*, unsigned) { return OK; }
CUresult cuEventCreate(void** e, unsigned) { *e = new int(0); return OK; }
CUresult cuEventDestroy_v2(void* e) { delete static_cast<int*>(e); return OK; }
CUresult cuEventRecord(void*, void*) { return OK; }
CUresult cuEventSynchronize(void*) { return OK; }
CUresult cuEventQuery(void*) { return OK; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void* s) {
    // A host source is read when the copy runs, as CUDA's asynchronous copies do.
    issue(s, [=] { std::memcpy(reinterpret_cast<void*>(dst), src, n); });
    return OK;
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void* s) {
    issue(s, [=] { std::memcpy(dst, reinterpret_cast<void*>(src), n); });
    return OK;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void* s) {
    issue(s, [=] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), n); });
    return OK;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) { return cuMemcpyHtoDAsync_v2(dst, src, n, nullptr); }
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) { return cuMemcpyDtoHAsync_v2(dst, src, n, nullptr); }
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void* s) {
    issue(s, [=] { std::memset(reinterpret_cast<void*>(dst), v, n); });
    return OK;
}
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) { return cuMemsetD8Async(dst, v, n, nullptr); }
CUresult cuStreamBeginCapture_v2(void* s, int) {
    Stream* st = stream_of(s);
    if (st->capture) return STREAM_CAPTURE_UNSUPPORTED;
    st->capture = new std::vector<std::function<void()>>;
    return OK;
}
CUresult cuStreamEndCapture(void* s, void** graph) {
    Stream* st = stream_of(s);
    if (!st->capture) return INVALID_VALUE;
    *graph = new Graph{std::move(*st->capture)};
    delete st->capture;
    st->capture = nullptr;
    return OK;
}
CUresult cuStreamIsCapturing(void* s, int* status) { *status = stream_of(s)->capture ? 1 : 0; return OK; }
CUresult cuGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long) {
    *exec = new Graph(*static_cast<Graph*>(graph));
    return OK;
}
CUresult cuGraphLaunch(void* exec, void* s) {
    for (auto& w : static_cast<Graph*>(exec)->work) issue(s, w);
    return OK;
}
CUresult cuGraphUpload(void*, void*) { return OK; }
CUresult cuGraphExecDestroy(void* exec) { delete static_cast<Graph*>(exec); return OK; }
CUresult cuGraphDestroy(void* graph) { delete static_cast<Graph*>(graph); return OK; }

// --- modules and launches ------------------------------------------------------------------------
CUresult cuModuleLoadData(void** module, const void* image) {
    if (std::strncmp(static_cast<const char*>(image), MARKER, sizeof(MARKER) - 1) != 0) return INVALID_VALUE;
    *module = &g_module_marker;
    return OK;
}
CUresult cuModuleUnload(void*) { return OK; }
CUresult cuModuleGetFunction(void** f, void*, const char* name) {
    auto it = kernels().find(name);
    if (it == kernels().end()) return NOT_FOUND;
    *f = const_cast<Kernel*>(&it->second);
    return OK;
}
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void* s, void** params, void** extra) {
    const Kernel& k = *static_cast<Kernel*>(f);
    if (gy != 1 || gz != 1 || by != 1 || bz != 1 || extra || bx > 1024 || shared > sizeof(g_dyn)) return INVALID_VALUE;
    // The arguments copied now, as CUDA copies them at the launch (and a graph keeps them).
    auto bytes = std::make_shared<std::vector<std::vector<unsigned char>>>();
    for (size_t i = 0; i < k.sizes.size(); ++i) {
        auto* p = static_cast<unsigned char*>(params[i]);
        bytes->emplace_back(p, p + k.sizes[i]);
    }
    issue(s, [&k, gx, bx, bytes] {
        std::vector<void*> ptrs;
        for (auto& b : *bytes) ptrs.push_back(b.data());
        run(k, gx, bx, ptrs.data());
    });
    return OK;
}

// --- NVRTC: the kernels are already compiled into this library ---------------------------------
int nvrtcCreateProgram(void** prog, const char*, const char*, int, const char* const*, const char* const*) {
    *prog = new int(0);
    return 0;
}
int nvrtcCompileProgram(void*, int, const char* const*) { return 0; }
int nvrtcGetPTXSize(void*, size_t* n) { *n = sizeof(MARKER); return 0; }
int nvrtcGetPTX(void*, char* ptx) { std::memcpy(ptx, MARKER, sizeof(MARKER)); return 0; }
int nvrtcGetProgramLogSize(void*, size_t* n) { *n = 1; return 0; }
int nvrtcGetProgramLog(void*, char* log) { *log = 0; return 0; }
int nvrtcDestroyProgram(void** prog) { delete static_cast<int*>(*prog); return 0; }

// --- cuBLAS: column-major products -----------------------------------------------------
struct Blas {
    void* stream = nullptr;
};
int cublasCreate_v2(void** h) { *h = new Blas; return 0; }
int cublasDestroy_v2(void* h) { delete static_cast<Blas*>(h); return 0; }
int cublasSetStream_v2(void* h, void* s) { static_cast<Blas*>(h)->stream = s; return 0; }
int cublasSetMathMode(void*, int) { return 0; }
int cublasSetPointerMode_v2(void*, int mode) { return mode == 0 ? 0 : 7; }
int cublasGetPointerMode_v2(void*, int* mode) { *mode = 0; return 0; }
// C = alpha op(A) op(B) + beta C (column-major), op(A) and op(B) packed first, the columns of C
// shared out over two threads, each column's rows accumulated in blocks in float (as cuBLAS).
void sgemm(int ta, int tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
           float beta, float* c, int ldc) {
    std::vector<float> ap((size_t)m * k), bp((size_t)k * n);
    for (int l = 0; l < k; ++l)
        for (int i = 0; i < m; ++i) ap[i + (size_t)l * m] = ta ? a[l + (size_t)i * lda] : a[i + (size_t)l * lda];
    for (int j = 0; j < n; ++j)
        for (int l = 0; l < k; ++l) bp[l + (size_t)j * k] = tb ? b[j + (size_t)l * ldb] : b[l + (size_t)j * ldb];
    const int rows = 256;
    auto columns = [&](int j0, int j1) {
        float acc[rows];
        for (int i0 = 0; i0 < m; i0 += rows) {
            int len = std::min(rows, m - i0);
            for (int j = j0; j < j1; ++j) {
                std::fill(acc, acc + len, 0.0f);
                const float* bj = &bp[(size_t)j * k];
                for (int l = 0; l < k; ++l) {
                    float bl = bj[l];
                    const float* al = &ap[i0 + (size_t)l * m];
                    for (int i = 0; i < len; ++i) acc[i] += bl * al[i];
                }
                for (int i = 0; i < len; ++i) {
                    float& out = c[i0 + i + (size_t)j * ldc];
                    out = alpha * acc[i] + (beta == 0 ? 0.0f : beta * out);
                }
            }
        }
    };
    if ((size_t)m * n * k < (1u << 20)) return columns(0, n);
    std::thread other(columns, n / 2, n);
    columns(0, n / 2);
    other.join();
}
int cublasSgemm_v2(void* h, int ta, int tb, int m, int n, int k, const float* alpha, const float* a, int lda,
                   const float* b, int ldb, const float* beta, float* c, int ldc) {
    float al = *alpha, be = *beta;
    issue(static_cast<Blas*>(h)->stream, [=] { sgemm(ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc); });
    return 0;
}
int cublasSgemv_v2(void* h, int trans, int m, int n, const float* alpha, const float* a, int lda, const float* x,
                   int incx, const float* beta, float* y, int incy) {
    float al = *alpha, be = *beta;
    issue(static_cast<Blas*>(h)->stream, [=] {
        int rows = trans ? n : m, cols = trans ? m : n;
        for (int i = 0; i < rows; ++i) {
            double acc = 0;
            for (int l = 0; l < cols; ++l)
                acc += double(trans ? a[l + (size_t)i * lda] : a[i + (size_t)l * lda]) * x[(size_t)l * incx];
            float& out = y[(size_t)i * incy];
            out = float(al * acc + (be == 0 ? 0.0 : be * double(out)));
        }
    });
    return 0;
}
}
