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

// ---- Random numbers: Philox-4x32-10, counter (i, call, 0, 0) under key (seed). ----

__device__ __forceinline__ void philox(unsigned int c[4], unsigned int k0, unsigned int k1) {
    for (int r = 0; r < 10; ++r) {
        unsigned int hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
        unsigned int hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
        unsigned int n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0; c[1] = lo1; c[2] = n2; c[3] = lo0;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
}

// A uniform in (0, 1] from 32 bits.
__device__ __forceinline__ float unit(unsigned int u) {
    return ((float)(u >> 8) + 1.0f) * (1.0f / 16777216.0f);
}

// out[i] ~ N(0, 1), two per counter (Box-Muller), or U(0, 1] with uniform != 0.
extern "C" __global__ void fill_random(float* out, int n, unsigned int k0, unsigned int k1,
                                       unsigned int call, int uniform) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int pair = i >> 1;
    if (2 * pair >= n) return;
    unsigned int c[4] = {(unsigned int)pair, call, 0u, 0u};
    philox(c, k0, k1);
    if (uniform) {
        if (i < n) out[i] = unit((i & 1) ? c[1] : c[0]);
        return;
    }
    float r = sqrtf(-2.0f * logf(unit(c[0])));
    float t = 6.283185307179586f * unit(c[1]);
    if (i < n) out[i] = (i & 1) ? r * sinf(t) : r * cosf(t);
}

// ---- The decoder's likelihood p(x | h), by law (likelihood.rs's DeviceLaw codes) ----

// ℓ(h; x) of one coordinate under law 0 (N(h, 1/prec)), 1 (Bernoulli, h the logit) or 2
// (Poisson, h the log-rate), the constants dropped as the host's laws drop them; ∂ℓ/∂h into g.
__device__ __forceinline__ float law_density(int law, float prec, float h, float x, float* g) {
    if (law == 1) {
        float e = expf(-fabsf(h));
        float inv = 1.0f / (1.0f + e);
        float sp = fmaxf(h, 0.0f) + log1pf(e);
        *g = x - (h >= 0.0f ? inv : e * inv);
        return x * h - sp;
    }
    if (law == 2) {
        float rate = expf(h);
        *g = x - rate;
        return x * h - rate;
    }
    float r = x - h, gr = prec * r;
    *g = gr;
    return -0.5f * gr * r;
}

// Per row r of h (rows × px), its data point x[(r / per) mod n] (a bound's row i k + s: per = k; a
// chain's c n + i: per = 1): ll[r] = Σ_j ℓ (summed in double; not written where ll is null) and
// dl = gscale ∂ℓ/∂h. by_thread: one thread per row (short rows); else one block per row, its
// threads a power of two of at most 256 over the row's coordinates.
extern "C" __global__ void likelihood_rows(int law, float prec, const float* h, const float* x,
                                           int rows, int n, int per, int px, float* dl,
                                           float* ll, float gscale, int by_thread) {
    __shared__ double part[256];
    if (by_thread) {
        long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
        if (r >= rows) return;
        const float* xr = x + ((r / per) % n) * px;
        double acc = 0.0;
        for (int j = 0; j < px; ++j) {
            float g;
            acc += (double)law_density(law, prec, h[r * px + j], xr[j], &g);
            dl[r * px + j] = gscale * g;
        }
        if (ll) ll[r] = (float)acc;
        return;
    }
    long long r = blockIdx.x;
    const float* xr = x + ((r / per) % n) * px;
    double acc = 0.0;
    for (int j = threadIdx.x; j < px; j += blockDim.x) {
        float g;
        acc += (double)law_density(law, prec, h[r * px + j], xr[j], &g);
        dl[r * px + j] = gscale * g;
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0 && ll) ll[r] = (float)part[0];
}

// ---- The bounds (VAE, IWAE) ----

// u[r, j] = mu[i, j] + exp(lv[i, j] / 2) eps[r, j] for row r = i k + s; enc rows are (mu, lv).
extern "C" __global__ void reparam(const float* enc, const float* eps, float* u, int n, int k, int d) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n * k * d) return;
    int j = e % d, r = e / d, i = r / k;
    u[e] = enc[i * 2 * d + j] + expf(0.5f * enc[i * 2 * d + d + j]) * eps[e];
}

// Per point i of a bound, from its k rows' log-likelihoods ll: its loss (−ELBO with the analytic
// KL for k = 1; for k > 1 the IWAE bound's negative, log w = ℓ − ½‖u‖² + ½‖ε‖² + ½ Σ log σ²) and
// the factor of each row's ∂ℓ/∂h (1 for k = 1, the normalised weight w̃ for k > 1). One thread
// per point.
extern "C" __global__ void bound_weights(const float* enc, const float* u, const float* eps,
                                         const float* ll, float* wts, float* loss, int n, int k,
                                         int d) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float* lv = enc + i * 2 * d + d;
    if (k == 1) {
        double kl = 0.0;
        for (int j = 0; j < d; ++j) {
            float mu = enc[i * 2 * d + j];
            kl += 0.5 * (double)(mu * mu + expf(lv[j]) - lv[j] - 1.0f);
        }
        loss[i] = (float)(kl - (double)ll[i]);
        wts[i] = 1.0f;
        return;
    }
    float m = __int_as_float(0xff800000);  // −∞
    for (int s = 0; s < k; ++s) {
        int r = (i * k + s) * d;
        float acc = ll[i * k + s];
        for (int j = 0; j < d; ++j)
            acc += -0.5f * u[r + j] * u[r + j] + 0.5f * eps[r + j] * eps[r + j] + 0.5f * lv[j];
        wts[i * k + s] = acc;
        m = fmaxf(m, acc);
    }
    double sum = 0.0;
    for (int s = 0; s < k; ++s) {
        float w = expf(wts[i * k + s] - m);
        wts[i * k + s] = w;
        sum += (double)w;
    }
    loss[i] = (float)(-((double)m + log(sum) - log((double)k)));
    for (int s = 0; s < k; ++s) wts[i * k + s] = (float)((double)wts[i * k + s] / sum);
}

// dl[r, j] *= c w[r] over rows × px values.
extern "C" __global__ void scale_rows(float* dl, const float* w, float c, int rows, int px) {
    long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long long)rows * px) return;
    dl[e] *= c * w[e / px];
}

// ∂loss/∂(mu, lv) of the encoder's outputs: back through the reparameterisation, plus the KL
// term (k = 1) or the direct terms of log w (k > 1). One thread per (point, coordinate).
extern "C" __global__ void bound_enc_grad(const float* enc, const float* u, const float* eps,
                                          const float* du, const float* wts, float* dout,
                                          int n, int k, int d, float nf) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n * d) return;
    int i = e / d, j = e % d;
    float mu = enc[i * 2 * d + j], lv = enc[i * 2 * d + d + j];
    float sd = expf(0.5f * lv);
    float dmu = 0.0f, dlv = 0.0f;
    for (int s = 0; s < k; ++s) {
        int r = (i * k + s) * d + j;
        float wt = k == 1 ? 0.0f : wts[i * k + s];
        float g = du[r] + wt * u[r] / nf;
        dmu += g;
        dlv += g * eps[r] * 0.5f * sd;
    }
    if (k == 1) {
        dmu += mu / nf;
        dlv += 0.5f * (expf(lv) - 1.0f) / nf;
    } else {
        dlv -= 0.5f / nf;
    }
    dout[i * 2 * d + j] = dmu;
    dout[i * 2 * d + d + j] = dlv;
}

// ---- The decoder's posterior p(u | x; θ) ∝ N(u; 0, I) p(x | h(u)) ----

// The prior's part of each of the rows' posterior, after likelihood_rows (log p(x | u) into lp)
// and the decoder's backward pass (g = ∇u log p(x | u)): g −= u, and lp −= ½‖u‖² where lp is
// given. One thread per row.
extern "C" __global__ void posterior_prior(float* g, const float* u, float* lp, int rows, int d) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int j = 0; j < d; ++j) {
        float v = u[r * d + j];
        g[r * d + j] -= v;
        s += v * v;
    }
    if (lp) lp[r] -= 0.5f * s;
}

// Finite (neither infinite nor NaN), without the math headers' macros.
__device__ __forceinline__ bool is_fin(double v) { return v - v == 0.0; }

// Columns of the per-row statistics of a transition (chain_finish).
#define STATS 6

// ---- The chains' splitting operations (the CPU's langevin/block.rs, elementwise) ----

// x = src + h ρ.
extern "C" __global__ void chain_drift(float* x, const float* src, const float* rho, float h, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = src[i] + h * rho[i];
}

// ρ = decay ρ + grad g + s η (η unused when s = 0).
extern "C" __global__ void chain_kick(float* rho, const float* g, const float* eta, float decay,
                                      float grad, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = decay * rho[i] + grad * g[i];
    if (s != 0.0f) v += s * eta[i];
    rho[i] = v;
}

// The exact Ornstein-Uhlenbeck flow: x += drift ρ + x1 ζ1 + x2 ζ2, ρ = decay ρ + v1 ζ1, the draws
// ζ1 and ζ2 in two blocks of n values (as the core's program reads given draws).
extern "C" __global__ void chain_ou(float* x, float* rho, const float* z1, const float* z2,
                                    float decay, float drift, float v1, float x1, float x2, int n) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    x[e] += drift * rho[e] + x1 * z1[e] + x2 * z2[e];
    rho[e] = decay * rho[e] + v1 * z1[e];
}

// HMC's refresh: ρ = η, and the energy at the start −lp_old + ½‖ρ‖² per row.
extern "C" __global__ void chain_refresh(float* rho, const float* eta, const float* lp_old,
                                         double* h0, int n, int d) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    double s = 0.0;
    for (int j = 0; j < d; ++j) {
        float v = eta[r * d + j];
        rho[r * d + j] = v;
        s += (double)v * (double)v;
    }
    h0[r] = -(double)lp_old[r] + 0.5 * s;
}

// The end of a transition, per row: divergence (a non-finite state, or an energy error over
// 1000), the Metropolis test with a uniform, the return to the old state of a refused or diverged
// row, fresh momentum for a diverged one. stats[r] = (diverged, acceptance, lp kept, ρ² kept,
// energy change, whether the energy change counts).
extern "C" __global__ void chain_finish(float* x_new, float* g_new, float* lp_new,
                                        const float* x_old, const float* g_old,
                                        const float* lp_old, float* rho, const float* fresh,
                                        const float* uni, const double* h0, int metropolis,
                                        float* stats, int n, int d) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    double sx = 0.0, sg = 0.0, sr = 0.0;
    for (int j = 0; j < d; ++j) {
        float a = x_new[r * d + j], b = g_new[r * d + j], c = rho[r * d + j];
        sx += (double)a * a; sg += (double)b * b; sr += (double)c * c;
    }
    bool ok = is_fin((double)lp_new[r]) && is_fin(sx + sg + sr);
    bool keep = ok, diverged = !ok;
    float acc = 0.0f, dh_out = 0.0f, dh_ok = 0.0f;
    if (metropolis) {
        double h1 = -(double)lp_new[r] + 0.5 * sr;
        double dh = h1 - h0[r];
        bool fin = is_fin(dh);
        if (ok && fin) { acc = (float)fmin(exp(-dh), 1.0); dh_out = (float)dh; dh_ok = 1.0f; }
        if (dh != dh || dh > 1000.0) diverged = true;
        keep = ok && uni[r] < acc;
    }
    if (!keep) {
        for (int j = 0; j < d; ++j) { x_new[r * d + j] = x_old[r * d + j]; g_new[r * d + j] = g_old[r * d + j]; }
        lp_new[r] = lp_old[r];
    }
    if (diverged) {
        sr = 0.0;
        for (int j = 0; j < d; ++j) { float v = fresh[r * d + j]; rho[r * d + j] = v; sr += (double)v * v; }
    }
    float* st = stats + STATS * r;
    st[0] = diverged ? 1.0f : 0.0f;
    st[1] = acc;
    st[2] = lp_new[r];
    st[3] = (float)sr;
    st[4] = dh_out;
    st[5] = dh_ok;
}

// Sums of the columns of a rows × cols matrix in one block of 256 threads, in a fixed order
// (deterministic): out[c] += Σ_r m[r, c].
extern "C" __global__ void column_sums(const float* m, double* out, int rows, int cols) {
    __shared__ double part[256];
    for (int c = 0; c < cols; ++c) {
        double s = 0.0;
        for (int r = threadIdx.x; r < rows; r += blockDim.x) {
            s += (double)m[r * cols + c];
        }
        part[threadIdx.x] = s;
        __syncthreads();
        for (unsigned int w = blockDim.x / 2; w > 0; w >>= 1) {
            if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
            __syncthreads();
        }
        if (threadIdx.x == 0) out[c] += part[0];
        __syncthreads();
    }
}

// dst[i, :] = src[idx[i], :] (gather), or dst[idx[i], :] = src[i, :] (scatter).
extern "C" __global__ void rows_copy(float* dst, const float* src, const int* idx, int n, int d,
                                     int scatter) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n * d) return;
    int i = e / d, j = e % d;
    if (scatter) dst[idx[i] * d + j] = src[e];
    else dst[e] = src[idx[i] * d + j];
}

// x += h ρ.
extern "C" __global__ void chain_drift_add(float* x, const float* rho, float h, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += h * rho[i];
}

// ---- A whole evaluation of a small decoder's posterior in one launch ----
// For decoders d → H → H → d (Linear, activation, Linear, activation, Linear) with H ≤ 1024 and
// d ≤ 4: one block of H threads per chain, one thread per hidden unit; the products are sums over
// threads through shared memory. log p = −½ (‖x − h(u)‖² + ‖u‖²), ∇u log p = J_hᵀ (x − h) − u.

__device__ __forceinline__ void act_eval(int kind, float a, float* y, float* dy) {
    if (kind == 0) {
        float e = expf(-fabsf(a)), inv = 1.0f / (1.0f + e);
        *y = fmaxf(a, 0.0f) + log1pf(e);
        *dy = a >= 0.0f ? inv : e * inv;
    } else if (kind == 1) {
        *y = fmaxf(a, 0.0f);
        *dy = a > 0.0f ? 1.0f : 0.0f;
    } else if (kind == 2) {
        float t = tanhf(a);
        *y = t;
        *dy = 1.0f - t * t;
    } else {
        float e = expf(-fabsf(a)), inv = 1.0f / (1.0f + e);
        float s = a >= 0.0f ? inv : e * inv;
        *y = s;
        *dy = s * (1.0f - s);
    }
}

extern "C" __global__ void posterior_mlp(const float* theta, int o0, int o2, int o4, int kind,
                                         const float* data, const float* u, float* lp, float* g,
                                         int n, int d, int hid) {
    extern __shared__ float sh[];  // h1[hid], g2[hid], part[4 * hid], val[8]
    float* h1 = sh;
    float* g2 = sh + hid;
    float* part = sh + 2 * hid;
    float* val = sh + 6 * hid;
    int row = blockIdx.x, j = threadIdx.x;
    if (row >= n) return;
    const float* ur = u + row * d;
    const float* w1 = theta + o0;           // hid × d, then b1
    const float* b1 = w1 + hid * d;
    const float* w2 = theta + o2;           // hid × hid, then b2
    const float* b2 = w2 + hid * hid;
    const float* w3 = theta + o4;           // d × hid, then b3
    const float* b3 = w3 + d * hid;
    float a1 = b1[j];
    for (int i = 0; i < d; ++i) a1 += w1[j * d + i] * ur[i];
    float y1, s1;
    act_eval(kind, a1, &y1, &s1);
    h1[j] = y1;
    __syncthreads();
    float a2 = b2[j];
    for (int k = 0; k < hid; ++k) a2 += w2[j * hid + k] * h1[k];
    float y2, s2;
    act_eval(kind, a2, &y2, &s2);
    for (int o = 0; o < d; ++o) part[o * hid + j] = w3[o * hid + j] * y2;
    __syncthreads();
    if (j < d) {
        float h = b3[j];
        for (int k = 0; k < hid; ++k) h += part[j * hid + k];
        val[j] = data[row * d + j] - h;  // the residual r
    }
    __syncthreads();
    float gj = 0.0f;
    for (int o = 0; o < d; ++o) gj += w3[o * hid + j] * val[o];
    g2[j] = gj * s2;
    __syncthreads();
    float g1 = 0.0f;
    for (int k = 0; k < hid; ++k) g1 += w2[k * hid + j] * g2[k];
    g1 *= s1;
    for (int i = 0; i < d; ++i) part[i * hid + j] = w1[j * d + i] * g1;
    __syncthreads();
    if (j < d) {
        float gu = 0.0f;
        for (int k = 0; k < hid; ++k) gu += part[j * hid + k];
        g[row * d + j] = gu - ur[j];
    }
    if (j == 0) {
        float s = 0.0f;
        for (int i = 0; i < d; ++i) s += val[i] * val[i] + ur[i] * ur[i];
        lp[row] = -0.5f * s;
    }
}

// ---- Convolutions as products (conv.rs): windows gathered (im2col) and scattered (col2im) ----
// Images channels-last: image m's pixel (y, x), channel c at ((m·big + y)·big + x)·ch + c. A window
// row holds k·k cells of ch values, for kernel offset kk = ky·k + kx.

// cols[(m·small² + o)·k²·ch + kk·ch + c] = img at the window's cell, 0 outside the image.
extern "C" __global__ void im2col(const float* img, float* cols, int images, int big, int small,
                                  int k, int stride, int pad, int ch) {
    long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long total = (long long)images * small * small * k * k * ch;
    if (e >= total) return;
    int c = (int)(e % ch);
    long long t = e / ch;
    int kk = (int)(t % (k * k));
    t /= k * k;
    int o = (int)(t % (small * small));
    long long m = t / (small * small);
    int y = (o / small) * stride + kk / k - pad, x = (o % small) * stride + kk % k - pad;
    cols[e] = (y >= 0 && y < big && x >= 0 && x < big)
                  ? img[((m * big + y) * big + x) * ch + c]
                  : 0.0f;
}

// The adjoint: img (overwritten) = the sum of the windows covering each pixel, in window order
// (the CPU's order). One thread per image value.
extern "C" __global__ void col2im(const float* cols, float* img, int images, int big, int small,
                                  int k, int stride, int pad, int ch) {
    long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long total = (long long)images * big * big * ch;
    if (e >= total) return;
    int c = (int)(e % ch);
    long long t = e / ch;
    int x = (int)(t % big);
    t /= big;
    int y = (int)(t % big);
    long long m = t / big;
    int width = k * k * ch;
    // Window positions o with o·stride + kernel offset − pad = pixel, kernel offset in [0, k).
    int lo_y = y + pad - k + 1, lo_x = x + pad - k + 1;
    int oy0 = lo_y <= 0 ? 0 : (lo_y + stride - 1) / stride;
    int ox0 = lo_x <= 0 ? 0 : (lo_x + stride - 1) / stride;
    int oy1 = min((y + pad) / stride, small - 1), ox1 = min((x + pad) / stride, small - 1);
    float acc = 0.0f;
    for (int oy = oy0; oy <= oy1; ++oy) {
        for (int ox = ox0; ox <= ox1; ++ox) {
            int kk = (y + pad - oy * stride) * k + (x + pad - ox * stride);
            acc += cols[((m * small + oy) * small + ox) * width + kk * ch + c];
        }
    }
    img[e] = acc;
}

// ---- Chains started from a Gaussian encoder ----

// Chains started from a Gaussian encoder: u = u0 = μ + σ ε for chain r of data point r mod b.
extern "C" __global__ void encoder_chain_starts(const float* enc, const float* eps, float* u, float* u0,
                                         int rows, int b, int d) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= rows * d) return;
    int r = e / d, j = e % d, i = r % b;
    float v = enc[i * 2 * d + j] + expf(0.5f * enc[i * 2 * d + d + j]) * eps[e];
    u[e] = v;
    u0[e] = v;
}

// dist[r] = ‖u_r − u0_r‖.
extern "C" __global__ void row_distance(const float* u, const float* u0, float* dist, int rows,
                                        int d) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    double s = 0.0;
    for (int j = 0; j < d; ++j) {
        double v = (double)(u[r * d + j] - u0[r * d + j]);
        s += v * v;
    }
    dist[r] = (float)sqrt(s);
}

// ---- Adam on the device: the host rule's arithmetic (optim/mod.rs), each operation rounded once
// as there (no fused multiply-adds), moments in double ----

// m = β₁m + (1 − β₁)g, v = β₂v + (1 − β₂)g·g in double, d = (m/c₁)/(√(v/c₂) + ε) in float from
// the moments rounded to float, θ −= (float)(lr·d).
extern "C" __global__ void adam_step(float* theta, const float* g, double* m, double* v, int n,
                                     double beta1, double beta2, double eps, double c1, double c2,
                                     double lr) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double gf = (double)g[i];
    double mi = __dadd_rn(__dmul_rn(beta1, m[i]), __dmul_rn(1.0 - beta1, gf));
    double vi = __dadd_rn(__dmul_rn(beta2, v[i]), __dmul_rn(__dmul_rn(1.0 - beta2, gf), gf));
    m[i] = mi;
    v[i] = vi;
    float d = __fdiv_rn(__fdiv_rn((float)mi, (float)c1),
                        __fadd_rn(__fsqrt_rn(__fdiv_rn((float)vi, (float)c2)), (float)eps));
    theta[i] = __fsub_rn(theta[i], (float)__dmul_rn(lr, (double)d));
}

// flag[0] = 1 where some g is not finite (flag zeroed before).
extern "C" __global__ void flag_nonfinite(const float* g, int n, float* flag) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && !(g[i] - g[i] == 0.0f)) flag[0] = 1.0f;
}
