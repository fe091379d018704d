//! Which vector instructions the hand-written kernels use: the widest this CPU has, or a narrower
//! one named by the environment variable [`ENV`] (`SAGD_CPU_CAPABILITY=avx2`, as PyTorch's
//! `ATEN_CPU_CAPABILITY`), so that every path can be run, tested and timed on one machine. Every
//! path gives the same bits: the kernels differ only in how many fused multiply-add chains they
//! run side by side.

use std::sync::OnceLock;

/// The environment variable that narrows the kernels' instruction set.
#[doc(hidden)]
pub const ENV: &str = "SAGD_CPU_CAPABILITY";

/// An instruction set the kernels are written for, narrowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    /// The architecture's baseline: scalar code (with hardware FMA where the compiler may use
    /// it), and on aarch64 the products' NEON tiles (NEON is in every aarch64 CPU).
    Portable,
    /// AVX2 with FMA: 8-lane registers, 16 of them.
    Avx2,
    /// AVX-512F: 16-lane registers, 32 of them.
    Avx512,
}

impl Capability {
    /// The widest this CPU runs.
    pub fn detected() -> Capability {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Capability::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Capability::Avx2;
            }
        }
        Capability::Portable
    }

    /// Its name, as [`ENV`] takes it.
    pub fn name(self) -> &'static str {
        match self {
            Capability::Portable => "portable",
            Capability::Avx2 => "avx2",
            Capability::Avx512 => "avx512",
        }
    }

    /// The capability [`ENV`]'s `value` asks for on a CPU that has `detected`, and a note when
    /// the request cannot be followed (an unknown name, or more than the CPU has).
    pub fn requested(value: Option<&str>, detected: Capability) -> (Capability, Option<String>) {
        let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
            return (detected, None);
        };
        let asked = match v.to_ascii_lowercase().as_str() {
            "portable" | "default" | "scalar" => Capability::Portable,
            "avx2" => Capability::Avx2,
            "avx512" | "avx512f" => Capability::Avx512,
            _ => {
                return (
                    detected,
                    Some(format!(
                        "{ENV}={v} is not a capability: use avx512, avx2 or portable; running {}",
                        detected.name()
                    )),
                )
            }
        };
        if asked > detected {
            return (
                detected,
                Some(format!(
                    "{ENV}={v}: this CPU has no {}; running {}",
                    asked.name(),
                    detected.name()
                )),
            );
        }
        (asked, None)
    }
}

/// The capability the kernels use in this process: [`Capability::detected`], narrowed by
/// [`ENV`] (read once; a request the CPU cannot follow is said once on stderr and ignored).
pub fn capability() -> Capability {
    static CHOSEN: OnceLock<Capability> = OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let value = std::env::var(ENV).ok();
        let (c, note) = Capability::requested(value.as_deref(), Capability::detected());
        if let Some(n) = note {
            eprintln!("warning: {n}");
        }
        c
    })
}

/// The instruction set [`vectorized!`] loops run: [`capability`], where AVX-512 also needs the
/// extensions its copy is compiled with (those of Ice Lake and later: LLVM vectorizes the
/// normals' generator only with them); on an AVX-512 CPU without them (Skylake-X), the AVX2
/// copy. The products' kernels need AVX-512F alone.
#[doc(hidden)]
pub fn loops_capability() -> Capability {
    static CHOSEN: OnceLock<Capability> = OnceLock::new();
    *CHOSEN.get_or_init(|| match capability() {
        Capability::Avx512 if wide_loops() => Capability::Avx512,
        Capability::Portable => Capability::Portable,
        _ => Capability::Avx2,
    })
}

/// Whether the CPU has every extension of the AVX-512 copy of a [`vectorized!`] loop.
fn wide_loops() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        has!("avx512f")
            && has!("avx512bw")
            && has!("avx512cd")
            && has!("avx512dq")
            && has!("avx512vl")
            && has!("avx512ifma")
            && has!("avx512vbmi")
            && has!("avx512vbmi2")
            && has!("avx512vnni")
            && has!("avx512bitalg")
            && has!("avx512vpopcntdq")
            && has!("gfni")
            && has!("vaes")
            && has!("vpclmulqdq")
            && has!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Defines a function whose body is compiled three times — for AVX-512 (with Ice Lake's
/// extensions), for AVX2 with FMA, and portably — and runs the copy for [`capability`]
/// ([`loops_capability`]), so that
/// `SAGD_CPU_CAPABILITY` reaches the element-wise loops as it does the products. The body is
/// the same source, so the copies give the same bits wherever it asks for no fused
/// multiply-add (Rust never fuses on its own). Arguments are plain names (rebind inside the
/// body for `mut`); generic parameters take one bound each, after the lifetimes, each of
/// which is followed by a comma.
#[macro_export]
#[doc(hidden)]
macro_rules! vectorized {
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident
        $(< $($lt:lifetime ,)* $($g:ident : $bound:path),* $(,)? >)?
        ( $($arg:ident : $ty:ty),* $(,)? ) $(-> $ret:ty)?
        $body:block
    ) => {
        $(#[$meta])*
        $vis fn $name $(< $($lt,)* $($g: $bound),* >)? ( $($arg: $ty),* ) $(-> $ret)? {
            #[inline(always)]
            fn body $(< $($lt,)* $($g: $bound),* >)? ( $($arg: $ty),* ) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512bitalg,avx512bw,avx512cd,avx512dq,avx512f,avx512ifma,avx512vbmi,avx512vbmi2,avx512vl,avx512vnni,avx512vpopcntdq,fma,gfni,vaes,vpclmulqdq,avx2")]
                unsafe fn wide $(< $($lt,)* $($g: $bound),* >)? ( $($arg: $ty),* ) $(-> $ret)? {
                    body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn narrow $(< $($lt,)* $($g: $bound),* >)? ( $($arg: $ty),* ) $(-> $ret)? {
                    body($($arg),*)
                }
                match $crate::cpu::loops_capability() {
                    // SAFETY: `loops_capability` is never wider than the CPU.
                    $crate::cpu::Capability::Avx512 => return unsafe { wide($($arg),*) },
                    // SAFETY: as above.
                    $crate::cpu::Capability::Avx2 => return unsafe { narrow($($arg),*) },
                    $crate::cpu::Capability::Portable => {}
                }
            }
            body($($arg),*)
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_narrows_and_never_widens() {
        use Capability::*;
        assert_eq!(Capability::requested(None, Avx512), (Avx512, None));
        assert_eq!(Capability::requested(Some(" AVX2 "), Avx512), (Avx2, None));
        assert_eq!(
            Capability::requested(Some("portable"), Avx2),
            (Portable, None)
        );
        let (c, note) = Capability::requested(Some("avx512"), Avx2);
        assert_eq!(c, Avx2);
        assert!(note.unwrap().contains("this CPU has no avx512"));
        let (c, note) = Capability::requested(Some("sse9"), Avx2);
        assert_eq!(c, Avx2);
        assert!(note.unwrap().contains("use avx512, avx2 or portable"));
        assert!(Capability::detected() >= capability());
    }

    crate::vectorized! {
        /// Σ a_i b_i in order, without fusing.
        fn dot(a: &[f32], b: &[f32]) -> f32 {
            a.iter().zip(b).fold(0.0, |s, (x, y)| s + x * y)
        }
    }

    crate::vectorized! {
        fn first<'a, T: Copy>(v: &'a [T]) -> Option<&'a T> {
            v.first()
        }
    }

    #[test]
    fn a_vectorized_function_runs_its_body() {
        assert_eq!(dot(&[1.0, 2.0], &[3.0, 4.0]), 11.0);
        assert_eq!(first(&[2u8, 3]), Some(&2));
    }
}
