//! The similarity transform on the CPU: the caller-buffer kernel
//! (`transform::cpu::transform_into`) and the tensor op (`transform_gaussians`) give the same
//! bits. (The properties of transformed fields are tested at the root, with `ember-field`.)

use crate::transform::cpu::{GaussianSlices, GaussianSlicesMut, transform_into};
use crate::{Similarity, transform_gaussians};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use rand::SeedableRng;
use rand::rngs::StdRng;

use ember_test_utils::uniform;

use crate::backend::Cpu;

/// Raw parameters of a random set, f64, row-major (`sh_rest` is `[N, K, 3]`), drawn in the
/// order of the root tests' `Set` (opacities and DC colours are drawn and dropped).
struct Set {
    means: Vec<f64>,
    quats: Vec<f64>,
    log_scales: Vec<f64>,
    sh_rest: Vec<f64>,
    k: usize,
}

impl Set {
    fn random(seed: u64, n: usize, k: usize) -> Set {
        let mut rng = StdRng::seed_from_u64(seed);
        let means = uniform(&mut rng, 3 * n, -1.0, 1.0);
        // Unnormalised on purpose.
        let quats = uniform(&mut rng, 4 * n, -2.0, 2.0);
        let log_scales = uniform(&mut rng, 3 * n, -2.6, -1.6);
        let _logits = uniform(&mut rng, n, -1.0, 3.0);
        let _sh_dc = uniform(&mut rng, 3 * n, -1.0, 1.0);
        let sh_rest = uniform(&mut rng, 3 * k * n, -0.4, 0.4);
        Set {
            means,
            quats,
            log_scales,
            sh_rest,
            k,
        }
    }

    fn n(&self) -> usize {
        self.means.len() / 3
    }
}

/// A tensor of `B`'s float type from f64 values. Explicit dtype: Burn's default float dtype is a
/// per-device setting shared by `NdArray<f32>` and `NdArray<f64>`.
fn tensor<B: Backend, const D: usize>(v: &[f64], shape: [usize; D]) -> Tensor<B, D> {
    let device: B::Device = Default::default();
    let dtype = <B::FloatElem as burn::tensor::Element>::dtype();
    Tensor::from_data(TensorData::new(v.to_vec(), shape), (&device, dtype))
}

fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().convert::<f64>().into_vec().unwrap()
}

#[test]
fn caller_buffers_and_tensor_op_agree() {
    let set = Set::random(5, 1000, 15);
    let s = Similarity::axis_angle([0.2, -1.0, 0.4], 2.0).about([1.0, 1.0, 1.0]);
    let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    let (m, q, l, sh) = (
        f32s(&set.means),
        f32s(&set.quats),
        f32s(&set.log_scales),
        f32s(&set.sh_rest),
    );
    let mut out = [
        vec![0f32; m.len()],
        vec![0f32; q.len()],
        vec![0f32; l.len()],
        vec![0f32; sh.len()],
    ];
    let [om, oq, ol, osh] = &mut out;
    transform_into(
        &s,
        GaussianSlices {
            means: &m,
            quats: &q,
            log_scales: &l,
            sh_rest: &sh,
        },
        GaussianSlicesMut {
            means: om,
            quats: oq,
            log_scales: ol,
            sh_rest: osh,
        },
    )
    .unwrap();
    let n = set.n();
    let t = transform_gaussians(
        tensor::<Cpu, 2>(&set.means, [n, 3]),
        tensor::<Cpu, 2>(&set.quats, [n, 4]),
        tensor::<Cpu, 2>(&set.log_scales, [n, 3]),
        tensor::<Cpu, 3>(&set.sh_rest, [n, set.k, 3]),
        &[s],
    )
    .unwrap();
    assert_eq!(t.means.dims(), [1, 1000, 3]);
    assert_eq!(t.sh_rest.dims(), [1, 1000, 15, 3]);
    let as_f64 = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
    assert_eq!(host(t.means), as_f64(&out[0]));
    assert_eq!(host(t.quats), as_f64(&out[1]));
    assert_eq!(host(t.log_scales), as_f64(&out[2]));
    assert_eq!(host(t.sh_rest), as_f64(&out[3]));
}
