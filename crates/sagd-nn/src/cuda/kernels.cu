// Elementwise kernels of the CUDA backend, compiled at run time by NVRTC. The activations follow
// the CPU engine's formulas (math.rs): softplus and the sigmoid from one exponential.

extern "C" __global__ void act_forward(int kind, const float* x, float* y, float* dy, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = x[i];
    if (kind == 0) {  // softplus, derivative σ(a)
        float e = expf(-fabsf(a));
        float inv = 1.0f / (1.0f + e);
        y[i] = fmaxf(a, 0.0f) + log1pf(e);
        dy[i] = a >= 0.0f ? inv : e * inv;
    } else if (kind == 1) {  // relu
        y[i] = fmaxf(a, 0.0f);
        dy[i] = a > 0.0f ? 1.0f : 0.0f;
    } else if (kind == 2) {  // tanh
        float t = tanhf(a);
        y[i] = t;
        dy[i] = 1.0f - t * t;
    } else {  // sigmoid
        float e = expf(-fabsf(a));
        float inv = 1.0f / (1.0f + e);
        float s = a >= 0.0f ? inv : e * inv;
        y[i] = s;
        dy[i] = s * (1.0f - s);
    }
}

// y[r, j] += b[j] for a row-major rows × out matrix.
extern "C" __global__ void add_bias(float* y, const float* b, int out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += b[i % out];
}

// g *= d elementwise.
extern "C" __global__ void scale(float* g, const float* d, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] *= d[i];
}

// v = c elementwise.
extern "C" __global__ void fill(float* v, float c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = c;
}
