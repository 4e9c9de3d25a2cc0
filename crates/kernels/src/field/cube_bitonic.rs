//! The bitonic sort of `(bucket, index)` pairs that orders the field grid's hash buckets on the
//! device: `log2(n) (log2(n) + 1) / 2` compare-exchange launches over a power-of-two length.

use burn::tensor::TensorMetadata;
use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::cube::launch_dims;

/// One compare-exchange step `(k, j)` of a bitonic sort of `(keys, values)` pairs (length a
/// power of two), ascending by key then value.
#[cube(launch)]
pub(super) fn bitonic_step_kernel(
    keys: &mut Tensor<u32>,
    values: &mut Tensor<u32>,
    k: u32,
    j: u32,
) {
    let i = ABSOLUTE_POS;
    if i < keys.shape(0) {
        let a = i as u32;
        let partner = (a ^ j) as usize;
        if partner > i {
            let ka = keys[i];
            let kb = keys[partner];
            let va = values[i];
            let vb = values[partner];
            let greater = ka > kb || (ka == kb && va > vb);
            let ascending = (a & k) == 0u32;
            if greater == ascending {
                keys[i] = kb;
                keys[partner] = ka;
                values[i] = vb;
                values[partner] = va;
            }
        }
    }
}

/// Sorts `(keys, values)` (length a power of two) ascending by key then value, on the device.
pub(super) fn sort_pairs<R: CubeRuntime>(keys: &CubeTensor<R>, values: &CubeTensor<R>) {
    let len = keys.shape().num_elements();
    let (count, dim) = launch_dims(&keys.client, len);
    let mut k = 2;
    while k <= len {
        let mut j = k / 2;
        while j > 0 {
            bitonic_step_kernel::launch::<R>(
                &keys.client,
                count.clone(),
                dim,
                keys.clone().into_tensor_arg(),
                values.clone().into_tensor_arg(),
                k as u32,
                j as u32,
            );
            j /= 2;
        }
        k *= 2;
    }
}
