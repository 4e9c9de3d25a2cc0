//! One source, three builds: the CPU kernels' hot loops compiled for the portable x86-64
//! baseline (SSE2, 4 f32 lanes), for AVX2+FMA (8 lanes) and for AVX-512 (16 lanes, 32
//! registers), chosen at run time.
//!
//! The loops are written over fixed-size blocks so that LLVM vectorises them; enabling wider
//! instruction sets for the same source widens the vectors without any intrinsics.
//!
//! Every wide path of the CPU kernels, built by [`variants!`] or written with intrinsics
//! (`raster/cpu/explicit.rs`, `transform/cpu/x86.rs`), is chosen by [`level`] alone: one
//! definition of which instruction sets a CPU has, so that the paths agree on it. A function
//! built for a level enables at most that level's features (`target_feature`), which is what
//! makes calling it sound once [`level`] said so.

/// The widest instruction set the CPU kernels' wide builds may use, as [`level`] finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    /// The portable builds: x86-64's baseline (SSE2), or another architecture.
    Baseline,
    /// AVX2 and FMA: 8 `f32` lanes.
    Avx2,
    /// AVX-512 F and VL, with AVX2 and FMA: 16 `f32` lanes, 32 registers.
    Avx512,
}

/// The widest [`Level`] this CPU runs (the standard library caches the detection).
pub(crate) fn level() -> Level {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
        if avx2
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512vl")
        {
            return Level::Avx512;
        }
        if avx2 {
            return Level::Avx2;
        }
    }
    Level::Baseline
}

/// `variants!(name, body, (args) -> ret)` defines `name::<T>()`, which returns the widest build
/// of the `#[inline(always)]` function `body::<T>` the CPU supports; `variants!(name<DIAG>, ..)`
/// does the same for `body::<T, DIAG>` (a `const DIAG: bool` parameter). Calling the returned
/// pointer is `unsafe` only because the wide builds carry a `target_feature`; the selection
/// ([`level`]) makes it sound.
macro_rules! variants {
    ($name:ident<DIAG>, $body:ident, ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)?) => {
        $crate::simd::variants!(
            @build $name, $body, [T: Real, const DIAG: bool], [T, DIAG], ($($arg: $ty),*) $(-> $ret)?
        );
    };
    ($name:ident, $body:ident, ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)?) => {
        $crate::simd::variants!(@build $name, $body, [T: Real], [T], ($($arg: $ty),*) $(-> $ret)?);
    };
    (@build $name:ident, $body:ident, [$($gen:tt)*], [$($par:tt)*],
        ($($arg:ident : $ty:ty),*) $(-> $ret:ty)?) => {
        fn $name<$($gen)*>() -> unsafe fn($($ty),*) $(-> $ret)? {
            fn portable<$($gen)*>($($arg: $ty),*) $(-> $ret)? {
                $body::<$($par)*>($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
                unsafe fn avx512<$($gen)*>($($arg: $ty),*) $(-> $ret)? {
                    $body::<$($par)*>($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2<$($gen)*>($($arg: $ty),*) $(-> $ret)? {
                    $body::<$($par)*>($($arg),*)
                }
                match $crate::simd::level() {
                    $crate::simd::Level::Avx512 => return avx512::<$($par)*>,
                    $crate::simd::Level::Avx2 => return avx2::<$($par)*>,
                    $crate::simd::Level::Baseline => {}
                }
            }
            portable::<$($par)*>
        }
    };
}

pub(crate) use variants;

/// Sum of a lane accumulator in a fixed (pairwise) order, so results do not depend on how the
/// lanes were vectorised.
#[inline(always)]
pub(crate) fn lane_sum<T: crate::real::Real, const L: usize>(l: &[T; L]) -> T {
    let mut half = *l;
    let mut width = L / 2;
    while width > 0 {
        for j in 0..width {
            half[j] += half[j + width];
        }
        width /= 2;
    }
    half[0]
}
