//! Reverse-mode derivatives for [`LogJoint`](super::LogJoint) models with long latents: a number
//! type, [`Rev`], that records each operation on its thread's tape, so that one evaluation and one
//! backward sweep give the derivative with respect to every input. Forward-mode dual numbers take
//! one evaluation per four inputs, which makes a gradient O(d²) where the model is O(d): at a
//! latent of 300 coordinates, 75 evaluations.
//!
//! Written here rather than taken from a crate: a user's model is generic over [`Scalar`], which
//! is `num-dual`'s `DualNum`, and Rust's orphan rule lets no crate's tape number implement it.
//! The local derivatives of the elementary functions come from `num-dual` itself (one [`Dual64`]
//! evaluation each), so only the tape and the arithmetic are ours.

use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};

use num_dual::Dual64;

use crate::error::LogpError;

mod number;

/// A number on a tape: its value, and where its operation was recorded.
///
/// Outside [`Rev::gradient`] (or on another thread than the one taking the gradient) arithmetic still
/// gives the right values, but the results carry no derivative and make the gradient fail with an
/// error instead of returning wrong numbers.
#[derive(Clone, Copy, Debug)]
pub struct Rev {
    value: f64,
    node: u32,
    tape: u32,
}

/// `tape` of a constant: a number with no derivative, valid on any tape.
const CONSTANT: u32 = 0;
/// `tape` of a number computed off its tape (another thread, or after its gradient ended).
const LOST: u32 = u32::MAX;
/// The node every tape starts with: the parent of nodes with fewer than two, where the sweep
/// adds their (zero) contributions so that it needs no branch.
const SINK: u32 = 0;

/// One recorded operation: its (up to two) parents and the partial derivatives with respect to
/// them.
#[derive(Clone, Copy)]
struct Node {
    a: u32,
    b: u32,
    da: f64,
    db: f64,
}

const LEAF: Node = Node {
    a: SINK,
    b: SINK,
    da: 0.0,
    db: 0.0,
};

/// One gradient's record.
struct Tape {
    id: u32,
    nodes: Vec<Node>,
}

thread_local! {
    /// The tape of the gradient whose function runs on this thread now (null when none). Read
    /// at every operation, so it has no destructor to register.
    static CURRENT: Cell<*mut Tape> = const { Cell::new(ptr::null_mut()) };
    /// The last gradient's buffers, so that the next allocates nothing.
    static SPARE: Cell<(Vec<Node>, Vec<f64>)> = const { Cell::new((Vec::new(), Vec::new())) };
}

/// Tape ids, unique among the gradients running at once.
static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// Makes a tape this thread's current one while it lives, and puts the outer one back when it
/// ends, also when the user's function panics.
struct Recording {
    tape: *mut Tape,
    outer: *mut Tape,
}

impl Recording {
    fn start(id: u32, nodes: Vec<Node>) -> Self {
        let tape = Box::into_raw(Box::new(Tape { id, nodes }));
        Recording {
            tape,
            outer: CURRENT.with(|c| c.replace(tape)),
        }
    }

    /// Ends the recording and hands the tape back.
    fn finish(self) -> Box<Tape> {
        let this = std::mem::ManuallyDrop::new(self);
        CURRENT.with(|c| c.set(this.outer));
        // SAFETY: `tape` came from `Box::into_raw` in `start`, and with CURRENT restored no
        // pointer to it is left.
        unsafe { Box::from_raw(this.tape) }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.outer));
        // SAFETY: as in `finish` (which forgets `self`, so this runs only on an unwind).
        drop(unsafe { Box::from_raw(self.tape) });
    }
}

impl Rev {
    /// A constant: no derivative.
    #[inline]
    pub fn constant(value: f64) -> Self {
        Rev {
            value,
            node: SINK,
            tape: CONSTANT,
        }
    }

    /// The value.
    #[inline]
    pub fn value(self) -> f64 {
        self.value
    }

    #[inline(always)]
    fn record(tape: u32, node: Node, value: f64) -> Self {
        let current = CURRENT.with(|c| c.get());
        // SAFETY: a non-null CURRENT points at the tape a `Recording` on this thread owns, which
        // outlives the user's function it was set for; no reference to it is held meanwhile, and
        // this one ends before anything else can reach it.
        match unsafe { current.as_mut() } {
            Some(t) if t.id == tape => {
                let index = t.nodes.len() as u32;
                t.nodes.push(node);
                Rev {
                    value,
                    node: index,
                    tape,
                }
            }
            _ => Rev {
                value,
                node: SINK,
                tape: LOST,
            },
        }
    }

    /// f(self) with f'(self) = `d`.
    #[inline(always)]
    fn unary(self, value: f64, d: f64) -> Self {
        if self.tape == CONSTANT {
            return Rev::constant(value);
        }
        if d == 1.0 {
            // A shift by a constant (x ± c) passes its adjoint on unchanged: it needs no node of
            // its own, and a latent series' terms (z_t − x_t, log σ + …) record a fifth fewer.
            return Rev {
                value,
                node: self.node,
                tape: self.tape,
            };
        }
        let node = Node {
            a: self.node,
            b: SINK,
            da: d,
            db: 0.0,
        };
        Rev::record(self.tape, node, value)
    }

    /// f(self, other) with partial derivatives `da`, `db`.
    #[inline(always)]
    fn binary(self, other: Rev, value: f64, da: f64, db: f64) -> Self {
        match (self.tape, other.tape) {
            (CONSTANT, _) => other.unary(value, db),
            (_, CONSTANT) => self.unary(value, da),
            (s, o) => {
                let tape = if s == o { s } else { LOST };
                let node = Node {
                    a: self.node,
                    b: other.node,
                    da,
                    db,
                };
                Rev::record(tape, node, value)
            }
        }
    }

    /// f(self) for an elementary function, its derivative from `num-dual`.
    #[inline]
    fn through(self, f: impl Fn(Dual64) -> Dual64) -> Self {
        let y = f(Dual64::new(self.value, 1.0));
        self.unary(y.re, y.eps)
    }
}

impl Rev {
    /// The value of `f` at `v` and its gradient into `out`, by one evaluation of `f` on a fresh
    /// tape and one backward sweep: about the cost of a few evaluations, whatever `v`'s length.
    ///
    /// # Errors
    /// [`LogpError::NonFinite`] when the value or a derivative is not finite;
    /// [`LogpError::Fatal`] when `f`'s result lost its derivatives: its numbers were computed on
    /// another thread, or `f` used this gradient's numbers inside another gradient.
    pub fn gradient(
        v: &[f64],
        f: impl FnOnce(&[Rev]) -> Rev,
        out: &mut [f64],
    ) -> Result<f64, LogpError> {
        let value = record_and_sweep(v, f, out).map_err(|()| {
            LogpError::Fatal(
                "log_joint's result lost its derivatives: its numbers were computed on another \
                 thread (or inside another gradient); compute log_joint on the calling thread"
                    .to_string(),
            )
        })?;
        for &g in out.iter() {
            finite(g)?;
        }
        finite(value)
    }
}

fn finite(v: f64) -> Result<f64, LogpError> {
    if v.is_finite() {
        Ok(v)
    } else {
        Err(LogpError::NonFinite)
    }
}

/// [`Rev::gradient`] before its checks. `Err(())` when the result did not come from this tape.
fn record_and_sweep(v: &[f64], f: impl FnOnce(&[Rev]) -> Rev, out: &mut [f64]) -> Result<f64, ()> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed) % (LOST - 1) + 1;
    let (mut nodes, mut adj) = SPARE.with(Cell::take);
    nodes.clear();
    nodes.push(LEAF);
    nodes.extend(v.iter().map(|_| LEAF));
    let inputs: Vec<Rev> = (0..v.len())
        .map(|k| Rev {
            value: v[k],
            node: k as u32 + 1,
            tape: id,
        })
        .collect();
    let recording = Recording::start(id, nodes);
    let y = f(&inputs);
    let tape = recording.finish();
    let ok = y.tape == id || y.tape == CONSTANT;
    out.iter_mut().for_each(|g| *g = 0.0);
    if y.tape == id {
        let nodes = &tape.nodes[..=y.node as usize];
        adj.clear();
        adj.resize(nodes.len(), 0.0);
        adj[y.node as usize] = 1.0;
        // The sink and the inputs (leaves) have no parents. A node's parent is most often the
        // node just before it: its share is carried in a register to the next iteration instead
        // of through memory, which would make each step wait for the last one's store.
        let mut carry = 0.0;
        for k in (1 + v.len()..nodes.len()).rev() {
            let g = adj[k] + carry;
            carry = 0.0;
            // Nodes off the path to the result have no adjoint; skipping them keeps an
            // infinite partial derivative there from reaching the inputs as 0 · ∞.
            if g != 0.0 {
                let n = nodes[k];
                let previous = k as u32 - 1;
                if n.a == previous {
                    carry = g * n.da;
                } else {
                    adj[n.a as usize] += g * n.da;
                }
                if n.b == previous {
                    carry += g * n.db;
                } else if n.b != SINK {
                    adj[n.b as usize] += g * n.db;
                }
            }
        }
        adj[v.len()] += carry;
        out.copy_from_slice(&adj[1..=v.len()]);
    }
    SPARE.with(|s| s.set((tape.nodes, adj)));
    if ok {
        Ok(y.value)
    } else {
        Err(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Scalar;
    use num_traits::Zero;

    fn grad(v: &[f64], f: impl FnOnce(&[Rev]) -> Rev) -> (f64, Vec<f64>) {
        let mut out = vec![f64::NAN; v.len()];
        let y = record_and_sweep(v, f, &mut out).expect("the result is on the tape");
        (y, out)
    }

    /// Every operation's derivative against the forward-mode dual number's, input by input.
    #[test]
    fn matches_dual_numbers_on_every_operation() {
        fn f<S: Scalar>(x: &[S]) -> S {
            let (a, b, c) = (x[0], x[1], x[2]);
            let mut s = a * b - c / a + a.powi(3) + b.powf(1.7) + a.sqrt() - b.cbrt()
                + (a * 0.3).exp()
                + b.exp2()
                + c.exp_m1()
                + a.ln()
                + b.log(3.0)
                + a.log2()
                + b.log10()
                + c.ln_1p()
                + a.sin()
                + b.cos()
                + c.tan()
                + c.asin()
                + c.acos()
                + a.atan()
                + a.atan2(b)
                + c.sinh()
                + c.cosh()
                + c.tanh()
                + a.asinh()
                + b.acosh()
                + c.atanh()
                + a.sph_j0()
                + b.sph_j1()
                + c.sph_j2()
                + a.ln_gamma()
                + a.recip()
                + (-c).abs()
                + a.mul_add(b, c);
            s -= a;
            s *= 1.1;
            s /= b;
            s += (c * c).powd(a);
            s
        }
        let v = [1.3, 2.1, 0.4];
        let (y, g) = grad(&v, f);
        assert_eq!(y, f(&v));
        for (k, gk) in g.iter().enumerate() {
            let x: Vec<Dual64> = (0..3)
                .map(|j| Dual64::new(v[j], if j == k { 1.0 } else { 0.0 }))
                .collect();
            let want = f(&x).eps;
            assert!(
                (gk - want).abs() <= 1e-12 * want.abs().max(1.0),
                "input {k}: {gk} against {want}"
            );
        }
    }

    /// `%`, which `num-dual` leaves unimplemented: ∂(a % b)/∂a = 1, ∂/∂b = −trunc(a / b).
    #[test]
    fn remainder_has_the_derivatives_of_a_minus_b_times_the_quotient() {
        let (y, g) = grad(&[7.5, 2.0], |x| x[0] % x[1]);
        assert_eq!((y, g), (1.5, vec![1.0, -3.0]));
    }

    /// An input used many times along a chain, as in a latent series: the adjoints add up.
    #[test]
    fn long_chains_sum_every_use() {
        let v: Vec<f64> = (0..300).map(|t| (t as f64 * 0.37).sin()).collect();
        let (y, g) = grad(&v, |z| {
            let mut s = Rev::zero();
            for t in 1..z.len() {
                let e = z[t] - z[t - 1] * 0.9;
                s -= e * e * 0.5;
            }
            s
        });
        let mut want = vec![0.0; v.len()];
        let mut value = 0.0;
        for t in 1..v.len() {
            let e = v[t] - 0.9 * v[t - 1];
            value -= 0.5 * e * e;
            want[t] -= e;
            want[t - 1] += 0.9 * e;
        }
        assert!((y - value).abs() <= 1e-12 * value.abs());
        for (a, b) in g.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-12, "{a} against {b}");
        }
    }

    #[test]
    fn a_constant_result_has_no_gradient_and_inputs_left_unused_get_zero() {
        let (y, g) = grad(&[1.0, 2.0], |_| Rev::constant(5.0));
        assert_eq!((y, g), (5.0, vec![0.0, 0.0]));
        let (y, g) = grad(&[1.0, 2.0], |x| x[1] * x[1]);
        assert_eq!((y, g), (4.0, vec![0.0, 4.0]));
    }

    /// Numbers carried to another thread lose their tape, and the gradient says so instead of
    /// returning a wrong one; the tape is left as it was.
    #[test]
    fn numbers_taken_off_their_thread_fail_the_gradient() {
        let mut out = [0.0; 2];
        let r = record_and_sweep(
            &[1.0, 2.0],
            |x| {
                let (a, b) = (x[0], x[1]);
                std::thread::scope(|s| s.spawn(move || a * b).join().expect("joins"))
            },
            &mut out,
        );
        assert_eq!(r, Err(()));
        let (y, g) = grad(&[3.0], |x| x[0] * x[0]);
        assert_eq!((y, g), (9.0, vec![6.0]));
    }

    /// A panic in the function unwinds through the recording, which puts the thread's tape
    /// back: the next gradient on this thread is right.
    #[test]
    fn a_panic_in_the_function_leaves_the_tape_usable() {
        let mut out = [0.0];
        let caught = std::panic::catch_unwind(|| {
            let mut out = [0.0];
            let _ = record_and_sweep(
                &[2.0],
                |x| -> Rev { panic!("in the model at {}", x[0]) },
                &mut out,
            );
        });
        assert!(caught.is_err());
        assert!(CURRENT.with(|c| c.get()).is_null());
        assert_eq!(record_and_sweep(&[3.0], |x| x[0] * x[0], &mut out), Ok(9.0));
        assert_eq!(out, [6.0]);
    }

    /// A gradient taken inside another's function works on its own inputs; the outer one's
    /// numbers used inside it fail it, and the outer gradient is unharmed.
    #[test]
    fn nested_gradients_keep_their_tapes_apart() {
        let (y, g) = grad(&[2.0], |x| {
            let mut inner = [0.0];
            let v = record_and_sweep(&[3.0], |u| u[0] * u[0], &mut inner).expect("own inputs");
            assert_eq!((v, inner), (9.0, [6.0]));
            assert_eq!(
                record_and_sweep(&[3.0], |u| u[0] * x[0], &mut inner),
                Err(())
            );
            x[0] * x[0] * x[0]
        });
        assert_eq!((y, g), (8.0, vec![12.0]));
    }
}
