//! One source, two builds: the CPU kernels' hot loops compiled for the portable x86-64 baseline
//! (SSE2, 4 f32 lanes) and for AVX2+FMA (8 lanes, fused multiply-add), chosen at run time.
//!
//! The loops are written over fixed-size blocks so that LLVM vectorises them; enabling AVX2
//! for the same source doubles the vector width without any intrinsics.

/// `variants!(name, body, (args) -> ret)` defines `name::<T, DIAG>()`, which returns the AVX2+FMA
/// build of the `#[inline(always)]` function `body` when the CPU supports it, else the portable
/// build. Calling the returned pointer is `unsafe` only because one of the builds carries a
/// `target_feature`; the selection makes it sound.
macro_rules! variants {
    ($name:ident, $body:ident, ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)?) => {
        fn $name<T: Real, const DIAG: bool>() -> unsafe fn($($ty),*) $(-> $ret)? {
            fn portable<T: Real, const DIAG: bool>($($arg: $ty),*) $(-> $ret)? {
                $body::<T, DIAG>($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
                unsafe fn avx512<T: Real, const DIAG: bool>($($arg: $ty),*) $(-> $ret)? {
                    $body::<T, DIAG>($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2<T: Real, const DIAG: bool>($($arg: $ty),*) $(-> $ret)? {
                    $body::<T, DIAG>($($arg),*)
                }
                if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512vl") {
                    return avx512::<T, DIAG>;
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    return avx2::<T, DIAG>;
                }
            }
            portable::<T, DIAG>
        }
    };
}

pub(crate) use variants;
