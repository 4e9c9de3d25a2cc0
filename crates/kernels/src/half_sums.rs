//! The half-precision sums measurement of the tooling issue (BENCHMARKS.md, "Half-precision
//! sums on a GPU"): the CubeCL compositing forward and the field query's forward keep their
//! running sums (transmittance, colour, depth; the per-point values) in the type this returns.
//! That is the tensors' own float type, or `f16` when the environment sets `EMBER_HALF_SUMS=1`
//! and the runtime has `f16`: a switch for the benchmark that decides whether an `f16` option
//! is worth having, so it is read from the environment rather than offered in the options.

use burn::tensor::DType;
use cubecl::prelude::*;

/// The float type of the running sums for tensors of `dtype` on `client`'s runtime.
pub(crate) fn sums_dtype<R: Runtime>(client: &ComputeClient<R>, dtype: DType) -> DType {
    let requested = std::env::var("EMBER_HALF_SUMS").is_ok_and(|v| v == "1");
    let half = cubecl::ir::StorageType::Scalar(cubecl::ir::ElemType::Float(
        cubecl::ir::FloatKind::F16,
    ));
    if requested && client.properties().supports_type(half) {
        DType::F16
    } else {
        dtype
    }
}
