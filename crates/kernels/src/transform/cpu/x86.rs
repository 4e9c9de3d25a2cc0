//! The `f32` transform in explicit AVX2 intrinsics, eight Gaussians per step.
//!
//! The portable loop is scalar: LLVM does not vectorise the `[N, 3]` rows, and at about 50
//! instructions per Gaussian two cores cannot keep up with memory. Here:
//! - **means**: eight rows are three vectors. Each output lane `j` (Gaussian `j / 3`, row
//!   `r = j % 3`) needs its Gaussian's `x`, `y`, `z`; they are gathered from the three loaded
//!   vectors by lane permutes and blends (the pattern is fixed, [`GATHER`]), then multiplied by
//!   per-lane rows of `s R` and added in the portable order: `((l0 x + l1 y) + l2 z) + o`;
//! - **quaternions**: two per vector; the Hamilton product `q_R * q` is four in-lane permutes of
//!   `q`, each times a per-lane signed component of `q_R`, summed in the portable order (a
//!   subtraction `a - b c` is the addition `a + (-b) c`, exactly);
//! - **log-scales**: a flat add;
//! - **SH**: eight Gaussians' `3k` coefficients are transposed (8x8 at a time) so that each
//!   vector holds one coefficient and channel of the eight; a band's matrix is then applied
//!   with broadcast entries, summed from zero in column order as the portable loop does, and
//!   the result transposed back. The Gaussians after the last whole block of a chunk (fewer
//!   than eight) take the portable loop.
//!
//! Products and sums are separate instructions (no fused multiply-add), in the portable order,
//! so the results are bit-identical to it, streamed or not
//! (`cpu::tests::vector_loops_match_the_portable_loop_bit_for_bit`).

use core::arch::x86_64::*;

use super::Frame;

/// Whether this CPU runs the AVX2 loops.
pub(super) fn available() -> bool {
    crate::simd::level() >= crate::simd::Level::Avx2
}

/// Where lane `i` of output vector `v` of a block of eight means finds component `c` of its
/// Gaussian: float `3 * ((8v + i) / 3) + c` of the block's 24, i.e. lane `float % 8` of loaded
/// vector `float / 8`.
struct Gather {
    /// `float % 8` per lane.
    index: [i32; 8],
    /// Per loaded vector, all bits set in the lanes taken from it.
    from: [[i32; 8]; 3],
    /// The first and last loaded vectors taken from.
    first: usize,
    last: usize,
}

const fn gather(v: usize, c: usize) -> Gather {
    let mut g = Gather {
        index: [0; 8],
        from: [[0; 8]; 3],
        first: 2,
        last: 0,
    };
    let mut i = 0;
    while i < 8 {
        let float = 3 * ((8 * v + i) / 3) + c;
        let vector = float / 8;
        g.index[i] = (float % 8) as i32;
        g.from[vector][i] = -1;
        if vector < g.first {
            g.first = vector;
        }
        if vector > g.last {
            g.last = vector;
        }
        i += 1;
    }
    g
}

/// [`gather`] for every output vector `v` (first index) and component `c`.
const GATHER: [[Gather; 3]; 3] = [
    [gather(0, 0), gather(0, 1), gather(0, 2)],
    [gather(1, 0), gather(1, 1), gather(1, 2)],
    [gather(2, 0), gather(2, 1), gather(2, 2)],
];

/// One frame's constants as 8-lane vectors.
pub(super) struct Lanes {
    /// The scalar constants, for the rows outside whole blocks.
    frame: Frame<f32>,
    /// `[v][c]`: lane `i` holds `(s R)[r][c]` for its row `r = (8v + i) % 3`.
    linear: [[[f32; 8]; 3]; 3],
    /// `[v]`: lane `i` holds `o[r]`.
    offset: [[f32; 8]; 3],
    /// Per term of the Hamilton product, each lane's signed component of `q_R`.
    quat: [[f32; 8]; 4],
    log_scale: f32,
}

impl Lanes {
    /// The vectors of `frame`.
    pub(super) fn new(frame: Frame<f32>) -> Self {
        let linear = std::array::from_fn(|v| {
            std::array::from_fn(|c| {
                std::array::from_fn(|i| frame.linear[3 * ((8 * v + i) % 3) + c])
            })
        });
        let offset =
            std::array::from_fn(|v| std::array::from_fn(|i| frame.offset[(8 * v + i) % 3]));
        // Term t of output component r is `sign * q_R[t] * q[p_t(r)]`: `quats_block`'s
        // permutes take q's components in the orders p_1 = (1, 0, 3, 2), p_2 = (2, 3, 0, 1),
        // p_3 = (3, 2, 1, 0) (p_0 is q itself); these carry the signs.
        const SIGNS: [[f32; 4]; 4] = [
            [1.0, 1.0, 1.0, 1.0],
            [-1.0, 1.0, -1.0, 1.0],
            [-1.0, 1.0, 1.0, -1.0],
            [-1.0, -1.0, 1.0, 1.0],
        ];
        let quat =
            std::array::from_fn(|t| std::array::from_fn(|i| SIGNS[t][i % 4] * frame.quat[t]));
        Lanes {
            frame,
            linear,
            offset,
            quat,
            log_scale: frame.log_scale,
        }
    }
}

#[inline(always)]
unsafe fn load(v: &[f32; 8]) -> __m256 {
    unsafe { _mm256_loadu_ps(v.as_ptr()) }
}

#[inline(always)]
unsafe fn load_i(v: &[i32; 8]) -> __m256i {
    unsafe { _mm256_loadu_si256(v.as_ptr().cast()) }
}

/// Component `C` of the Gaussians of output vector `V`'s lanes, from a block's three vectors.
#[inline(always)]
unsafe fn gathered<const V: usize, const C: usize>(block: &[__m256; 3]) -> __m256 {
    let g = &GATHER[V][C];
    unsafe {
        let index = load_i(&g.index);
        let mut x = _mm256_permutevar8x32_ps(block[g.first], index);
        for (vector, from) in block.iter().zip(&g.from).take(g.last + 1).skip(g.first + 1) {
            let taken = _mm256_permutevar8x32_ps(*vector, index);
            x = _mm256_blendv_ps(x, taken, _mm256_castsi256_ps(load_i(from)));
        }
        x
    }
}

/// Output vector `V` of a block of eight transformed means.
#[inline(always)]
unsafe fn mean_vector<const V: usize>(lanes: &Lanes, block: &[__m256; 3]) -> __m256 {
    unsafe {
        let l = &lanes.linear[V];
        let x = _mm256_mul_ps(load(&l[0]), gathered::<V, 0>(block));
        let y = _mm256_mul_ps(load(&l[1]), gathered::<V, 1>(block));
        let z = _mm256_mul_ps(load(&l[2]), gathered::<V, 2>(block));
        _mm256_add_ps(
            _mm256_add_ps(_mm256_add_ps(x, y), z),
            load(&lanes.offset[V]),
        )
    }
}

/// A vector into `at`: streamed past the caches (`at` 32-byte aligned) or stored plainly.
#[inline(always)]
unsafe fn store<const STREAM: bool>(at: *mut f32, v: __m256) {
    unsafe {
        if STREAM {
            _mm256_stream_ps(at, v);
        } else {
            _mm256_storeu_ps(at, v);
        }
    }
}

/// Rows of `width` floats to leave to the scalar loop at the front of `rows` so that the rest
/// starts 32-byte aligned, when `stream` asks for streaming stores and some count below eight
/// does that; `None` for plain stores.
fn aligned_head<const W: usize>(rows: &[[f32; W]], stream: bool) -> Option<usize> {
    let at = rows.as_ptr() as usize;
    stream
        .then(|| (0..8).find(|r| (at + 4 * W * r).is_multiple_of(32)))
        .flatten()
        .map(|head| head.min(rows.len()))
}

/// Transforms `src` rows into `dst`: a scalar head (to align streaming stores), whole blocks
/// of eight rows by `block`, a scalar tail; `block(src, dst)` reads and writes `8 * W` floats.
#[inline(always)]
fn rows<const W: usize>(
    dst: &mut [[f32; W]],
    src: &[[f32; W]],
    stream: bool,
    one: impl Fn(&[f32; W]) -> [f32; W],
    plain_block: impl Fn(*const f32, *mut f32),
    streamed_block: impl Fn(*const f32, *mut f32),
) {
    let head = aligned_head(dst, stream);
    let start = head.unwrap_or(0);
    let blocks = (src.len() - start) / 8;
    let end = start + 8 * blocks;
    for (d, v) in dst[..start].iter_mut().zip(&src[..start]) {
        *d = one(v);
    }
    let (d, s) = (
        dst[start..end].as_flattened_mut(),
        src[start..end].as_flattened(),
    );
    for (d, s) in d.chunks_exact_mut(8 * W).zip(s.chunks_exact(8 * W)) {
        if head.is_some() {
            streamed_block(s.as_ptr(), d.as_mut_ptr());
        } else {
            plain_block(s.as_ptr(), d.as_mut_ptr());
        }
    }
    for (d, v) in dst[end..].iter_mut().zip(&src[end..]) {
        *d = one(v);
    }
}

/// Eight transformed means (24 floats from `src` into `dst`).
#[inline(always)]
unsafe fn means_block<const STREAM: bool>(lanes: &Lanes, src: *const f32, dst: *mut f32) {
    unsafe {
        let block = [
            _mm256_loadu_ps(src),
            _mm256_loadu_ps(src.add(8)),
            _mm256_loadu_ps(src.add(16)),
        ];
        store::<STREAM>(dst, mean_vector::<0>(lanes, &block));
        store::<STREAM>(dst.add(8), mean_vector::<1>(lanes, &block));
        store::<STREAM>(dst.add(16), mean_vector::<2>(lanes, &block));
    }
}

/// Eight transformed quaternions (32 floats), two per vector.
#[inline(always)]
unsafe fn quats_block<const STREAM: bool>(q: &[__m256; 4], src: *const f32, dst: *mut f32) {
    for pair in 0..4 {
        unsafe {
            let b = _mm256_loadu_ps(src.add(8 * pair));
            let t0 = _mm256_mul_ps(q[0], b);
            let t1 = _mm256_mul_ps(q[1], _mm256_permute_ps::<0b10_11_00_01>(b));
            let t2 = _mm256_mul_ps(q[2], _mm256_permute_ps::<0b01_00_11_10>(b));
            let t3 = _mm256_mul_ps(q[3], _mm256_permute_ps::<0b00_01_10_11>(b));
            let out = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(t0, t1), t2), t3);
            store::<STREAM>(dst.add(8 * pair), out);
        }
    }
}

/// Eight shifted log-scale rows (24 floats).
#[inline(always)]
unsafe fn scales_block<const STREAM: bool>(shift: __m256, src: *const f32, dst: *mut f32) {
    for v in 0..3 {
        unsafe {
            let out = _mm256_add_ps(_mm256_loadu_ps(src.add(8 * v)), shift);
            store::<STREAM>(dst.add(8 * v), out);
        }
    }
}

/// The transformed means, quaternions and log-scales of one chunk of Gaussians, blocks of
/// eight in vectors. With `stream`, the vectors are streamed past the caches (for outputs
/// larger than the caches, where a plain store first reads the line it writes).
///
/// # Safety
/// The CPU must have AVX2 ([`available`]).
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn geometry(
    lanes: &Lanes,
    stream: bool,
    means: &mut [[f32; 3]],
    quats: &mut [[f32; 4]],
    log_scales: &mut [[f32; 3]],
    src_means: &[[f32; 3]],
    src_quats: &[[f32; 4]],
    src_scales: &[[f32; 3]],
) {
    let frame = &lanes.frame;
    // SAFETY (every block below): `rows` hands each block `8 * W` floats of `src` and `dst`,
    // and a streamed block's `dst` 32-byte aligned (`aligned_head`).
    rows(
        means,
        src_means,
        stream,
        |m| frame.mean(m),
        |s, d| unsafe { means_block::<false>(lanes, s, d) },
        |s, d| unsafe { means_block::<true>(lanes, s, d) },
    );
    // SAFETY: plain loads of the frame's constants.
    let q = unsafe {
        [
            load(&lanes.quat[0]),
            load(&lanes.quat[1]),
            load(&lanes.quat[2]),
            load(&lanes.quat[3]),
        ]
    };
    rows(
        quats,
        src_quats,
        stream,
        |v| frame.quat(v),
        |s, d| unsafe { quats_block::<false>(&q, s, d) },
        |s, d| unsafe { quats_block::<true>(&q, s, d) },
    );
    let shift = _mm256_set1_ps(lanes.log_scale);
    rows(
        log_scales,
        src_scales,
        stream,
        |v| frame.log_scales(v),
        |s, d| unsafe { scales_block::<false>(shift, s, d) },
        |s, d| unsafe { scales_block::<true>(shift, s, d) },
    );
    if stream {
        // Streaming stores are weakly ordered: make them visible before the chunk is done.
        _mm_sfence();
    }
}

/// The rotated SH coefficients of every Gaussian of `src` (`coeffs = 3k` floats each, `k` in
/// `{3, 8, 15}`) into `dst`, whole blocks of eight transposed, the rest in the portable loop;
/// stored plainly: streaming them (through an aligned buffer of eight Gaussians) measured
/// slower, the SH loop being compute-bound.
///
/// # Safety
/// The CPU must have AVX2 ([`available`]).
#[target_feature(enable = "avx2")]
pub(super) unsafe fn sh(lanes: &Lanes, dst: &mut [f32], src: &[f32], coeffs: usize) {
    let blocks = src.len() / (8 * coeffs);
    let whole = 8 * coeffs * blocks;
    // SAFETY: whole blocks of eight Gaussians of `coeffs` floats.
    unsafe {
        match coeffs {
            9 => sh_blocks::<9>(&lanes.frame, &mut dst[..whole], &src[..whole]),
            24 => sh_blocks::<24>(&lanes.frame, &mut dst[..whole], &src[..whole]),
            45 => sh_blocks::<45>(&lanes.frame, &mut dst[..whole], &src[..whole]),
            _ => unreachable!("K in {{3, 8, 15}}"),
        }
    }
    for (d, s) in dst[whole..]
        .chunks_exact_mut(coeffs)
        .zip(src[whole..].chunks_exact(coeffs))
    {
        lanes.frame.sh(s, d);
    }
}

/// The 8x8 transpose of eight vectors.
#[inline(always)]
unsafe fn transpose(r: [__m256; 8]) -> [__m256; 8] {
    unsafe {
        let t = [
            _mm256_unpacklo_ps(r[0], r[1]),
            _mm256_unpackhi_ps(r[0], r[1]),
            _mm256_unpacklo_ps(r[2], r[3]),
            _mm256_unpackhi_ps(r[2], r[3]),
            _mm256_unpacklo_ps(r[4], r[5]),
            _mm256_unpackhi_ps(r[4], r[5]),
            _mm256_unpacklo_ps(r[6], r[7]),
            _mm256_unpackhi_ps(r[6], r[7]),
        ];
        let u = [
            _mm256_shuffle_ps::<0x44>(t[0], t[2]),
            _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
            _mm256_shuffle_ps::<0x44>(t[1], t[3]),
            _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
            _mm256_shuffle_ps::<0x44>(t[4], t[6]),
            _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
            _mm256_shuffle_ps::<0x44>(t[5], t[7]),
            _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
        ];
        [
            _mm256_permute2f128_ps::<0x20>(u[0], u[4]),
            _mm256_permute2f128_ps::<0x20>(u[1], u[5]),
            _mm256_permute2f128_ps::<0x20>(u[2], u[6]),
            _mm256_permute2f128_ps::<0x20>(u[3], u[7]),
            _mm256_permute2f128_ps::<0x31>(u[0], u[4]),
            _mm256_permute2f128_ps::<0x31>(u[1], u[5]),
            _mm256_permute2f128_ps::<0x31>(u[2], u[6]),
            _mm256_permute2f128_ps::<0x31>(u[3], u[7]),
        ]
    }
}

/// One band of eight Gaussians, transposed (`t[3 * coefficient + channel]`, a lane per
/// Gaussian): `o[3 * (FIRST + row) + ch] = sum over col of m[row][col] * t[3 * (FIRST + col) + ch]`,
/// from zero in column order.
#[inline(always)]
unsafe fn band<const FIRST: usize, const N: usize, const M: usize>(
    m: &[f32; M],
    t: &[__m256; 45],
    o: &mut [__m256; 45],
) {
    const { assert!(M == N * N) };
    for row in 0..N {
        unsafe {
            let mut acc = [_mm256_setzero_ps(); 3];
            for col in 0..N {
                let w = _mm256_set1_ps(m[row * N + col]);
                for (ch, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm256_add_ps(*acc, _mm256_mul_ps(w, t[3 * (FIRST + col) + ch]));
                }
            }
            o[3 * (FIRST + row)..3 * (FIRST + row) + 3].copy_from_slice(&acc);
        }
    }
}

/// The rotated SH coefficients of blocks of eight Gaussians of `C` floats: each block's
/// `8 x C` floats transposed (8x8 at a time, the last transpose ending on float `C - 1`),
/// the bands' matrices applied a lane per Gaussian, transposed back.
///
/// # Safety
/// `src` and `dst` are whole blocks (`8 C` floats each).
#[inline(always)]
unsafe fn sh_blocks<const C: usize>(frame: &Frame<f32>, dst: &mut [f32], src: &[f32]) {
    for (d, s) in dst.chunks_exact_mut(8 * C).zip(src.chunks_exact(8 * C)) {
        let mut t = [unsafe { _mm256_setzero_ps() }; 45];
        let mut o = t;
        for b in 0..C.div_ceil(8) {
            let at = (8 * b).min(C - 8);
            // SAFETY: floats `at..at + 8` of each of the block's eight Gaussians.
            let columns = unsafe {
                transpose(std::array::from_fn(|g| {
                    _mm256_loadu_ps(s.as_ptr().add(g * C + at))
                }))
            };
            t[at..at + 8].copy_from_slice(&columns);
        }
        // SAFETY: register arithmetic on the transposed block.
        unsafe {
            band::<0, 3, 9>(&frame.sh1, &t, &mut o);
            if C >= 24 {
                band::<3, 5, 25>(&frame.sh2, &t, &mut o);
            }
            if C >= 45 {
                band::<8, 7, 49>(&frame.sh3, &t, &mut o);
            }
        }
        for b in 0..C.div_ceil(8) {
            let at = (8 * b).min(C - 8);
            // SAFETY: floats `at..at + 8` of each of the block's eight Gaussians.
            unsafe {
                let rows = transpose(std::array::from_fn(|j| o[at + j]));
                for (g, row) in rows.into_iter().enumerate() {
                    _mm256_storeu_ps(d.as_mut_ptr().add(g * C + at), row);
                }
            }
        }
    }
}
