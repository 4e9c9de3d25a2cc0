//! [`Splats`]: the trainable parameters as six row-aligned `[N, columns]` tensors, one per
//! [`ParamGroup`], so that the optimizer, densification and checkpoints treat every group alike
//! (row `i` of every tensor is Gaussian `i`).

use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor, TensorData};
use ember_field::GaussianField;

use crate::error::TrainError;

/// A parameter group: one learning rate, one Adam state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParamGroup {
    /// Centres, `[N, 3]`, world units.
    Means,
    /// Rotations `(w, x, y, z)`, `[N, 4]`.
    Quats,
    /// Log standard deviations, `[N, 3]`.
    LogScales,
    /// Opacity logits, `[N, 1]`.
    Opacity,
    /// SH DC coefficients, `[N, 3]` (the field's `[N, 1, 3]`).
    ShDc,
    /// Higher SH bands, `[N, 3K]` (the field's `[N, K, 3]`, coefficient-major).
    ShRest,
}

impl ParamGroup {
    /// Every group, in storage order.
    pub const ALL: [ParamGroup; 6] = [
        ParamGroup::Means,
        ParamGroup::Quats,
        ParamGroup::LogScales,
        ParamGroup::Opacity,
        ParamGroup::ShDc,
        ParamGroup::ShRest,
    ];

    /// The group's name (checkpoint keys, messages).
    pub fn name(self) -> &'static str {
        match self {
            ParamGroup::Means => "means",
            ParamGroup::Quats => "quats",
            ParamGroup::LogScales => "log_scales",
            ParamGroup::Opacity => "opacity_logits",
            ParamGroup::ShDc => "sh_dc",
            ParamGroup::ShRest => "sh_rest",
        }
    }

    /// Position in [`ParamGroup::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The parameters of `N` Gaussians, one `[N, columns]` tensor per [`ParamGroup`].
#[derive(Debug, Clone)]
pub struct Splats<B: Backend> {
    /// Indexed by [`ParamGroup::index`].
    pub columns: [Tensor<B, 2>; 6],
    /// `K`: SH coefficients per channel beyond the DC term.
    pub sh_rest_coefficients: usize,
}

impl<B: Backend> Splats<B> {
    /// The parameters of `field` (its features, if any, are not trained and dropped).
    pub fn from_field(field: &GaussianField<B>) -> Splats<B> {
        let n = field.num_gaussians();
        let k = field.sh_rest.dims()[1];
        Splats {
            columns: [
                field.means.val(),
                field.quats.val(),
                field.log_scales.val(),
                field.opacity_logits.val().reshape([n, 1]),
                field.sh_dc.val().reshape([n, 3]),
                field.sh_rest.val().reshape([n, 3 * k]),
            ],
            sh_rest_coefficients: k,
        }
    }

    /// Number of Gaussians `N`.
    pub fn len(&self) -> usize {
        self.columns[0].dims()[0]
    }

    /// Whether there are no Gaussians.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One group's `[N, columns]` tensor.
    pub fn get(&self, group: ParamGroup) -> &Tensor<B, 2> {
        &self.columns[group.index()]
    }

    /// The parameters as a [`GaussianField`] on the same backend.
    pub fn to_field(&self) -> Result<GaussianField<B>, TrainError> {
        self.field_from(|t| t.clone())
    }

    /// The parameters as a [`GaussianField`] on the autodiff backend `A`, every parameter a
    /// fresh leaf that requires its gradient.
    pub fn to_autodiff_field<A>(&self) -> Result<GaussianField<A>, TrainError>
    where
        A: AutodiffBackend<InnerBackend = B>,
    {
        self.field_from(|t| Tensor::<A, 2>::from_inner(t.clone()))
    }

    fn field_from<C: Backend>(
        &self,
        convert: impl Fn(&Tensor<B, 2>) -> Tensor<C, 2>,
    ) -> Result<GaussianField<C>, TrainError> {
        let n = self.len();
        let k = self.sh_rest_coefficients;
        let [means, quats, log_scales, opacity, sh_dc, sh_rest] = &self.columns;
        Ok(GaussianField::from_tensors(
            convert(means),
            convert(quats),
            convert(log_scales),
            convert(opacity).reshape([n]),
            convert(sh_dc).reshape([n, 1, 3]),
            convert(sh_rest).reshape([n, k, 3]),
            None,
        )?)
    }

    /// The rows `indices` (`[M]`, any order, repeats allowed).
    pub fn select(&self, indices: &Tensor<B, 1, Int>) -> Splats<B> {
        let m = indices.dims()[0];
        Splats {
            columns: self.columns.clone().map(|t| {
                let cols = t.dims()[1];
                if m == 0 || cols == 0 {
                    Tensor::zeros([m, cols], &t.device())
                } else {
                    t.select(0, indices.clone())
                }
            }),
            sh_rest_coefficients: self.sh_rest_coefficients,
        }
    }

    /// These rows followed by `other`'s.
    pub fn concat(self, other: Splats<B>) -> Splats<B> {
        if other.is_empty() {
            return self;
        }
        if self.is_empty() {
            return other;
        }
        let mut parts = other.columns.into_iter();
        Splats {
            columns: self.columns.map(|t| {
                let o = parts.next().expect("six groups");
                let cols = t.dims()[1];
                if cols == 0 {
                    Tensor::zeros([t.dims()[0] + o.dims()[0], 0], &t.device())
                } else {
                    Tensor::cat(vec![t, o], 0)
                }
            }),
            sh_rest_coefficients: self.sh_rest_coefficients,
        }
    }

    /// Replaces one group's tensor (same shape).
    pub fn set(&mut self, group: ParamGroup, value: Tensor<B, 2>) {
        debug_assert_eq!(value.dims(), self.columns[group.index()].dims());
        self.columns[group.index()] = value;
    }
}

/// `indices` as a device tensor.
pub fn index_tensor<B: Backend>(indices: &[usize], device: &B::Device) -> Tensor<B, 1, Int> {
    let data: Vec<i64> = indices.iter().map(|&i| i as i64).collect();
    Tensor::from_data(TensorData::new(data, [indices.len()]), device)
}

/// A tensor's values on the host, as `f32`.
pub fn to_host<B: Backend, const D: usize>(
    tensor: Tensor<B, D>,
    what: &'static str,
) -> Result<Vec<f32>, TrainError> {
    tensor
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .map_err(|e| TrainError::Readback {
            what,
            message: format!("{e:?}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use ember_field::GaussianFieldConfig;

    type B = NdArray<f32>;

    #[test]
    fn field_round_trip_select_and_concat() {
        let device = Default::default();
        let config = GaussianFieldConfig::new().with_sh_degree(2).with_seed(3);
        let field =
            GaussianField::<B>::random_in_box(&config, 5, [-1.0; 3], [1.0; 3], &device).unwrap();
        let splats = Splats::from_field(&field);
        assert_eq!(splats.len(), 5);
        assert_eq!(splats.get(ParamGroup::ShRest).dims(), [5, 24]);
        let back = splats.to_field().unwrap();
        back.means
            .val()
            .into_data()
            .assert_eq(&field.means.val().into_data(), true);
        let picked = splats.select(&index_tensor(&[4, 0, 0], &device));
        assert_eq!(picked.len(), 3);
        let means = to_host(splats.get(ParamGroup::Means).clone(), "means").unwrap();
        let got = to_host(picked.get(ParamGroup::Means).clone(), "means").unwrap();
        assert_eq!(&got[0..3], &means[12..15]);
        assert_eq!(&got[3..6], &means[0..3]);
        let joined = splats.concat(picked);
        assert_eq!(joined.len(), 8);
        assert_eq!(joined.to_field().unwrap().num_gaussians(), 8);
    }
}
