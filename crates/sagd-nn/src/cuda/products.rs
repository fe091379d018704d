//! The layers' device operations: cuBLAS products for Linear layers (row-major data read as
//! column-major transposes), the windows of a convolution, the bias added to a product.

use super::*;

impl Gpu {
    /// Row-major `y (rows × out) = x (rows × inp) · Wᵀ`, W row-major (out × inp): in cuBLAS's
    /// column-major terms yᵀ = op_T(W as inp × out) · xᵀ.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn linear_forward<W: DevicePtr<f32>, X: DevicePtr<f32>, Y: DevicePtrMut<f32>>(
        &self,
        w: &W,
        x: &X,
        y: &mut Y,
        rows: usize,
        inp: usize,
        out: usize,
    ) -> GpuResult<()> {
        let cfg = GemmConfig {
            transa: CUBLAS_OP_T,
            transb: CUBLAS_OP_N,
            m: out as i32,
            n: rows as i32,
            k: inp as i32,
            alpha: 1.0f32,
            lda: inp as i32,
            ldb: inp as i32,
            beta: 0.0f32,
            ldc: out as i32,
        };
        // SAFETY: the shapes match the buffers' lengths (checked by the callers' layouts).
        unsafe { self.blas.gemm(cfg, w, x, y) }?;
        Ok(())
    }

    /// A product's weight gradient from its input `x` (rows × inp) and ∂L/∂y `g` (rows × out),
    /// added: dW (out × inp, row-major) += gᵀ x.
    pub(crate) fn weight_grad<X, G, DW>(
        &self,
        x: &X,
        g: &G,
        dw: &mut DW,
        rows: usize,
        (inp, out): (usize, usize),
    ) -> GpuResult<()>
    where
        X: DevicePtr<f32>,
        G: DevicePtr<f32>,
        DW: DevicePtrMut<f32>,
    {
        // dWᵀ (inp × out) += xᵀ (inp × rows) · g (rows × out), column-major.
        let cfg = GemmConfig {
            transa: CUBLAS_OP_N,
            transb: CUBLAS_OP_T,
            m: inp as i32,
            n: out as i32,
            k: rows as i32,
            alpha: 1.0f32,
            lda: inp as i32,
            ldb: out as i32,
            beta: 1.0f32,
            ldc: inp as i32,
        };
        // SAFETY: x holds rows·inp values, g rows·out, dw inp·out.
        unsafe { self.blas.gemm(cfg, x, g, dw) }?;
        Ok(())
    }

    /// A bias gradient, added: db (out) += Σ_rows g (rows × out), with `ones` (at least `rows`).
    pub(crate) fn bias_grad<G: DevicePtr<f32>, DB: DevicePtrMut<f32>>(
        &self,
        g: &G,
        db: &mut DB,
        ones: &CudaSlice<f32>,
        rows: usize,
        out: usize,
    ) -> GpuResult<()> {
        // db (out) += g (out × rows, column-major) · 1.
        let cfg = GemvConfig {
            trans: CUBLAS_OP_N,
            m: out as i32,
            n: rows as i32,
            alpha: 1.0f32,
            lda: out as i32,
            incx: 1,
            beta: 1.0f32,
            incy: 1,
        };
        // SAFETY: g holds rows·out values, ones at least rows, db out.
        unsafe { self.blas.gemv(cfg, g, ones, db) }?;
        Ok(())
    }

    /// A Linear layer's input gradient: dx (rows × inp) = g (rows × out) · W, W row-major
    /// (out × inp).
    pub(crate) fn linear_input_grad<W, G, DX>(
        &self,
        w: &W,
        g: &G,
        dx: &mut DX,
        rows: usize,
        (inp, out): (usize, usize),
    ) -> GpuResult<()>
    where
        W: DevicePtr<f32>,
        G: DevicePtr<f32>,
        DX: DevicePtrMut<f32>,
    {
        // dxᵀ (inp × rows) = W as (inp × out) · gᵀ (out × rows).
        let cfg = GemmConfig {
            transa: CUBLAS_OP_N,
            transb: CUBLAS_OP_N,
            m: inp as i32,
            n: rows as i32,
            k: out as i32,
            alpha: 1.0f32,
            lda: inp as i32,
            ldb: out as i32,
            beta: 0.0f32,
            ldc: inp as i32,
        };
        // SAFETY: w holds inp·out values, g rows·out, dx rows·inp.
        unsafe { self.blas.gemm(cfg, w, g, dx) }?;
        Ok(())
    }

    /// The windows of `images` images: gathered from `src` (images × big²·ch) into `dst`
    /// (images·small² × k²·ch) with `gather`, else scattered back with sums (the adjoint).
    pub(crate) fn windows(
        &self,
        gather: bool,
        win: &Windows,
        images: usize,
        src: &CudaSlice<f32>,
        dst: &mut CudaSlice<f32>,
    ) -> GpuResult<()> {
        let n = if gather {
            images * win.count() * win.width()
        } else {
            images * win.image()
        };
        let [im, big, small, k, stride, pad, ch] = [
            images,
            win.big,
            win.small,
            win.k,
            win.stride,
            win.pad,
            win.channels,
        ]
        .map(|v| v as i32);
        // SAFETY: src and dst hold the images and windows of these shapes.
        unsafe {
            launch!(self, if gather { "im2col" } else { "col2im" }, grid(n);
                src, dst, &im, &big, &small, &k, &stride, &pad, &ch)
        }?;
        Ok(())
    }

    /// y[r, j] += b[j] for the first rows·out values of y.
    pub(crate) fn add_bias(
        &self,
        y: &mut CudaSlice<f32>,
        b: &CudaView<'_, f32>,
        out: usize,
        n: usize,
    ) -> GpuResult<()> {
        let (o, ni) = (out as i32, n as i32);
        // SAFETY: y has n elements and b has out.
        unsafe { launch!(self, "add_bias", grid(n); y, b, &o, &ni) }?;
        Ok(())
    }
}
