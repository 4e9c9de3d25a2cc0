//! The CubeCL prefix sum and radix sort (see the [module docs](super)).

use burn::tensor::DType;
use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;
use cubecl::calculate_cube_count_elemwise;
use cubecl::prelude::*;

/// Entries per cube in the scans and the sort passes.
pub(crate) const BLOCK: usize = 256;

/// Key bits sorted per pass.
const DIGIT_BITS: u32 = 8;

/// Distinct digits per pass.
const DIGITS: usize = 1 << DIGIT_BITS;

/// Keys per unit in a sort pass: a cube sorts `ITEMS BLOCK` keys, so that the digit counts
/// (`DIGITS` per cube) stay a quarter of the keys and one cube scans them up to a million keys.
const ITEMS: usize = 4;

/// Keys per cube in a sort pass.
const SORT_BLOCK: usize = ITEMS * BLOCK;

// The scatter's unit `d` keeps digit `d`'s next slot.
const _: () = assert!(DIGITS == BLOCK);

/// A contiguous `u32` tensor of `len` entries (at least one, so that a buffer exists), on the
/// device of `like`, to be written by a kernel.
pub(crate) fn u32_tensor<R: CubeRuntime>(like: &CubeTensor<R>, len: usize) -> CubeTensor<R> {
    crate::cube_alloc::output(like, [len.max(1)], DType::U32)
}

/// The launch shape for `blocks` cubes of [`BLOCK`] units (the count may round up: kernels
/// stop the cubes past `blocks`).
pub(crate) fn block_dims<R: CubeRuntime>(
    client: &ComputeClient<R>,
    blocks: usize,
) -> (CubeCount, CubeDim) {
    let dim = CubeDim::new_1d(BLOCK as u32);
    (
        calculate_cube_count_elemwise(client, blocks.max(1) * BLOCK, dim),
        dim,
    )
}

/// The sum of `value` over the units `0..=UNIT_POS` of a cube of [`BLOCK`] units (every unit
/// passes one value). Hillis-Steele: after the step with `offset`, a unit's slot sums the
/// `2 offset` values ending at it.
#[cube]
fn cube_inclusive_sum(value: u32) -> u32 {
    let u = UNIT_POS as usize;
    let mut shared = SharedMemory::<u32>::new(BLOCK);
    shared[u] = value;
    sync_cube();
    let mut offset = 1usize.runtime();
    while offset < BLOCK {
        let mut add = 0u32.runtime();
        if u >= offset {
            add = shared[u - offset];
        }
        sync_cube();
        shared[u] += add;
        sync_cube();
        offset *= 2;
    }
    shared[u]
}

/// One cube per block of `values[..len]`: the block's exclusive scan into `out`, its total into
/// `block_sums[block]`.
#[cube(launch)]
fn block_scan_kernel(
    values: &Tensor<u32>,
    out: &mut Tensor<u32>,
    block_sums: &mut Tensor<u32>,
    len: u32,
) {
    let block = CUBE_POS;
    if block >= block_sums.shape(0) {
        terminate!();
    }
    let u = UNIT_POS as usize;
    let i = block * BLOCK + u;
    let mut v = 0u32.runtime();
    if i < len as usize {
        v = values[i];
    }
    let inclusive = cube_inclusive_sum(v);
    if i < len as usize {
        out[i] = inclusive - v;
    }
    if u == BLOCK - 1 {
        block_sums[block] = inclusive;
    }
}

/// The longest scan done by one cube ([`single_cube_scan_kernel`]): longer ones take a block
/// scan, a scan of the block sums and an addition, three launches or more. Each unit sums a run
/// of up to 1024 entries: on a GPU a one-cube scan of 256 K entries costs tens of
/// microseconds, less than the two launches more that a block scan records.
pub(crate) const SINGLE_CUBE_SCAN: usize = 1 << 18;

/// One cube of [`BLOCK`] units: the exclusive scan of `values[..len]` into `out`, and the total
/// into `total[0]`. Unit `u` sums its run of `run = ceil(len / BLOCK)` consecutive entries, the
/// cube scans the runs' sums, and each unit writes its run from its offset.
#[cube(launch)]
fn single_cube_scan_kernel(
    values: &Tensor<u32>,
    out: &mut Tensor<u32>,
    total: &mut Tensor<u32>,
    len: u32,
    run: u32,
) {
    let u = UNIT_POS as usize;
    let len = len as usize;
    let run = run as usize;
    let start = usize::min(u * run, len);
    let end = usize::min(start + run, len);
    let mut sum = 0u32.runtime();
    for i in start..end {
        sum += values[i];
    }
    let inclusive = cube_inclusive_sum(sum);
    let mut acc = inclusive - sum;
    for i in start..end {
        let v = values[i];
        out[i] = acc;
        acc += v;
    }
    if u == BLOCK - 1 {
        total[0] = inclusive;
    }
}

/// Adds each block's offset to its entries of `out[..len]`.
#[cube(launch)]
fn add_block_offsets_kernel(out: &mut Tensor<u32>, block_offsets: &Tensor<u32>, len: u32) {
    let i = ABSOLUTE_POS;
    if i >= len as usize {
        terminate!();
    }
    out[i] += block_offsets[i / BLOCK];
}

/// Writes the exclusive prefix sum of `values[..len]` into `out[..len]`; returns a one-entry
/// tensor holding the total. Sums wrap at `2^32`. Scans of up to `single_cube` entries take one
/// cube ([`SINGLE_CUBE_SCAN`] but in the tests of the deeper levels).
fn scan_into<R: CubeRuntime>(
    values: &CubeTensor<R>,
    out: &CubeTensor<R>,
    len: usize,
    single_cube: usize,
) -> CubeTensor<R> {
    let client = &values.client;
    if len <= single_cube {
        let total = u32_tensor(values, 1);
        single_cube_scan_kernel::launch::<R>(
            client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(BLOCK as u32),
            values.clone().into_tensor_arg(),
            out.clone().into_tensor_arg(),
            total.clone().into_tensor_arg(),
            len as u32,
            len.div_ceil(BLOCK) as u32,
        );
        return total;
    }
    let blocks = len.div_ceil(BLOCK);
    let sums = u32_tensor(values, blocks);
    let (count, dim) = block_dims(client, blocks);
    block_scan_kernel::launch::<R>(
        client,
        count,
        dim,
        values.clone().into_tensor_arg(),
        out.clone().into_tensor_arg(),
        sums.clone().into_tensor_arg(),
        len as u32,
    );
    let block_offsets = u32_tensor(values, blocks);
    let total = scan_into(&sums, &block_offsets, blocks, single_cube);
    let (count, dim) = block_dims(client, blocks);
    add_block_offsets_kernel::launch::<R>(
        client,
        count,
        dim,
        out.clone().into_tensor_arg(),
        block_offsets.into_tensor_arg(),
        len as u32,
    );
    total
}

/// The exclusive prefix sum of the `u32` entries `values[..len]`: `(sums [len], total [1])`.
pub(crate) fn exclusive_sum<R: CubeRuntime>(
    values: &CubeTensor<R>,
    len: usize,
) -> (CubeTensor<R>, CubeTensor<R>) {
    exclusive_sum_with(values, len, SINGLE_CUBE_SCAN)
}

/// [`exclusive_sum`] with one-cube scans of up to `single_cube` entries.
fn exclusive_sum_with<R: CubeRuntime>(
    values: &CubeTensor<R>,
    len: usize,
    single_cube: usize,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let out = u32_tensor(values, len);
    let total = scan_into(values, &out, len, single_cube);
    (out, total)
}

/// The digit of `key` in the pass at `shift`.
#[cube]
fn digit_of(key: u32, shift: u32) -> u32 {
    (key >> shift) & (DIGITS as u32 - 1)
}

/// One cube per block of [`SORT_BLOCK`] keys: how many of its keys have each digit,
/// digit-major (`counts[digit * blocks + block]`), so that the exclusive scan of `counts` is
/// every (digit, block)'s first output slot. The cube counts in shared memory with atomic
/// additions; unit `d` writes digit `d`'s count.
#[cube(launch)]
fn digit_counts_kernel(keys: &Tensor<u32>, counts: &mut Tensor<u32>, len: u32, shift: u32) {
    let blocks = counts.shape(0) / DIGITS;
    let block = CUBE_POS;
    if block >= blocks {
        terminate!();
    }
    let u = UNIT_POS as usize;
    let histogram = SharedMemory::<Atomic<u32>>::new(DIGITS);
    histogram[u].store(0);
    sync_cube();
    #[unroll]
    for item in 0..ITEMS {
        let i = block * SORT_BLOCK + item * BLOCK + u;
        if i < len as usize {
            histogram[digit_of(keys[i], shift) as usize].fetch_add(1);
        }
    }
    sync_cube();
    counts[u * blocks + block] = histogram[u].load();
}

/// One cube per block of [`SORT_BLOCK`] entries, taken in [`ITEMS`] rounds of [`BLOCK`]: each
/// entry goes to its (digit, block) slot from the scanned counts, plus the entries with its
/// digit in the earlier rounds, plus those before it in its round, which keeps equal digits in
/// their input order (a stable pass).
#[cube(launch)]
fn scatter_kernel(
    keys_in: &Tensor<u32>,
    values_in: &Tensor<u32>,
    keys_out: &mut Tensor<u32>,
    values_out: &mut Tensor<u32>,
    slots: &Tensor<u32>,
    len: u32,
    shift: u32,
) {
    let blocks = slots.shape(0) / DIGITS;
    let block = CUBE_POS;
    if block >= blocks {
        terminate!();
    }
    let u = UNIT_POS as usize;
    // `next[d]`: the next free slot of digit `d` (unit `d` keeps it).
    let mut next = SharedMemory::<u32>::new(DIGITS);
    let mut round = SharedMemory::<u32>::new(BLOCK);
    let histogram = SharedMemory::<Atomic<u32>>::new(DIGITS);
    next[u] = slots[u * blocks + block];
    for item in 0..ITEMS {
        let i = block * SORT_BLOCK + item * BLOCK + u;
        let valid = i < len as usize;
        let mut key = 0u32.runtime();
        let mut value = 0u32.runtime();
        let mut digit = (DIGITS as u32).runtime();
        if valid {
            key = keys_in[i];
            value = values_in[i];
            digit = digit_of(key, shift);
        }
        round[u] = digit;
        histogram[u].store(0);
        sync_cube();
        if valid {
            let mut rank = 0u32.runtime();
            for j in 0..u {
                if round[j] == digit {
                    rank += 1;
                }
            }
            let dst = (next[digit as usize] + rank) as usize;
            keys_out[dst] = key;
            values_out[dst] = value;
            histogram[digit as usize].fetch_add(1);
        }
        // Every unit has read `next`; unit `d` moves digit `d`'s slot past this round's.
        sync_cube();
        next[u] += histogram[u].load();
        sync_cube();
    }
}

/// Sorts the pairs `(keys[i], values[i])`, `i < len`, by the low `bits` bits of the keys
/// (higher bits must be zero), stably; returns the sorted `(keys, values)` (new tensors, or the
/// inputs when no pass is needed).
pub(crate) fn sort_pairs<R: CubeRuntime>(
    keys: CubeTensor<R>,
    values: CubeTensor<R>,
    len: usize,
    bits: u32,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let passes = bits.div_ceil(DIGIT_BITS);
    if len <= 1 || passes == 0 {
        return (keys, values);
    }
    let client = keys.client.clone();
    let blocks = len.div_ceil(SORT_BLOCK);
    let (count, dim) = block_dims(&client, blocks);
    let counts = u32_tensor(&keys, DIGITS * blocks);
    let (mut keys, mut values) = (keys, values);
    let mut keys_next = u32_tensor(&keys, len);
    let mut values_next = u32_tensor(&keys, len);
    for pass in 0..passes {
        let shift = pass * DIGIT_BITS;
        digit_counts_kernel::launch::<R>(
            &client,
            count.clone(),
            dim,
            keys.clone().into_tensor_arg(),
            counts.clone().into_tensor_arg(),
            len as u32,
            shift,
        );
        let (slots, _) = exclusive_sum(&counts, DIGITS * blocks);
        scatter_kernel::launch::<R>(
            &client,
            count.clone(),
            dim,
            keys.clone().into_tensor_arg(),
            values.clone().into_tensor_arg(),
            keys_next.clone().into_tensor_arg(),
            values_next.clone().into_tensor_arg(),
            slots.into_tensor_arg(),
            len as u32,
            shift,
        );
        core::mem::swap(&mut keys, &mut keys_next);
        core::mem::swap(&mut values, &mut values_next);
    }
    (keys, values)
}

#[cfg(all(test, feature = "wgpu"))]
mod tests {
    use burn::backend::wgpu::{CubeBackend, WgpuDevice, WgpuRuntime};
    use burn::tensor::{DType, Int, Tensor, TensorData};
    use burn_cubecl::tensor::CubeTensor;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    use super::{SINGLE_CUBE_SCAN, exclusive_sum, exclusive_sum_with, sort_pairs};

    type R = WgpuRuntime;
    type B = CubeBackend<R, f32, i32, u32>;

    fn upload(values: &[u32]) -> CubeTensor<R> {
        let data = TensorData::new(values.to_vec(), [values.len()]);
        Tensor::<B, 1, Int>::from_data(data, (&WgpuDevice::default(), DType::U32)).into_primitive()
    }

    fn download(t: CubeTensor<R>, len: usize) -> Vec<u32> {
        let data = burn_cubecl::ops::into_data_sync::<R>(t);
        data.as_slice::<u32>().expect("u32 data")[..len].to_vec()
    }

    fn rng() -> StdRng {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7);
        println!("seed {seed}");
        StdRng::seed_from_u64(seed)
    }

    #[test]
    fn exclusive_sum_matches_the_host_over_three_levels() {
        let mut rng = rng();
        let check = |values: &[u32], sums: Vec<u32>, total: Vec<u32>, what: &str| {
            let mut want = Vec::with_capacity(values.len());
            let mut acc = 0u32;
            for v in values {
                want.push(acc);
                acc += v;
            }
            assert_eq!(sums, want, "{what}");
            assert_eq!(total, vec![acc], "total, {what}");
        };
        // One cube up to `SINGLE_CUBE_SCAN` (runs of one entry and of many, some units past the
        // end), and a block scan past it.
        for len in [
            1,
            255,
            256,
            257,
            5_000,
            SINGLE_CUBE_SCAN,
            SINGLE_CUBE_SCAN + 1,
        ] {
            let values: Vec<u32> = (0..len).map(|_| rng.random_range(0..100u32)).collect();
            let (sums, total) = exclusive_sum(&upload(&values), len);
            check(
                &values,
                download(sums, len),
                download(total, 1),
                &format!("len {len}"),
            );
        }
        // The deeper levels with one-cube scans of 1024 entries: a block scan whose block sums
        // one cube scans, and past `256 x 1024` a third level.
        for len in [1024, 1025, 70_001, 256 * 1024 + 3] {
            let values: Vec<u32> = (0..len).map(|_| rng.random_range(0..100u32)).collect();
            let (sums, total) = exclusive_sum_with(&upload(&values), len, 1024);
            let what = format!("len {len}, one-cube scans of 1024");
            check(&values, download(sums, len), download(total, 1), &what);
        }
    }

    #[test]
    fn sort_pairs_is_a_stable_sort_on_the_low_bits() {
        let mut rng = rng();
        for (len, bits) in [
            (1000, 32),
            (5000, 11),
            (300, 4),
            (70_000, 7),
            (1025, 16),
            (300_000, 20),
        ] {
            let mask = if bits == 32 {
                u32::MAX
            } else {
                (1u32 << bits) - 1
            };
            let keys: Vec<u32> = (0..len).map(|_| rng.random::<u32>() & mask).collect();
            let values: Vec<u32> = (0..len as u32).collect();
            let (k, v) = sort_pairs(upload(&keys), upload(&values), len, bits);
            let mut want: Vec<(u32, u32)> = keys.iter().copied().zip(values).collect();
            // `sort_by_key` is stable: equal keys keep their index order.
            want.sort_by_key(|p| p.0);
            let got: Vec<(u32, u32)> = download(k, len).into_iter().zip(download(v, len)).collect();
            assert_eq!(got, want, "len {len}, bits {bits}");
        }
    }
}
