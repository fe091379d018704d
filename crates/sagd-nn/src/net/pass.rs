//! A network's passes: forward (plain or on packed weights) and backward, with parameter
//! gradients added, written over or kept as terms and summed in parallel over the parameters.

use super::*;
use crate::linear::*;

/// Elements per task of an activation's pass over a long batch (a convolution's output, 627 200
/// values for 100 of E3's images), below which it stays one task.
const ELEMENTWISE_TASK: usize = 1 << 16;

/// `f(a, b)` on matching pieces of `a` and `b`, side by side on rayon's threads when long: an
/// elementwise pass, so the same bits in any number of pieces.
fn elementwise(a: &mut [f32], b: &[f32], f: impl Fn(&mut [f32], &[f32]) + Sync) {
    if a.len() <= ELEMENTWISE_TASK {
        f(a, b);
    } else {
        use rayon::prelude::*;
        a.par_chunks_mut(ELEMENTWISE_TASK)
            .zip(b.par_chunks(ELEMENTWISE_TASK))
            .for_each(|(a, b)| f(a, b));
    }
}

impl Sequential {
    /// Forward pass over `rows` inputs (rows × input_dim, row-major); the output is
    /// `ws.output()`.
    pub fn forward(&self, params: &[f32], x: &[f32], rows: usize, ws: &mut Workspace) {
        self.forward_packed(params, &PackedWeights::default(), x, rows, ws);
    }

    /// The wide Linear layers' weights of `params`, packed for [`Sequential::forward_packed`], and
    /// with `input_grad` for [`Sequential::backward_packed`]'s ∂L/∂x too, into `packed` (its
    /// memory reused; the panels packed side by side on rayon's threads).
    pub fn pack(&self, params: &[f32], input_grad: bool, packed: &mut PackedWeights) {
        packed.layers.resize_with(self.layers.len(), || None);
        for (i, (l, slot)) in self.layers.iter().zip(&mut packed.layers).enumerate() {
            let Layer::Linear { inp, out } = *l else {
                *slot = None;
                continue;
            };
            if inp * out < PACK_MIN_WEIGHTS {
                *slot = None;
                continue;
            }
            let w = &params[self.offsets[i]..self.offsets[i] + inp * out];
            let pl = slot.get_or_insert_with(|| PackedLayer {
                forward: Panels::default(),
                input_grad: None,
            });
            pl.forward.pack(
                Strided {
                    data: w,
                    rows: 1,
                    cols: inp,
                },
                inp,
                out,
            );
            match (input_grad, &mut pl.input_grad) {
                (true, Some(p)) => p.pack(by_rows(w, inp), out, inp),
                (true, none) => {
                    let mut p = Panels::default();
                    p.pack(by_rows(w, inp), out, inp);
                    *none = Some(p);
                }
                (false, g) => *g = None,
            }
        }
    }

    /// [`Sequential::forward`] with the wide layers' weights `packed` from these `params` by
    /// [`Sequential::pack`].
    pub fn forward_packed(
        &self,
        params: &[f32],
        packed: &PackedWeights,
        x: &[f32],
        rows: usize,
        ws: &mut Workspace,
    ) {
        debug_assert_eq!(params.len(), self.n_params);
        debug_assert_eq!(x.len(), rows * self.inp);
        ws.rows = rows;
        ws.acts.resize_with(self.layers.len() + 1, Vec::new);
        ws.wt.resize_with(self.layers.len(), Default::default);
        ws.derivs.resize_with(self.layers.len(), Vec::new);
        ws.conv.resize_with(self.layers.len(), Default::default);
        ws.acts[0].clear();
        ws.acts[0].extend_from_slice(x);
        // A Linear layer under a ReLU writes the ReLU's output itself, in its product's store.
        let mut fused = false;
        for (i, l) in self.layers.iter().enumerate() {
            if std::mem::take(&mut fused) {
                continue;
            }
            let relu_above = matches!(
                self.layers.get(i + 1),
                Some(Layer::Act {
                    act: Activation::Relu
                })
            );
            let (done, rest) = ws.acts.split_at_mut(i + 1);
            let xin = &done[i];
            let y = &mut rest[0];
            match *l {
                Layer::Linear { inp, out } => {
                    let off = self.offsets[i];
                    let w = &params[off..off + inp * out];
                    let b = &params[off + inp * out..off + inp * out + out];
                    // The ReLU's output, acts[i + 2], in place of the product's.
                    fused = relu_above;
                    let y = if fused { &mut rest[1] } else { y };
                    let ep = if fused {
                        Epilogue::BiasRelu(b)
                    } else {
                        Epilogue::Bias(b)
                    };
                    y.resize(rows * out, 0.0);
                    match packed.layer(i) {
                        Some(pl) => gemm_panels(rows, by_rows(xin, inp), &pl.forward, y, out, ep),
                        None => linear_forward(xin, w, ep, y, (inp, out), &mut ws.wt[i]),
                    }
                }
                Layer::Act {
                    act: Activation::Relu,
                } => {
                    y.resize(xin.len(), 0.0);
                    elementwise(y, xin, |y, x| math::relu_forward(x, y));
                }
                Layer::Act { act } => {
                    y.resize(xin.len(), 0.0);
                    let dy = &mut ws.derivs[i];
                    dy.resize(xin.len(), 0.0);
                    math::forward(act, xin, y, dy);
                }
                Layer::Conv { c_out, .. } => {
                    let (w, b, win) = self.conv_parts(i, params);
                    conv_forward(&win, xin, w, b, y, c_out, &mut ws.conv[i]);
                }
                Layer::ConvT { c_in, .. } => {
                    let (w, b, win) = self.conv_parts(i, params);
                    conv_t_forward(&win, xin, w, b, y, c_in, &mut ws.conv[i]);
                }
            }
        }
    }

    /// Backward pass after [`Sequential::forward`]: `dout` is ∂L/∂output (rows × output_dim).
    /// Adds ∂L/∂params into `dparams` if given, and writes ∂L/∂x into `dx` if given.
    pub fn backward(
        &self,
        params: &[f32],
        ws: &mut Workspace,
        dout: &[f32],
        dparams: Option<&mut [f32]>,
        dx: Option<&mut [f32]>,
    ) {
        let grads = match dparams {
            Some(dp) => ParamGrads::Add(dp),
            None => ParamGrads::Skip,
        };
        self.backward_with(params, ws, dout, grads, dx);
    }

    /// Floats a pass keeps per row with [`ParamGrads::Keep`]: each Linear layer's input and
    /// output widths, each convolution's windows and gradients.
    pub fn terms_per_row(&self) -> usize {
        self.layers
            .iter()
            .map(|l| match *l {
                Layer::Linear { inp, out } => inp + out,
                Layer::Act { .. } => 0,
                Layer::Conv { c_out, .. } => {
                    l.windows().map_or(0, |w| w.count() * (w.width() + c_out))
                }
                Layer::ConvT { c_in, .. } => l
                    .windows()
                    .map_or(0, |w| w.small * w.small * (c_in + w.width()) + w.image()),
            })
            .sum()
    }

    /// Adds ∂L/∂params of the kept passes `parts` into `dparams`, in parallel over groups of
    /// output units of each Linear layer, each summing the parts in order: the
    /// same bits for any number of threads, and as [`Sequential::backward`] on each part in turn.
    pub fn add_param_grads(&self, parts: &[&ParamTerms], dparams: &mut [f32]) {
        use rayon::prelude::*;
        /// Rows j0.. of layer i's W (and of its b, when the bias is the products' own), or the
        /// bias of a transposed convolution.
        enum Task<'a> {
            Rows(usize, usize, &'a mut [f32], Option<&'a mut [f32]>),
            Bias(usize, &'a mut [f32]),
        }
        let mut tasks: Vec<Task<'_>> = Vec::new();
        let mut rest = dparams;
        let mut at = 0;
        for (i, l) in self.layers.iter().enumerate() {
            let Some((inp, out)) = self.product_shape(l) else {
                continue;
            };
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(self.offsets[i] - at);
            let (w, tail) = tail.split_at_mut(inp * out);
            let (b, tail) = tail.split_at_mut(l.n_params() - inp * out);
            rest = tail;
            at = self.offsets[i] + l.n_params();
            let tile = out.div_ceil(TILES_PER_LAYER).max(MIN_TILE);
            if let Layer::ConvT { .. } = l {
                for (k, dw) in w.chunks_mut(tile * inp).enumerate() {
                    tasks.push(Task::Rows(i, k * tile, dw, None));
                }
                tasks.push(Task::Bias(i, b));
            } else {
                for (k, (dw, db)) in w.chunks_mut(tile * inp).zip(b.chunks_mut(tile)).enumerate() {
                    tasks.push(Task::Rows(i, k * tile, dw, Some(db)));
                }
            }
        }
        tasks.into_par_iter().for_each(|task| match task {
            Task::Rows(i, j0, dw, db) => {
                let Some((inp, out)) = self.product_shape(&self.layers[i]) else {
                    return;
                };
                let mut scratch = Vec::new();
                let db = match db {
                    Some(db) => db,
                    None => {
                        scratch.resize(dw.len() / inp, 0.0);
                        &mut scratch[..]
                    }
                };
                for p in parts {
                    linear_param_grad(&p.g[i], &p.x[i], dw, db, (inp, out), j0, Epilogue::Add);
                }
            }
            Task::Bias(i, db) => {
                for p in parts {
                    channel_sums(&p.gb[i], db);
                }
            }
        });
    }

    /// The (inputs, outputs) of layer `l`'s product: a Linear layer's widths, a convolution's
    /// window and channels, a transposed convolution's channels and window.
    fn product_shape(&self, l: &Layer) -> Option<(usize, usize)> {
        match *l {
            Layer::Linear { inp, out } => Some((inp, out)),
            Layer::Act { .. } => None,
            Layer::Conv { c_out, .. } => Some((l.windows()?.width(), c_out)),
            Layer::ConvT { c_in, .. } => Some((c_in, l.windows()?.width())),
        }
    }

    /// [`Sequential::backward`] with ∂L/∂params skipped, added, or kept as terms that
    /// [`Sequential::add_param_grads`] adds later.
    pub fn backward_with(
        &self,
        params: &[f32],
        ws: &mut Workspace,
        dout: &[f32],
        sink: ParamGrads<'_>,
        dx: Option<&mut [f32]>,
    ) {
        self.backward_packed(params, &PackedWeights::default(), ws, dout, sink, dx);
    }

    /// [`Sequential::backward_with`] after [`Sequential::forward_packed`], with the same
    /// `packed` weights.
    pub fn backward_packed(
        &self,
        params: &[f32],
        packed: &PackedWeights,
        ws: &mut Workspace,
        dout: &[f32],
        mut sink: ParamGrads<'_>,
        dx: Option<&mut [f32]>,
    ) {
        if let ParamGrads::Keep(t) = &mut sink {
            t.x.resize_with(self.layers.len(), Vec::new);
            t.g.resize_with(self.layers.len(), Vec::new);
            t.gb.resize_with(self.layers.len(), Vec::new);
        }
        let Workspace {
            rows,
            acts,
            derivs,
            grad,
            grad2,
            conv,
            ..
        } = ws;
        grad.clear();
        grad.extend_from_slice(dout);
        // How the parameter products land: written over the sink, or added into it.
        let lands = match sink {
            ParamGrads::Set(_) => Epilogue::Store,
            _ => Epilogue::Add,
        };
        let mut pass = Backward {
            rows: *rows,
            grad,
            grad2,
            sink,
            lands,
            need_dx: dx.is_some(),
            scaled: false,
        };
        for (i, l) in self.layers.iter().enumerate().rev() {
            match *l {
                Layer::Linear { inp, out } => {
                    pass.linear(self, i, (inp, out), (params, packed), (acts, derivs))
                }
                Layer::Act { act } => pass.activation(act, i, acts, derivs),
                Layer::Conv { .. } | Layer::ConvT { .. } => {
                    pass.conv(self, i, params, &acts[i], &mut conv[i])
                }
            }
        }
        if let Some(dx) = dx {
            dx.copy_from_slice(&pass.grad[..dx.len()]);
        }
    }
}

/// A backward pass under way, from the top layer down: ∂L/∂(the current layer's output) in
/// `grad` (the layer below's written into `grad2`, then the two swapped), where the parameter
/// gradients go, and whether the layer above has already applied an activation's derivative
/// (a Linear layer applies the one below it in its product's epilogue).
struct Backward<'s, 'p> {
    rows: usize,
    grad: &'s mut Vec<f32>,
    grad2: &'s mut Vec<f32>,
    sink: ParamGrads<'p>,
    lands: Epilogue<'static>,
    need_dx: bool,
    scaled: bool,
}

impl Backward<'_, '_> {
    /// Whether layer `i` passes ∂L/∂input down: below it are layers, or the caller asks for dx.
    fn passes_down(&self, i: usize) -> bool {
        i > 0 || self.need_dx
    }

    /// Linear layer `i` (inp → out): its parameter gradients into the sink (or kept as terms),
    /// and ∂L/∂input with the derivative of the activation below it applied.
    fn linear(
        &mut self,
        net: &Sequential,
        i: usize,
        (inp, out): (usize, usize),
        (params, packed): (&[f32], &PackedWeights),
        (acts, derivs): (&[Vec<f32>], &[Vec<f32>]),
    ) {
        let (rows, xin) = (self.rows, &acts[i]);
        let off = net.offsets[i];
        let w = &params[off..off + inp * out];
        match &mut self.sink {
            ParamGrads::Add(dp) | ParamGrads::Set(dp) => {
                let (dw, db) = dp[off..off + inp * out + out].split_at_mut(inp * out);
                linear_param_grad(self.grad, xin, dw, db, (inp, out), 0, self.lands);
            }
            ParamGrads::Keep(t) => {
                t.x[i].clear();
                t.x[i].extend_from_slice(&xin[..rows * inp]);
                t.g[i].clear();
                t.g[i].extend_from_slice(&self.grad[..rows * out]);
            }
            ParamGrads::Skip => {}
        }
        if !self.passes_down(i) {
            return;
        }
        // A ReLU's derivative comes from its output, this layer's input.
        let below = match i.checked_sub(1).map(|j| &net.layers[j]) {
            Some(Layer::Act {
                act: Activation::Relu,
            }) => Epilogue::Positive(xin),
            Some(Layer::Act { .. }) => Epilogue::Scale(&derivs[i - 1][..]),
            _ => Epilogue::Store,
        };
        self.scaled = !matches!(below, Epilogue::Store);
        let (grad, grad2) = (&mut *self.grad, &mut *self.grad2);
        grad2.resize(rows * inp, 0.0);
        match packed.layer(i).and_then(|pl| pl.input_grad.as_ref()) {
            Some(panels) => gemm_panels(rows, by_rows(grad, out), panels, grad2, inp, below),
            None => linear_input_grad(grad, w, grad2, (inp, out), below),
        }
        std::mem::swap(grad, grad2);
    }

    /// Activation layer `i`: its derivative, unless the Linear layer above applied it.
    fn activation(&mut self, act: Activation, i: usize, acts: &[Vec<f32>], derivs: &[Vec<f32>]) {
        if std::mem::take(&mut self.scaled) {
            return;
        }
        match act {
            Activation::Relu => elementwise(self.grad, &acts[i + 1], math::relu_backward),
            _ => elementwise(self.grad, &derivs[i], math::scale),
        }
    }

    /// Convolution or transposed convolution `i` on its input `xin`: its parameter gradients
    /// (or its terms kept) and ∂L/∂input.
    fn conv(
        &mut self,
        net: &Sequential,
        i: usize,
        params: &[f32],
        xin: &[f32],
        buf: &mut ConvBuffers,
    ) {
        let l = &net.layers[i];
        let (w, _, win) = net.conv_parts(i, params);
        let (off, np) = (net.offsets[i], l.n_params());
        let (in_w, out_w) = l.widths().unwrap_or((0, 0));
        let (inp, g) = (self.rows * in_w, &self.grad[..self.rows * out_w]);
        let want_dx = self.passes_down(i);
        if want_dx {
            self.grad2.resize(inp, 0.0);
        }
        // Lazily: below the first layer grad2 may be shorter than its input.
        let dx_buf = want_dx.then(|| &mut self.grad2[..inp]);
        let (dwb, keep) = match &mut self.sink {
            ParamGrads::Add(dp) | ParamGrads::Set(dp) => {
                (Some((&mut dp[off..off + np], self.lands)), None)
            }
            ParamGrads::Keep(t) => (None, Some(&mut **t)),
            ParamGrads::Skip => (None, None),
        };
        let x = &xin[..inp];
        match *l {
            Layer::ConvT { c_in, .. } => {
                conv_t_backward(&win, g, x, w, c_in, buf, dwb, dx_buf);
                if let Some(t) = keep {
                    t.x[i].clear();
                    t.x[i].extend_from_slice(x);
                    win.gather(g, &mut t.g[i]);
                    t.gb[i].clear();
                    t.gb[i].extend_from_slice(g);
                }
            }
            Layer::Conv { c_out, .. } => {
                if let Some(t) = keep {
                    win.gather(x, &mut t.x[i]);
                    t.g[i].clear();
                    t.g[i].extend_from_slice(g);
                }
                conv_backward(&win, g, x, w, c_out, buf, dwb, dx_buf);
            }
            _ => {}
        }
        if want_dx {
            std::mem::swap(self.grad, self.grad2);
        }
        self.scaled = false;
    }
}
