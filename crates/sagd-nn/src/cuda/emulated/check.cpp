// The kernels of the likelihood, the bounds' weights, the posterior's prior and the Langevin
// program's steps, run on the CPU (shim.h) against their closed forms computed here in double:
// every law and row shape likelihood_rows takes (one thread per row and one block per row), the
// ELBO's and IWAE's losses and weights, scale_rows, posterior_prior, and the chains' drifts,
// kicks and exact Ornstein-Uhlenbeck flows. Built and run by scripts/kernels_on_cpu.sh; exits
// non-zero on any mismatch.
#include "shim.h"
#include KERNELS
#include <cstdio>
#include <random>
static int fails = 0;
static void check(const char* what, double got, double want, double tol) {
    double err = std::fabs(got - want) / std::fmax(1.0, std::fabs(want));
    if (!(err <= tol)) { ++fails; std::printf("FAIL %s: got %.9g want %.9g\n", what, got, want); }
}
// ℓ(h; x) and ∂ℓ/∂h of law `law` in double (the kernels' constants dropped).
static double ell(int law, double prec, double h, double x, double* g) {
    if (law == 1) { double s = 1 / (1 + std::exp(-h)); *g = x - s; return x * h - std::log1p(std::exp(h)); }
    if (law == 2) { *g = x - std::exp(h); return x * h - std::exp(h); }
    *g = prec * (x - h); return -0.5 * prec * (x - h) * (x - h);
}
int main() {
    std::mt19937 rng(7); std::normal_distribution<float> N(0, 1);
    for (int law = 0; law < 3; ++law)
    for (int px : {1, 3, 63, 64, 300}) for (int per : {1, 4}) {
        int n = 5, rows = n * per * (per == 1 ? 3 : 1);  // per 1: 3 chains per point
        std::vector<float> h(rows * px), x(n * px), dl(rows * px), ll(rows);
        for (auto& v : h) v = 2 * N(rng);
        for (auto& v : x) v = law == 0 ? N(rng) : law == 1 ? (N(rng) > 0) : std::floor(std::fabs(5 * N(rng)));
        float prec = law == 0 ? 2.5f : 0.0f, gs = -0.25f;
        bool bt = px < 64;
        unsigned threads = 1; while ((int)threads < px && threads < 256) threads *= 2;
        if (bt) launch((rows + 255) / 256, 256, false, [&] { likelihood_rows(law, prec, h.data(), x.data(), rows, n, per, px, dl.data(), ll.data(), gs, 1); });
        else launch(rows, threads, true, [&] { likelihood_rows(law, prec, h.data(), x.data(), rows, n, per, px, dl.data(), ll.data(), gs, 0); });
        for (int r = 0; r < rows; ++r) {
            int i = (r / per) % n; double tot = 0;
            for (int j = 0; j < px; ++j) { double g; tot += ell(law, prec, h[r * px + j], x[i * px + j], &g); check("dl", dl[r * px + j], gs * g, 2e-6); }
            check("ll", ll[r], tot, 2e-6);
        }
        // ll null writes none.
        std::vector<float> dl2(rows * px);
        if (bt) launch((rows + 255) / 256, 256, false, [&] { likelihood_rows(law, prec, h.data(), x.data(), rows, n, per, px, dl2.data(), nullptr, gs, 1); });
        else launch(rows, threads, true, [&] { likelihood_rows(law, prec, h.data(), x.data(), rows, n, per, px, dl2.data(), nullptr, gs, 0); });
        for (int e = 0; e < rows * px; ++e) if (dl2[e] != dl[e]) { ++fails; std::printf("FAIL null ll\n"); break; }
    }
    // bound_weights and scale_rows against the ELBO and IWAE in double.
    for (int k : {1, 5}) {
        int n = 4, d = 3, px = 7;
        std::vector<float> enc(n * 2 * d), u(n * k * d), eps(n * k * d), ll(n * k), wts(n * k), loss(n);
        for (auto& v : enc) v = 0.5f * N(rng);
        for (auto& v : eps) v = N(rng);
        for (auto& v : ll) v = -3 + N(rng);
        for (int i = 0; i < n; ++i) for (int s = 0; s < k; ++s) for (int j = 0; j < d; ++j) {
            int r = (i * k + s) * d + j; u[r] = enc[i * 2 * d + j] + std::exp(0.5f * enc[i * 2 * d + d + j]) * eps[r];
        }
        launch(1, 256, false, [&] { bound_weights(enc.data(), u.data(), eps.data(), ll.data(), wts.data(), loss.data(), n, k, d); });
        for (int i = 0; i < n; ++i) {
            if (k == 1) {
                double kl = 0; for (int j = 0; j < d; ++j) { double mu = enc[i*2*d+j], lv = enc[i*2*d+d+j]; kl += 0.5 * (mu*mu + std::exp(lv) - lv - 1); }
                check("elbo loss", loss[i], kl - ll[i], 1e-6); check("w", wts[i], 1, 0);
                continue;
            }
            std::vector<double> lw(k); double m = -1e300;
            for (int s = 0; s < k; ++s) {
                double a = ll[i * k + s];
                for (int j = 0; j < d; ++j) { int r = (i*k+s)*d+j; double lv = enc[i*2*d+d+j];
                    // log N(u; 0, I) − log N(u; μ, σ²) = −½u² + ½ε² + ½ log σ²
                    a += -0.5 * u[r]*u[r] + 0.5 * eps[r]*eps[r] + 0.5 * lv; }
                lw[s] = a; m = std::fmax(m, a);
            }
            double z = 0; for (double a : lw) z += std::exp(a - m);
            check("iwae loss", loss[i], -(m + std::log(z / k)), 1e-6);
            for (int s = 0; s < k; ++s) check("w", wts[i*k+s], std::exp(lw[s] - m) / z, 1e-6);
        }
        std::vector<float> dh(n * k * px, 2.0f), w2 = wts;
        int rows = n * k; float c = -0.5f;
        launch((rows * px + 255) / 256, 256, false, [&] { scale_rows(dh.data(), w2.data(), c, rows, px); });
        for (int e = 0; e < rows * px; ++e) check("scale_rows", dh[e], 2.0 * c * wts[e / px], 1e-7);
    }
    // posterior_prior.
    {
        int rows = 9, d = 4;
        std::vector<float> g(rows * d), u(rows * d), lp(rows), g0, lp0;
        for (auto& v : g) v = N(rng); for (auto& v : u) v = N(rng); for (auto& v : lp) v = N(rng);
        g0 = g; lp0 = lp;
        launch(1, 256, false, [&] { posterior_prior(g.data(), u.data(), lp.data(), rows, d); });
        for (int r = 0; r < rows; ++r) { double s = 0; for (int j = 0; j < d; ++j) { s += u[r*d+j]*u[r*d+j]; check("prior g", g[r*d+j], g0[r*d+j] - u[r*d+j], 1e-7); } check("prior lp", lp[r], lp0[r] - 0.5 * s, 1e-6); }
        std::vector<float> g1 = g0;
        launch(1, 256, false, [&] { posterior_prior(g1.data(), u.data(), nullptr, rows, d); });
        for (int e = 0; e < rows * d; ++e) check("prior g (no lp)", g1[e], g0[e] - u[e], 1e-7);
    }
    // The Langevin program's elementwise operations (crate::program's backend on a GPU).
    {
        int n = 300;
        std::vector<float> x(n), src(n), rho(n), g(n), z1(n), z2(n);
        for (int e = 0; e < n; ++e) { x[e] = N(rng); src[e] = N(rng); rho[e] = N(rng); g[e] = N(rng); z1[e] = N(rng); z2[e] = N(rng); }
        auto x0 = x, rho0 = rho;
        unsigned grid = (n + 255) / 256;
        launch(grid, 256, false, [&] { chain_drift(x.data(), src.data(), rho.data(), 0.3f, n); });
        for (int e = 0; e < n; ++e) check("chain_drift", x[e], src[e] + 0.3 * rho[e], 1e-6);
        x = x0;
        launch(grid, 256, false, [&] { chain_drift_add(x.data(), rho.data(), 0.3f, n); });
        for (int e = 0; e < n; ++e) check("chain_drift_add", x[e], x0[e] + 0.3 * rho[e], 1e-6);
        for (float s : {0.0f, 0.7f}) {
            rho = rho0;
            launch(grid, 256, false, [&] { chain_kick(rho.data(), g.data(), z1.data(), 0.9f, 0.2f, s, n); });
            for (int e = 0; e < n; ++e) check("chain_kick", rho[e], 0.9 * rho0[e] + 0.2 * g[e] + s * z1[e], 1e-6);
        }
        x = x0; rho = rho0;
        launch(grid, 256, false, [&] { chain_ou(x.data(), rho.data(), z1.data(), z2.data(), 0.8f, 0.1f, 0.4f, 0.05f, 0.02f, n); });
        for (int e = 0; e < n; ++e) {
            check("chain_ou x", x[e], x0[e] + 0.1 * rho0[e] + 0.05 * z1[e] + 0.02 * z2[e], 1e-6);
            check("chain_ou rho", rho[e], 0.8 * rho0[e] + 0.4 * z1[e], 1e-6);
        }
    }
    std::printf(fails ? "%d FAILED\n" : "all kernel checks passed\n", fails);
    return fails != 0;
}
