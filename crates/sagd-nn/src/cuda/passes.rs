//! A network's passes on the GPU, layer by layer as the CPU engine takes them.

use super::*;

impl Sequential {
    /// The forward pass on the GPU: `x` holds rows × input_dim values; the output is
    /// [`GpuWorkspace::output`].
    pub fn forward_gpu(
        &self,
        gpu: &Gpu,
        params: &CudaSlice<f32>,
        x: &CudaSlice<f32>,
        rows: usize,
        ws: &mut GpuWorkspace,
    ) -> GpuResult<()> {
        let layers = self.layers();
        ws.rows = rows;
        ws.acts.resize_with(layers.len() + 1, || None);
        ws.derivs.resize_with(layers.len(), || None);
        ws.cols.resize_with(layers.len(), || None);
        let n0 = rows * self.input_dim();
        let a0 = ensure(gpu, &mut ws.acts[0], n0)?;
        gpu.stream
            .memcpy_dtod(&x.slice(..n0), &mut a0.slice_mut(..n0))?;
        let mut width = self.input_dim();
        for (i, l) in layers.iter().enumerate() {
            if let Layer::Act { act } = *l {
                let n = rows * width;
                ensure(gpu, &mut ws.acts[i + 1], n)?;
                let dy = ensure(gpu, &mut ws.derivs[i], n)?;
                let (done, rest) = ws.acts.split_at_mut(i + 1);
                let (xin, y) = (
                    done[i].as_ref().expect("made above"),
                    rest[0].as_mut().expect("made above"),
                );
                let (kind, ni) = (act_code(act), n as i32);
                // SAFETY: x, y and dy have at least n elements.
                unsafe { launch!(gpu, "act_forward", grid(n); &kind, xin, y, dy, &ni) }?;
                continue;
            }
            let Some((_, out_width)) = l.widths() else {
                continue;
            };
            let off = self.offset(i);
            let np = l.n_params();
            ensure(gpu, &mut ws.acts[i + 1], rows * out_width)?;
            let (done, rest) = ws.acts.split_at_mut(i + 1);
            let (xin, y) = (
                done[i].as_ref().expect("made above"),
                rest[0].as_mut().expect("made above"),
            );
            match (*l, l.windows()) {
                (Layer::Linear { inp, out }, _) => {
                    let w = params.slice(off..off + inp * out);
                    let b = params.slice(off + inp * out..off + np);
                    gpu.linear_forward(&w, xin, y, rows, inp, out)?;
                    gpu.add_bias(y, &b, out, rows * out)?;
                }
                (Layer::Conv { c_out, .. }, Some(win)) => {
                    // y = windows(x) · Wᵀ + b, one row per window.
                    let wrows = rows * win.count();
                    let cols = ensure(gpu, &mut ws.cols[i], wrows * win.width())?;
                    gpu.windows(true, &win, rows, xin, cols)?;
                    let w = params.slice(off..off + np - c_out);
                    let b = params.slice(off + np - c_out..off + np);
                    gpu.linear_forward(&w, &*cols, y, wrows, win.width(), c_out)?;
                    gpu.add_bias(y, &b, c_out, wrows * c_out)?;
                }
                (Layer::ConvT { c_in, c_out, .. }, Some(win)) => {
                    // y = scatter(x · Wᵀ) + b per channel, one product row per input pixel.
                    let prows = rows * win.count();
                    let cols = ensure(gpu, &mut ws.cols[i], prows * win.width())?;
                    let w = params.slice(off..off + np - c_out);
                    let b = params.slice(off + np - c_out..off + np);
                    gpu.linear_forward(&w, xin, cols, prows, c_in, win.width())?;
                    gpu.windows(false, &win, rows, cols, y)?;
                    gpu.add_bias(y, &b, c_out, rows * out_width)?;
                }
                _ => return Err(GpuError::Unsupported(*l)),
            }
            width = out_width;
        }
        Ok(())
    }

    /// Rows of the longest product of a pass over `rows` rows: a convolution's windows, a
    /// transposed convolution's output pixels (its bias gradient sums over them).
    fn product_rows(&self, rows: usize) -> usize {
        self.layers()
            .iter()
            .map(|l| match (l, l.windows()) {
                (Layer::Conv { .. }, Some(w)) => rows * w.count(),
                (Layer::ConvT { .. }, Some(w)) => rows * w.big * w.big,
                _ => rows,
            })
            .max()
            .unwrap_or(rows)
            .max(rows)
    }

    /// The backward pass on the GPU after [`Sequential::forward_gpu`]: `dout` is ∂L/∂output
    /// (rows × output_dim). Adds ∂L/∂params into `dparams` if given, and writes ∂L/∂x into the
    /// first rows × input_dim elements of `dx` if given.
    pub fn backward_gpu(
        &self,
        gpu: &Gpu,
        params: &CudaSlice<f32>,
        ws: &mut GpuWorkspace,
        dout: &CudaSlice<f32>,
        mut dparams: Option<&mut CudaSlice<f32>>,
        dx: Option<&mut CudaSlice<f32>>,
    ) -> GpuResult<()> {
        let rows = ws.rows;
        self.ensure_backward_buffers(gpu, ws)?;
        let GpuWorkspace {
            acts,
            derivs,
            cols,
            dcols,
            grad,
            grad2,
            ones,
            ..
        } = ws;
        let (mut grad, mut grad2) = (
            grad.as_mut().expect("made above"),
            grad2.as_mut().expect("made above"),
        );
        let ones = ones.as_ref().expect("made above");
        let n_out = rows * self.output_dim();
        gpu.stream
            .memcpy_dtod(&dout.slice(..n_out), &mut grad.slice_mut(..n_out))?;
        let need_dx = dx.is_some();
        let mut width = self.output_dim();
        for (i, l) in self.layers().iter().enumerate().rev() {
            if let Layer::Act { .. } = l {
                let d = derivs[i].as_ref().expect("forward_gpu ran");
                let n = (rows * width) as i32;
                // SAFETY: both hold at least n elements.
                unsafe { launch!(gpu, "scale", grid(n as usize); &mut *grad, d, &n) }?;
                continue;
            }
            let Some((in_width, _)) = l.widths() else {
                continue;
            };
            let back = LayerBack {
                layer: i,
                rows,
                xin: acts[i].as_ref().expect("forward_gpu ran"),
                cols: cols[i].as_ref(),
                ones,
                input_grad: i > 0 || need_dx,
            };
            let grads = (&mut *grad, &mut *grad2);
            if self.layer_backward_gpu(
                gpu,
                params,
                back,
                dparams.as_deref_mut(),
                dcols.as_mut(),
                grads,
            )? {
                std::mem::swap(&mut grad, &mut grad2);
            }
            width = in_width;
        }
        if let Some(dx) = dx {
            let n = rows * self.input_dim();
            gpu.stream
                .memcpy_dtod(&grad.slice(..n), &mut dx.slice_mut(..n))?;
        }
        Ok(())
    }

    /// The buffers of a backward pass over the workspace's rows: two gradient buffers as wide as
    /// the widest layer, the convolutions' window gradients, and ones for the bias sums.
    fn ensure_backward_buffers(&self, gpu: &Gpu, ws: &mut GpuWorkspace) -> GpuResult<()> {
        let (layers, rows) = (self.layers(), ws.rows);
        let widest = layers
            .iter()
            .filter_map(|l| l.widths())
            .map(|(i, o)| i.max(o))
            .max()
            .unwrap_or(1)
            .max(self.input_dim())
            .max(self.output_dim());
        ensure(gpu, &mut ws.grad, rows * widest)?;
        ensure(gpu, &mut ws.grad2, rows * widest)?;
        let dcols_len = layers
            .iter()
            .filter_map(|l| l.windows())
            .map(|w| rows * w.count() * w.width())
            .max()
            .unwrap_or(0);
        if dcols_len > 0 {
            ensure(gpu, &mut ws.dcols, dcols_len)?;
        }
        let n_ones = self.product_rows(rows);
        if ws.ones.as_ref().is_none_or(|o| o.len() < n_ones.max(1)) {
            let mut ones = gpu.zeros(n_ones)?;
            gpu.fill(&mut ones, 1.0)?;
            ws.ones = Some(ones);
        }
        Ok(())
    }

    /// One product layer's backward step (Linear, Conv, ConvT): ∂L/∂params added into
    /// `dparams` if given and, if the step asks, ∂L/∂(its input) written into the second of
    /// `grads` from ∂L/∂(its output) in the first. Returns whether it wrote it (the caller then
    /// swaps the two).
    fn layer_backward_gpu(
        &self,
        gpu: &Gpu,
        params: &CudaSlice<f32>,
        b: LayerBack<'_>,
        dparams: Option<&mut CudaSlice<f32>>,
        dcols: Option<&mut CudaSlice<f32>>,
        (grad, grad2): (&mut CudaSlice<f32>, &mut CudaSlice<f32>),
    ) -> GpuResult<bool> {
        let l = self.layers()[b.layer];
        let (off, np, rows) = (self.offset(b.layer), l.n_params(), b.rows);
        match (l, l.windows()) {
            (Layer::Linear { inp, out }, _) => {
                if let Some(dp) = dparams {
                    let dw = &mut dp.slice_mut(off..off + inp * out);
                    gpu.weight_grad(b.xin, &*grad, dw, rows, (inp, out))?;
                    let db = &mut dp.slice_mut(off + inp * out..off + np);
                    gpu.bias_grad(&*grad, db, b.ones, rows, out)?;
                }
                if b.input_grad {
                    let w = params.slice(off..off + inp * out);
                    gpu.linear_input_grad(&w, &*grad, grad2, rows, (inp, out))?;
                }
            }
            (Layer::Conv { c_out, .. }, Some(win)) => {
                let wrows = rows * win.count();
                let shape = (win.width(), c_out);
                let nw = np - c_out;
                if let Some(dp) = dparams {
                    let c = b.cols.expect("forward_gpu ran");
                    let dw = &mut dp.slice_mut(off..off + nw);
                    gpu.weight_grad(c, &*grad, dw, wrows, shape)?;
                    let db = &mut dp.slice_mut(off + nw..off + np);
                    gpu.bias_grad(&*grad, db, b.ones, wrows, c_out)?;
                }
                if b.input_grad {
                    let dc = dcols.expect("made by ensure_backward_buffers");
                    let w = params.slice(off..off + nw);
                    gpu.linear_input_grad(&w, &*grad, dc, wrows, shape)?;
                    gpu.windows(false, &win, rows, dc, grad2)?;
                }
            }
            (Layer::ConvT { c_in, c_out, .. }, Some(win)) => {
                let prows = rows * win.count();
                let shape = (c_in, win.width());
                let nw = np - c_out;
                let dc = dcols.expect("made by ensure_backward_buffers");
                gpu.windows(true, &win, rows, grad, dc)?;
                if let Some(dp) = dparams {
                    let dw = &mut dp.slice_mut(off..off + nw);
                    gpu.weight_grad(b.xin, &*dc, dw, prows, shape)?;
                    // db[c] += Σ over output pixels of ∂L/∂y[.., c].
                    let db = &mut dp.slice_mut(off + nw..off + np);
                    gpu.bias_grad(&*grad, db, b.ones, rows * win.big * win.big, c_out)?;
                }
                if b.input_grad {
                    let w = params.slice(off..off + nw);
                    gpu.linear_input_grad(&w, &*dc, grad2, prows, shape)?;
                }
            }
            _ => return Err(GpuError::Unsupported(l)),
        }
        Ok(b.input_grad)
    }
}

/// What one layer's backward step reads besides the gradients: which layer, the pass's rows, the
/// layer's input and its windows (from the forward pass), ones for the bias sums, and whether
/// ∂L/∂(its input) is wanted (always but at the first layer when ∂L/∂x is not).
struct LayerBack<'a> {
    layer: usize,
    rows: usize,
    xin: &'a CudaSlice<f32>,
    cols: Option<&'a CudaSlice<f32>>,
    ones: &'a CudaSlice<f32>,
    input_grad: bool,
}
