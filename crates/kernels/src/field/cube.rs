//! The field query as CubeCL kernels, generic over the CubeCL runtime (one source for wgpu and
//! cuda) and over the float type (each launch takes the tensors' runtime dtype).
//!
//! This file holds the [`FieldOps`] impl and the host side (buffers, grids, launches); the kernels
//! are in `cube_exact.rs` (the per-pair math and the exact sweeps), `cube_grid.rs` (the cutoff
//! grid and the sweeps over it); the grid's hash buckets are ordered by the [`sort`](crate::sort)
//! op's radix sort.
//!
//! # Exact mode
//! - `prepare`: one unit per Gaussian writes its whitening matrix `W` (row-major) and its mean
//!   into a `[N, 12]` buffer, so `W` is computed once per call, not once per pair.
//! - `point_tiles`: one unit per point sweeps all Gaussians, staged a cube-sized tile at a time
//!   in shared memory; it accumulates its own output row (the forward) or its own `dL/dx` (the
//!   backward, only when the points need a gradient) in registers.
//! - `gaussian_tiles`: one unit per Gaussian sweeps all points (tiled the same way), accumulates
//!   `dL/dmu`, `G = dL/dW` and `dL/df` in registers, then applies the chain rule from `W` to the
//!   quaternion and the log-scales.
//!
//! Every output element is owned by exactly one unit, so there are no atomics and the results are
//! bit-reproducible. No `[P, N, ..]` intermediate exists. Feature channels are processed in chunks
//! of at most `MAX_CHUNK` register accumulators; a sweep is repeated per chunk when `C` is
//! larger.
//!
//! # Cutoff mode: spatial hashing, built on the device
//! With a cutoff of `k` standard deviations, each Gaussian's `k`-sigma ellipsoid has an
//! axis-aligned box around its mean. The Gaussians are binned by their mean into a multi-level
//! grid: level `l` has cubic cells of edge `h_l = h_0 2^l` and holds the Gaussians whose box
//! half-extent fits in `LEVEL_FILL`` h_l` (the smallest such level), so a point meets every
//! Gaussian that can reach it in the 27 cells around its own cell at each level (`point_grid`,
//! for the values and for `dL/dx`). `h_0` is the geometric mean of the box half-extents (a device
//! reduction), raised when needed so that 16 levels cover the largest box and `|x| / h_0` stays
//! below `MAX_CELL_COORD`. Gaussians with a non-finite box (an overflowing scale) sit in one
//! extra bucket that every point visits. For the per-Gaussian backward (`gaussian_grid`) the
//! points are binned into the level-0 cells, and each Gaussian visits the cells its box overlaps
//! (or all points, when those cells outnumber a quarter of the points).
//!
//! The cells live in hash tables of a size fixed on the host (a power of two at least twice the
//! item count), so nothing is read back: entries are sorted by bucket with the stable radix sort
//! of the `sort` op (`log2(T) / 8` passes for a table of `T` buckets; entries start in index
//! order, so a bucket holds its entries in index order) and each bucket's start is found by
//! binary search.
//! Hash collisions only add candidates; every candidate's own cell is compared with the probed
//! one, so nothing is counted twice, and the sorted order fixes the summation order, so the
//! results stay bit-reproducible. Every visited pair is tested against `d^2 <= k^2` exactly as
//! without the grid, so the result equals the exact query with the far pairs zeroed; the boxes
//! carry a small slack so that rounding never drops a pair the test would keep.
//!
//! The cost then grows with the pairs inside the boxes, plus 27 bucket probes per point and
//! occupied level. It degrades (still correct) when the box sizes span more than 2^15, or when
//! the scene is more than about 2^16 typical boxes across: the cells are then coarser than the
//! boxes.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, TensorMetadata};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, client::ComputeClient};

use super::FieldOps;
use super::cube_exact::*;
use super::cube_grid::*;
use super::{Covariance, FieldGrads, FieldInputs, FieldOptions};
use crate::cube_alloc::output;
use crate::sort::cube::sort_pairs;

/// Most feature channels a unit accumulates in registers at once.
pub(super) const MAX_CHUNK: usize = 8;

/// One launch configuration: a unit per item, [`BLOCK`] units per cube.
pub(super) fn launch_dims<R: CubeRuntime>(
    client: &ComputeClient<R>,
    items: usize,
) -> (CubeCount, CubeDim) {
    let dim = CubeDim::new_1d(BLOCK as u32);
    (calculate_cube_count_elemwise(client, items, dim), dim)
}

/// The launch configuration of the single-cube reductions.
fn one_cube() -> (CubeCount, CubeDim) {
    (CubeCount::Static(1, 1, 1), CubeDim::new_1d(BLOCK as u32))
}

/// Register accumulators per unit for `channels` feature channels.
fn chunk_for(channels: usize) -> usize {
    channels.clamp(1, MAX_CHUNK)
}

/// Entries sorted by hash bucket: bucket `b` holds `order[starts[b]..starts[b + 1]]`.
struct Buckets<R: CubeRuntime> {
    /// Item indices sorted by `(bucket, index)`.
    order: CubeTensor<R>,
    /// `[T + 1]`
    starts: CubeTensor<R>,
    /// `T - 1` (`T` a power of two).
    table_mask: u32,
}

impl<R: CubeRuntime> Buckets<R> {
    /// The hash-table size for `items` entries: a power of two, at least twice the count.
    fn table_size(items: usize) -> usize {
        (2 * items).next_power_of_two()
    }

    /// Sorts the `(keys, order)` entries the caller's key kernel wrote and finds the buckets.
    /// Every key is a bucket below `table` (a power of two): its low `log2(table)` bits order it.
    fn build(keys: CubeTensor<R>, order: CubeTensor<R>, table: usize) -> Self {
        let len = keys.shape().num_elements();
        let (keys, order) = sort_pairs(keys, order, len, table.trailing_zeros());
        let starts = output(&keys, [table + 1], DType::U32);
        let (count, dim) = launch_dims(&keys.client, table + 1);
        bucket_starts_kernel::launch::<R>(
            &keys.client,
            count,
            dim,
            keys.clone().into_tensor_arg(),
            starts.clone().into_tensor_arg(),
        );
        Buckets {
            order,
            starts,
            table_mask: (table - 1) as u32,
        }
    }
}

/// The Gaussians of one call binned on the device (see the module docs).
struct GaussianGrid<R: CubeRuntime> {
    /// `[1]`: the level-0 cell edge `h_0`.
    edge: CubeTensor<R>,
    /// `[N, 3]`: box half-extents.
    extents: CubeTensor<R>,
    /// `[N, 4]` i32: level, then cell.
    cells: CubeTensor<R>,
    /// `[1]` u32: the occupied levels as bits.
    levels: CubeTensor<R>,
    buckets: Buckets<R>,
    /// `k^2`
    cutoff_sq: f32,
}

impl<R: CubeRuntime> GaussianGrid<R> {
    /// Bins the Gaussians of `prep` for a cutoff of `k` standard deviations.
    fn new(prep: &Prepared<R>, k: f32) -> Self {
        let client = &prep.params.client;
        let n = prep.num_gaussians;
        let extents = output(&prep.params, [n, 3], prep.dtype);
        let (count, dim) = launch_dims(client, n);
        extent_kernel::launch::<R>(
            client,
            count,
            dim,
            prep.params.clone().into_tensor_arg(),
            prep.quats.clone().into_tensor_arg(),
            prep.log_scales.clone().into_tensor_arg(),
            extents.clone().into_tensor_arg(),
            k,
            prep.diagonal,
            prep.dtype.into(),
        );

        let edge = output(&prep.params, [1], prep.dtype);
        let (count, dim) = one_cube();
        cell_edge_kernel::launch::<R>(
            client,
            count,
            dim,
            prep.points.clone().into_tensor_arg(),
            prep.params.clone().into_tensor_arg(),
            extents.clone().into_tensor_arg(),
            edge.clone().into_tensor_arg(),
            prep.dtype.into(),
        );

        // One sort entry per Gaussian (one padding entry when there are none).
        let entries = n.max(1);
        let table = Buckets::<R>::table_size(n);
        let cells = output(&prep.params, [n, 4], DType::I32);
        let keys = output(&prep.params, [entries], DType::U32);
        let order = output(&prep.params, [entries], DType::U32);
        let (count, dim) = launch_dims(client, entries);
        gaussian_keys_kernel::launch::<R>(
            client,
            count,
            dim,
            prep.params.clone().into_tensor_arg(),
            extents.clone().into_tensor_arg(),
            edge.clone().into_tensor_arg(),
            cells.clone().into_tensor_arg(),
            keys.clone().into_tensor_arg(),
            order.clone().into_tensor_arg(),
            (table - 1) as u32,
            prep.dtype.into(),
        );

        let levels = output(&prep.params, [1], DType::U32);
        let (count, dim) = one_cube();
        level_mask_kernel::launch::<R>(
            client,
            count,
            dim,
            cells.clone().into_tensor_arg(),
            levels.clone().into_tensor_arg(),
        );

        GaussianGrid {
            edge,
            extents,
            cells,
            levels,
            buckets: Buckets::build(keys, order, table),
            cutoff_sq: k * k,
        }
    }
}

/// The points binned into the level-0 cells of a [`GaussianGrid`].
struct PointGrid<R: CubeRuntime> {
    /// `[P, 3]` i32
    cells: CubeTensor<R>,
    buckets: Buckets<R>,
}

impl<R: CubeRuntime> PointGrid<R> {
    fn new(prep: &Prepared<R>, grid: &GaussianGrid<R>) -> Self {
        let client = &prep.points.client;
        let p = prep.num_points;
        // One sort entry per point (one padding entry when there are none).
        let entries = p.max(1);
        let table = Buckets::<R>::table_size(p);
        let cells = output(&prep.points, [p, 3], DType::I32);
        let keys = output(&prep.points, [entries], DType::U32);
        let order = output(&prep.points, [entries], DType::U32);
        let (count, dim) = launch_dims(client, entries);
        point_keys_kernel::launch::<R>(
            client,
            count,
            dim,
            prep.points.clone().into_tensor_arg(),
            grid.edge.clone().into_tensor_arg(),
            cells.clone().into_tensor_arg(),
            keys.clone().into_tensor_arg(),
            order.clone().into_tensor_arg(),
            (table - 1) as u32,
            prep.dtype.into(),
        );
        PointGrid {
            cells,
            buckets: Buckets::build(keys, order, table),
        }
    }
}

/// The inputs made contiguous (the kernels index rows directly) and the prepared `[N, 12]`
/// per-Gaussian buffer.
struct Prepared<R: CubeRuntime> {
    points: CubeTensor<R>,
    quats: CubeTensor<R>,
    log_scales: CubeTensor<R>,
    features: CubeTensor<R>,
    params: CubeTensor<R>,
    num_points: usize,
    num_gaussians: usize,
    channels: usize,
    dtype: DType,
    diagonal: bool,
}

impl<R: CubeRuntime> Prepared<R> {
    fn new<F: FloatElement, I: IntElement, BT: BoolElement>(
        inputs: FieldInputs<CubeBackend<R, F, I, BT>>,
        options: &FieldOptions,
    ) -> Self {
        let points = into_contiguous(inputs.points);
        let means = into_contiguous(inputs.means);
        let quats = into_contiguous(inputs.quats);
        let log_scales = into_contiguous(inputs.log_scales);
        let features = into_contiguous(inputs.features);
        let [num_points, _] = points.shape().dims::<2>();
        let [num_gaussians, channels] = features.shape().dims::<2>();
        let dtype = points.dtype;
        let diagonal = options.covariance == Covariance::Diagonal;
        let params = output(&means, [num_gaussians, PARAMS], dtype);
        let (count, dim) = launch_dims(&means.client, num_gaussians);
        prepare_kernel::launch::<R>(
            &means.client,
            count,
            dim,
            means.clone().into_tensor_arg(),
            quats.clone().into_tensor_arg(),
            log_scales.clone().into_tensor_arg(),
            params.clone().into_tensor_arg(),
            diagonal,
            dtype.into(),
        );
        Prepared {
            points,
            quats,
            log_scales,
            features,
            params,
            num_points,
            num_gaussians,
            channels,
            dtype,
            diagonal,
        }
    }

    /// A point-major sweep into `out`: the values (`grad_values = None`) or the points' gradient;
    /// over all Gaussians, or with a `grid` over those within reach.
    fn point_sweep(
        &self,
        grid: Option<&GaussianGrid<R>>,
        grad_values: Option<&CubeTensor<R>>,
        out: &CubeTensor<R>,
    ) {
        let client = &self.points.client;
        let (count, dim) = launch_dims(client, self.num_points);
        let grad = grad_values.is_some();
        // The forward never reads `grad_values`; any tensor fills the slot.
        let grad_values = grad_values.unwrap_or(&self.features);
        let chunk = if grad { 3 } else { chunk_for(self.channels) };
        match grid {
            None => point_tiles_kernel::launch::<R>(
                client,
                count,
                dim,
                self.points.clone().into_tensor_arg(),
                self.params.clone().into_tensor_arg(),
                self.features.clone().into_tensor_arg(),
                grad_values.clone().into_tensor_arg(),
                out.clone().into_tensor_arg(),
                grad,
                self.diagonal,
                chunk,
                self.dtype.into(),
            ),
            Some(grid) => point_grid_kernel::launch::<R>(
                client,
                count,
                dim,
                self.points.clone().into_tensor_arg(),
                self.params.clone().into_tensor_arg(),
                self.features.clone().into_tensor_arg(),
                grad_values.clone().into_tensor_arg(),
                grid.edge.clone().into_tensor_arg(),
                grid.levels.clone().into_tensor_arg(),
                grid.cells.clone().into_tensor_arg(),
                grid.buckets.order.clone().into_tensor_arg(),
                grid.buckets.starts.clone().into_tensor_arg(),
                out.clone().into_tensor_arg(),
                grid.cutoff_sq,
                grid.buckets.table_mask,
                grad,
                self.diagonal,
                chunk,
                self.dtype.into(),
            ),
        }
    }
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> FieldOps
    for CubeBackend<R, F, I, BT>
{
    fn field_forward(inputs: FieldInputs<Self>, options: FieldOptions) -> FloatTensor<Self> {
        let prep = Prepared::new(inputs, &options);
        let values = output(&prep.points, [prep.num_points, prep.channels], prep.dtype);
        let grid = options.cutoff.map(|k| GaussianGrid::new(&prep, k));
        prep.point_sweep(grid.as_ref(), None, &values);
        values
    }

    fn field_backward(
        inputs: FieldInputs<Self>,
        grad_values: FloatTensor<Self>,
        options: FieldOptions,
        points_grad: bool,
    ) -> FieldGrads<Self> {
        let prep = Prepared::new(inputs, &options);
        let grad_values = into_contiguous(grad_values);
        let client = &prep.points.client;
        let grid = options.cutoff.map(|k| GaussianGrid::new(&prep, k));

        let grad_points = points_grad.then(|| {
            let grad_points = output(&prep.points, [prep.num_points, 3], prep.dtype);
            prep.point_sweep(grid.as_ref(), Some(&grad_values), &grad_points);
            grad_points
        });

        let n = prep.num_gaussians;
        let grad_means = output(&prep.points, [n, 3], prep.dtype);
        let grad_quats = output(&prep.points, [n, 4], prep.dtype);
        let grad_log_scales = output(&prep.points, [n, 3], prep.dtype);
        let grad_features = output(&prep.points, [n, prep.channels], prep.dtype);
        let (count, dim) = launch_dims(client, n);
        let chunk = chunk_for(prep.channels);
        match &grid {
            None => gaussian_tiles_kernel::launch::<R>(
                client,
                count,
                dim,
                prep.points.clone().into_tensor_arg(),
                prep.params.clone().into_tensor_arg(),
                prep.quats.clone().into_tensor_arg(),
                prep.log_scales.clone().into_tensor_arg(),
                prep.features.clone().into_tensor_arg(),
                grad_values.into_tensor_arg(),
                grad_means.clone().into_tensor_arg(),
                grad_quats.clone().into_tensor_arg(),
                grad_log_scales.clone().into_tensor_arg(),
                grad_features.clone().into_tensor_arg(),
                prep.diagonal,
                chunk,
                prep.dtype.into(),
            ),
            Some(grid) => {
                let points = PointGrid::new(&prep, grid);
                gaussian_grid_kernel::launch::<R>(
                    client,
                    count,
                    dim,
                    prep.points.clone().into_tensor_arg(),
                    prep.params.clone().into_tensor_arg(),
                    prep.quats.clone().into_tensor_arg(),
                    prep.log_scales.clone().into_tensor_arg(),
                    prep.features.clone().into_tensor_arg(),
                    grad_values.into_tensor_arg(),
                    grid.edge.clone().into_tensor_arg(),
                    grid.extents.clone().into_tensor_arg(),
                    grid.cells.clone().into_tensor_arg(),
                    points.cells.clone().into_tensor_arg(),
                    points.buckets.order.clone().into_tensor_arg(),
                    points.buckets.starts.clone().into_tensor_arg(),
                    grad_means.clone().into_tensor_arg(),
                    grad_quats.clone().into_tensor_arg(),
                    grad_log_scales.clone().into_tensor_arg(),
                    grad_features.clone().into_tensor_arg(),
                    grid.cutoff_sq,
                    points.buckets.table_mask,
                    prep.diagonal,
                    chunk,
                    prep.dtype.into(),
                )
            }
        }

        FieldGrads {
            points: grad_points,
            means: grad_means,
            quats: grad_quats,
            log_scales: grad_log_scales,
            features: grad_features,
        }
    }
}
