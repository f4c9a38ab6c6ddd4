//! Runtime dispatch to wider vector instructions for the hottest decode loops.
//!
//! The crate is built for the baseline x86-64 target (SSE2), so the binary runs on any x86-64
//! machine; loops such as ALP's integer-to-float conversion then handle two or four values per
//! instruction. [`avx2_dispatch!`] declares a function that runs an `#[inline(always)]` kernel
//! compiled a second time with AVX2 enabled, and picks that copy where the CPU has AVX2. The
//! results are identical either way: only the instruction width changes, never the
//! arithmetic (IEEE 754 operations round the same in every lane width).

/// Declares `fn name<G: Bound, ...>(arg: Type, ...)` that calls `kernel(arg, ...)`, compiled
/// with AVX2 where the CPU supports it. `kernel` must be `#[inline(always)]`: target features
/// reach only code inlined into the AVX2 copy, not what it calls out of line.
macro_rules! avx2_dispatch {
    (
        $(#[$meta:meta])*
        fn $name:ident<$($g:ident: $bound:path),*>($($arg:ident: $ty:ty),* $(,)?) => $kernel:ident
    ) => {
        $(#[$meta])*
        fn $name<$($g: $bound),*>($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                fn avx2<$($g: $bound),*>($($arg: $ty),*) {
                    $kernel($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU supports AVX2, as checked on the line above; that is
                    // the only requirement of a function compiled with it enabled.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $kernel($($arg),*)
        }
    };
}

pub(crate) use avx2_dispatch;
