//! The cut's weights on the CPU: two rayon passes, `open` over the merged nodes (a leaf never
//! opens), then `weight` over every node (the formula of the [module docs](super), in `f32`).

use rayon::prelude::*;

use super::{BLEND_BAND, LodView, MIN_DISTANCE, smoothstep};

/// Nodes per rayon task.
const CHUNK: usize = 1 << 14;

/// The weights `[M]` of the cut: `centres [M, 3]` flat, `radii`, `sizes` and `parents` `[M]`
/// (the root, node `M - 1`, its own parent), `leaves` the leaf count (at most `M`).
pub fn lod_weights<P: Copy + Send + Sync + TryInto<usize>>(
    centres: &[f32],
    radii: &[f32],
    sizes: &[f32],
    parents: &[P],
    leaves: usize,
    view: &LodView,
) -> Vec<f32> {
    let m = radii.len();
    let eye = view.eye.map(|v| v as f32);
    let (focal, tau) = (view.focal as f32, view.threshold as f32);
    // `open` of the merged nodes `leaves..M`, at `n - leaves`.
    let mut open = vec![1.0f32; m - leaves];
    if tau > 0.0 {
        open.par_chunks_mut(CHUNK)
            .enumerate()
            .for_each(|(task, chunk)| {
                for (j, out) in chunk.iter_mut().enumerate() {
                    let n = leaves + task * CHUNK + j;
                    let c = &centres[3 * n..3 * n + 3];
                    let d2 = (c[0] - eye[0]).powi(2) + (c[1] - eye[1]).powi(2)
                        + (c[2] - eye[2]).powi(2);
                    let distance = d2.sqrt() - radii[n];
                    let rho = sizes[n] * focal / distance.max(MIN_DISTANCE);
                    *out = smoothstep((rho - tau) / ((BLEND_BAND - 1.0) * tau));
                }
            });
    }
    let open_of = |n: usize| match n.checked_sub(leaves) {
        None => 0.0,
        Some(merged) => open.get(merged).copied().unwrap_or(1.0),
    };
    let mut weights = vec![0.0f32; m];
    weights
        .par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(task, chunk)| {
            for (j, out) in chunk.iter_mut().enumerate() {
                let n = task * CHUNK + j;
                let parent_open = if n + 1 == m {
                    1.0
                } else {
                    parents[n].try_into().ok().map_or(1.0, open_of)
                };
                *out = (parent_open - open_of(n)).max(0.0);
            }
        });
    weights
}

/// The rows of a gathered cut (see [`super::LodOps::lod_gather`]), one vector per parameter.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GatheredRows {
    /// `[K, 3]`
    pub means: Vec<f32>,
    /// `[K, 4]`
    pub quats: Vec<f32>,
    /// `[K, 3]`
    pub log_scales: Vec<f32>,
    /// `[K]`, weighted ([`super::weighted_logit`]).
    pub opacity_logits: Vec<f32>,
    /// `[K, 3]`
    pub sh_dc: Vec<f32>,
    /// `[K, R]`
    pub sh_rest: Vec<f32>,
}

/// Rows `rows` of each node parameter (row-major: `means [M, 3]`, `quats [M, 4]`,
/// `log_scales [M, 3]`, `logits [M]`, `sh_dc [M, 3]`, `sh_rest [M, rest]`), the logits weighted
/// by `weights` (one per row of `rows`), in one parallel pass.
#[allow(clippy::too_many_arguments)]
pub fn gather_cut(
    means: &[f32],
    quats: &[f32],
    log_scales: &[f32],
    logits: &[f32],
    sh_dc: &[f32],
    sh_rest: &[f32],
    rest: usize,
    rows: &[u32],
    weights: &[f32],
) -> GatheredRows {
    let k = rows.len();
    let mut out = GatheredRows {
        means: vec![0.0; 3 * k],
        quats: vec![0.0; 4 * k],
        log_scales: vec![0.0; 3 * k],
        opacity_logits: vec![0.0; k],
        sh_dc: vec![0.0; 3 * k],
        sh_rest: vec![0.0; rest * k],
    };
    const ROWS: usize = 2048;
    let copy = |dst: &mut [f32], src: &[f32], width: usize, rows: &[u32]| {
        for (d, &r) in dst.chunks_exact_mut(width).zip(rows) {
            let r = r as usize;
            d.copy_from_slice(&src[r * width..(r + 1) * width]);
        }
    };
    out.means
        .par_chunks_mut(3 * ROWS)
        .zip(out.quats.par_chunks_mut(4 * ROWS))
        .zip(out.log_scales.par_chunks_mut(3 * ROWS))
        .zip(out.opacity_logits.par_chunks_mut(ROWS))
        .zip(out.sh_dc.par_chunks_mut(3 * ROWS))
        .zip(rows.par_chunks(ROWS))
        .zip(weights.par_chunks(ROWS))
        .for_each(|((((((m, q), s), o), dc), rows), w)| {
            copy(m, means, 3, rows);
            copy(q, quats, 4, rows);
            copy(s, log_scales, 3, rows);
            copy(dc, sh_dc, 3, rows);
            for ((o, &r), &w) in o.iter_mut().zip(rows).zip(w) {
                *o = super::weighted_logit(logits[r as usize], w);
            }
        });
    if rest > 0 {
        out.sh_rest
            .par_chunks_mut(rest * ROWS)
            .zip(rows.par_chunks(ROWS))
            .for_each(|(dst, rows)| copy(dst, sh_rest, rest, rows));
    }
    out
}
