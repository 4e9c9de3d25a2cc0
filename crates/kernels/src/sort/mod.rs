//! Prefix sums and a stable radix sort on the GPU, written in CubeCL (Burn's `sort` and
//! `cumsum` on the cube backend go through the host or are quadratic, so the rasterizer's
//! binning cannot use them).
//!
//! Both work on `u32` tensors and are generic over the CubeCL runtime:
//! - [`cube::exclusive_sum`]: `out[i] = sum(values[..i])`, and the total, as a multi-level
//!   block scan (one level per factor of 256 in the length, no host round trip);
//! - [`cube::sort_pairs`]: a stable least-significant-digit radix sort of `(key, value)` pairs
//!   on the low `bits` bits of the keys, 4 bits per pass. Each pass counts the digits of every
//!   block of 256 entries, scans the counts digit-major (so that the scan gives every block's
//!   first slot for every digit), and scatters each entry to its digit's slot plus its rank
//!   among the equal digits before it in its block. Stability makes the result deterministic
//!   and lets the rasterizer sort by `(tile, depth)` as two sorts: depth first, then tile.
//!
//! The CPU rasterizer needs neither: it bins with a counting pass and sorts each tile's list
//! (`raster::cpu::bin`).

#[cfg(feature = "cube")]
pub(crate) mod cube;
