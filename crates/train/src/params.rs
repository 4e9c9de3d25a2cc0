//! The trainable parameters by group: a [`ParamGroup`] names one parameter of the
//! [`GaussianField`] (one learning rate, one Adam state), which training keeps in the field's
//! own layout. Row `i` of every parameter is Gaussian `i`.

use burn::module::Param;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use ember_field::{GaussianField, to_host};

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
    /// Opacity logits, `[N]`.
    Opacity,
    /// SH DC coefficients, `[N, 1, 3]`.
    ShDc,
    /// Higher SH bands, `[N, K, 3]`.
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

    /// Values per Gaussian in the `[N, columns]` layout, for a model with
    /// `sh_rest_coefficients` SH coefficients beyond DC per channel.
    pub fn width(self, sh_rest_coefficients: usize) -> usize {
        match self {
            ParamGroup::Means | ParamGroup::LogScales | ParamGroup::ShDc => 3,
            ParamGroup::Quats => 4,
            ParamGroup::Opacity => 1,
            ParamGroup::ShRest => 3 * sh_rest_coefficients,
        }
    }

    /// The group's parameter in `field` as `[N, columns]` (`columns` = the values per
    /// Gaussian: `3K` for [`ParamGroup::ShRest`], coefficient-major), the layout of checkpoints.
    pub fn columns<B: Backend>(self, field: &GaussianField<B>) -> Tensor<B, 2> {
        let n = field.num_gaussians();
        match self {
            ParamGroup::Means => field.means.val(),
            ParamGroup::Quats => field.quats.val(),
            ParamGroup::LogScales => field.log_scales.val(),
            ParamGroup::Opacity => field.opacity_logits.val().reshape([n, 1]),
            ParamGroup::ShDc => field.sh_dc.val().reshape([n, 3]),
            ParamGroup::ShRest => {
                let k = field.sh_rest.dims()[1];
                field.sh_rest.val().reshape([n, 3 * k])
            }
        }
    }

    /// Replaces the group's parameter in `field` with `values` `[N', columns]` (the layout of
    /// [`ParamGroup::columns`]); the caller keeps every group at the same `N'`.
    pub fn set_columns<B: Backend>(self, field: &mut GaussianField<B>, values: Tensor<B, 2>) {
        let [n, columns] = values.dims();
        match self {
            ParamGroup::Means => field.means = Param::from_tensor(values),
            ParamGroup::Quats => field.quats = Param::from_tensor(values),
            ParamGroup::LogScales => field.log_scales = Param::from_tensor(values),
            ParamGroup::Opacity => field.opacity_logits = Param::from_tensor(values.reshape([n])),
            ParamGroup::ShDc => field.sh_dc = Param::from_tensor(values.reshape([n, 1, 3])),
            ParamGroup::ShRest => {
                field.sh_rest = Param::from_tensor(values.reshape([n, columns / 3, 3]))
            }
        }
    }
}

/// `indices` as a device tensor.
pub fn index_tensor<B: Backend>(indices: &[usize], device: &B::Device) -> Tensor<B, 1, Int> {
    let data: Vec<i64> = indices.iter().map(|&i| i as i64).collect();
    Tensor::from_data(TensorData::new(data, [indices.len()]), device)
}

/// A 64-bit FNV-1a hash of the bits of `field`'s parameters, group by group in
/// [`ParamGroup::ALL`]'s order: equal for two fields exactly when (but for a collision) they
/// hold the same values, bit for bit.
pub fn parameter_hash<B: Backend>(field: &GaussianField<B>) -> Result<u64, TrainError> {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for group in ParamGroup::ALL {
        for value in to_host(group.columns(field), "parameters")? {
            for byte in value.to_bits().to_le_bytes() {
                hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    Ok(hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_field::{GaussianFieldConfig, to_host};

    type B = ember_kernels::backend::Cpu;

    #[test]
    fn columns_round_trip_every_group() {
        let device = Default::default();
        let config = GaussianFieldConfig::new().with_sh_degree(2).with_seed(3);
        let field =
            GaussianField::<B>::random_in_box(&config, 5, [-1.0; 3], [1.0; 3], &device).unwrap();
        assert_eq!(ParamGroup::ShRest.columns(&field).dims(), [5, 24]);
        assert_eq!(ParamGroup::Opacity.columns(&field).dims(), [5, 1]);
        let mut copy = field.clone();
        for group in ParamGroup::ALL {
            let columns = group.columns(&field).mul_scalar(2.0);
            group.set_columns(&mut copy, columns.clone());
            group
                .columns(&copy)
                .into_data()
                .assert_eq(&columns.into_data(), true);
        }
        assert_eq!(copy.sh_rest.dims(), [5, 8, 3]);
        assert_eq!(copy.opacity_logits.dims(), [5]);
        let picked = field.select(&index_tensor(&[4, 0, 0], &device));
        assert_eq!(picked.num_gaussians(), 3);
        let means = to_host(field.means.val(), "means").unwrap();
        let got = to_host(picked.means.val(), "means").unwrap();
        assert_eq!(&got[0..3], &means[12..15]);
        assert_eq!(&got[3..6], &means[0..3]);
        let joined = field.cat(picked).unwrap();
        assert_eq!(joined.num_gaussians(), 8);
        assert_eq!(joined.sh_rest.dims(), [8, 8, 3]);
    }
}
