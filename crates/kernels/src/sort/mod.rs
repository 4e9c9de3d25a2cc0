//! Prefix sums and a stable radix sort on the GPU, written in CubeCL (Burn's `sort` and
//! `cumsum` on the cube backend go through the host or are quadratic, so the rasterizer's
//! binning cannot use them).
//!
//! Both work on `u32` tensors and are generic over the CubeCL runtime:
//! - [`cube::exclusive_sum`]: `out[i] = sum(values[..i])`, and the total: one launch of one
//!   cube up to 262 144 entries (each unit sums a run of them), past that a block scan whose
//!   block sums are scanned the same way, recursively, and added back (no host round trip);
//! - [`cube::sort_pairs`]: a stable least-significant-digit radix sort of `(key, value)` pairs
//!   on the low `bits` bits of the keys, 8 bits per pass (four passes for 32-bit keys, two for
//!   up to 16). Each pass counts the digits of every block of 1024 entries, scans the counts
//!   digit-major (so that the scan gives every block's first slot for every digit), and
//!   scatters each entry to its digit's slot plus its rank among the equal digits before it in
//!   its block: three launches up to a million keys (the counts then fit one cube's scan), five
//!   or more past that. A GPU step is bound by the host's launches, not by these kernels' work,
//!   so fewer, wider passes win. Stability makes the result deterministic and lets the
//!   rasterizer sort by `(tile, depth)` as two sorts: depth first, then tile.
//!
//! The CPU rasterizer needs neither: it bins with a counting pass and sorts each tile's list
//! (`raster::cpu::bin`).
//!
//! [`sort_pairs`] and [`exclusive_sum`] are the public entry points, on any backend with
//! [`RadixSortBackend`] (the unfused `CubeBackend` of every runtime; `cargo bench --bench sort`
//! times them against Burn's own sort).

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

#[cfg(feature = "cube")]
pub(crate) mod cube;

/// Two `[N]` `u32` tensors: the sorted keys and values of [`sort_pairs`], or the sums and the
/// total (`[1]`) of [`exclusive_sum`].
pub type U32Pair<B> = (Tensor<B, 1, Int>, Tensor<B, 1, Int>);

/// The GPU sort and scan as a backend capability, implemented for every `CubeBackend` (the
/// unfused CubeCL backend of any runtime; `ember_kernels::{WgpuCube, CudaCube}` name the two
/// Ember builds).
pub trait RadixSortBackend: Backend {
    /// See [`sort_pairs`].
    fn radix_sort_pairs(
        keys: Tensor<Self, 1, Int>,
        values: Tensor<Self, 1, Int>,
        bits: u32,
    ) -> Result<U32Pair<Self>, SortError>;

    /// See [`exclusive_sum`].
    fn exclusive_sum(values: Tensor<Self, 1, Int>) -> Result<U32Pair<Self>, SortError>;
}

/// Sorts the pairs `(keys[i], values[i])` by the low `bits` bits of the keys, stably, on the
/// GPU: a radix sort of `ceil(bits / 8)` passes of 8 bits, none of them through the host. Only
/// those passes' bits are looked at (the low `8 ceil(bits / 8)`); higher bits travel with their
/// key. `keys`, `values`: `[N]` `u32` (`DType::U32`); returns the sorted `(keys, values)`,
/// `[N]` each.
pub fn sort_pairs<B: RadixSortBackend>(
    keys: Tensor<B, 1, Int>,
    values: Tensor<B, 1, Int>,
    bits: u32,
) -> Result<U32Pair<B>, SortError> {
    B::radix_sort_pairs(keys, values, bits)
}

/// The exclusive prefix sum of `values` (`[N]` `u32`): `(sums [N], total [1])` with
/// `sums[i] = values[0] + .. + values[i - 1]` (wrapping), on the GPU: one launch up to
/// `N = 262 144`, three past it, five past `256 x 262 144`.
pub fn exclusive_sum<B: RadixSortBackend>(
    values: Tensor<B, 1, Int>,
) -> Result<U32Pair<B>, SortError> {
    B::exclusive_sum(values)
}

/// Why a sort or scan refused its inputs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SortError {
    /// An input is not a `u32` tensor.
    #[error("{name} must be a u32 tensor, got {dtype}")]
    DType {
        /// Which input.
        name: &'static str,
        /// Its element type.
        dtype: String,
    },
    /// Keys and values differ in length.
    #[error("keys have {keys} entries but values have {values}")]
    Length {
        /// Entries in the keys.
        keys: usize,
        /// Entries in the values.
        values: usize,
    },
    /// More key bits than a `u32` has.
    #[error("bits must be at most 32, got {0}")]
    Bits(u32),
}

#[cfg(feature = "cube")]
mod public {
    use burn::tensor::{DType, Int, Tensor};
    use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};

    use super::{RadixSortBackend, SortError, U32Pair};

    fn check_u32(name: &'static str, dtype: DType) -> Result<(), SortError> {
        if dtype == DType::U32 {
            Ok(())
        } else {
            Err(SortError::DType {
                name,
                dtype: format!("{dtype:?}"),
            })
        }
    }

    impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> RadixSortBackend
        for CubeBackend<R, F, I, BT>
    {
        fn radix_sort_pairs(
            keys: Tensor<Self, 1, Int>,
            values: Tensor<Self, 1, Int>,
            bits: u32,
        ) -> Result<U32Pair<Self>, SortError> {
            check_u32("keys", keys.dtype())?;
            check_u32("values", values.dtype())?;
            let (len, values_len) = (keys.dims()[0], values.dims()[0]);
            if len != values_len {
                return Err(SortError::Length {
                    keys: len,
                    values: values_len,
                });
            }
            if bits > 32 {
                return Err(SortError::Bits(bits));
            }
            let (k, v) =
                super::cube::sort_pairs(keys.into_primitive(), values.into_primitive(), len, bits);
            // The sort's buffers hold at least one entry; the result is the first `len`.
            let narrow = |t| Tensor::<Self, 1, Int>::from_primitive(t).narrow(0, 0, len);
            Ok((narrow(k), narrow(v)))
        }

        fn exclusive_sum(values: Tensor<Self, 1, Int>) -> Result<U32Pair<Self>, SortError> {
            check_u32("values", values.dtype())?;
            let len = values.dims()[0];
            let (sums, total) = super::cube::exclusive_sum(&values.into_primitive(), len);
            let wrap = Tensor::<Self, 1, Int>::from_primitive;
            Ok((wrap(sums).narrow(0, 0, len), wrap(total)))
        }
    }
}

#[cfg(all(test, any(feature = "wgpu", feature = "cuda")))]
mod gpu_tests;
