//! One source, three builds: the CPU kernels' hot loops compiled for the portable x86-64
//! baseline (SSE2, 4 f32 lanes), for AVX2+FMA (8 lanes) and for AVX-512 (16 lanes, 32
//! registers), chosen at run time.
//!
//! The loops are written over fixed-size blocks so that LLVM vectorises them; enabling wider
//! instruction sets for the same source widens the vectors without any intrinsics.

/// `variants!(name, body, (args) -> ret)` defines `name::<T>()`, which returns the widest build
/// of the `#[inline(always)]` function `body::<T>` the CPU supports; `variants!(name<DIAG>, ..)`
/// does the same for `body::<T, DIAG>` (a `const DIAG: bool` parameter). Calling the returned
/// pointer is `unsafe` only because the wide builds carry a `target_feature`; the selection
/// makes it sound.
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
                if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512vl") {
                    return avx512::<$($par)*>;
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    return avx2::<$($par)*>;
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
