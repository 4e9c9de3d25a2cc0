//! [`TargetImages`]: the training photos a step compares its render with, kept on the training
//! device.
//!
//! Uploading a photo every step costs a host-side conversion to `f32` and a transfer of 12
//! bytes per pixel (33 MB for a 1440x1920 phone photo), which on a GPU is a large share of a
//! step. Instead each training view is uploaded once, the first time a step uses it, as 8-bit
//! values (3 bytes per pixel, plus one byte of transparency for photos with alpha) and kept
//! while the total stays within `data.image_budget_mb`; a step then converts it to `f32` on the
//! device. Views past the budget are uploaded per step as before, so a scene of any size trains.
//! A backend that cannot store `u8` tensors keeps them as `f32` (4x the bytes, same budget).
//!
//! A masked photo (see [`DecodedImage::mask`]) travels with its mask (one more byte per pixel),
//! and its target is the photo times the mask: masked-out pixels are zero whatever the photo
//! holds there.
//!
//! The target is the same value either way: `value / 255`, plus `shift * (transparency / 255)`
//! for a background other than the one the photo was composited over (see
//! [`DecodedImage::over_background`]), in the same order of operations, so on the CPU a run
//! gives bit-identical results whichever way its images travel.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Tensor, TensorCreationOptions, TensorData};
use ember_data::DecodedImage;

/// Bytes in a megabyte of `data.image_budget_mb`.
const MB: usize = 1 << 20;

/// 8-bit values on the device: a `u8` int tensor, or an `f32` one (holding `0.0..=255.0`) on
/// a backend without `u8` tensors.
enum Bytes<B: Backend> {
    U8(Tensor<B, 3, Int>),
    F32(Tensor<B, 3>),
}

impl<B: Backend> Bytes<B> {
    fn upload(values: &[u8], shape: [usize; 3], dtype: DType, device: &B::Device) -> Self {
        match dtype {
            DType::U8 => Bytes::U8(Tensor::from_data(
                TensorData::new(values.to_vec(), shape),
                TensorCreationOptions::new(device.clone()).with_dtype(DType::U8),
            )),
            _ => Bytes::F32(Tensor::from_data(
                TensorData::new(values.iter().map(|&v| f32::from(v)).collect(), shape),
                device,
            )),
        }
    }

    /// The values as `f32`, still in `0..=255` (exact).
    fn values(&self) -> Tensor<B, 3> {
        match self {
            Bytes::U8(t) => t.clone().float(),
            Bytes::F32(t) => t.clone(),
        }
    }
}

/// One training photo on the device.
struct ResidentImage<B: Backend> {
    /// `[H, W, 3]` values in `0..=255`.
    rgb: Bytes<B>,
    /// `[H, W, 1]` values `255 (1 - alpha)`, for photos with alpha.
    transparency: Option<Bytes<B>>,
    /// `[H, W, 1]` mask values in `0..=255`, for masked photos.
    mask: Option<Bytes<B>>,
}

/// A training photo as a step compares a render with it.
#[derive(Debug, Clone)]
pub struct Target<B: Backend> {
    /// `[H, W, 3]` in `[0, 1]`: the photo over the step's background, times `mask`.
    pub rgb: Tensor<B, 3>,
    /// `[H, W, 1]` weights in `[0, 1]`: how much each pixel counts; `None` when all do.
    pub mask: Option<Tensor<B, 3>>,
}

/// Counters of a [`TargetImages`] (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TargetStats {
    /// Views held on the device.
    pub resident_views: usize,
    /// Device bytes they take.
    pub resident_bytes: usize,
    /// Uploads of a view that did not fit the budget (one per step that used it).
    pub per_step_uploads: u64,
}

/// The training photos of a run, on its device within a byte budget (see the module docs).
pub struct TargetImages<B: Backend> {
    budget_bytes: usize,
    /// The element type the photos are stored in: `U8`, or `F32` where the backend has no `u8`.
    dtype: DType,
    /// Indexed by training view; `None` until first used, or when it did not fit.
    views: Vec<Option<ResidentImage<B>>>,
    stats: TargetStats,
}

impl<B: Backend> std::fmt::Debug for TargetImages<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TargetImages")
            .field("budget_bytes", &self.budget_bytes)
            .field("dtype", &self.dtype)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<B: Backend> TargetImages<B> {
    /// An empty set for `views` training views, holding at most `budget_mb` megabytes on
    /// `device` (0: every photo is uploaded per step).
    pub fn new(views: usize, budget_mb: usize, device: &B::Device) -> Self {
        let dtype = if B::supports_dtype(device, DType::U8) {
            DType::U8
        } else {
            DType::F32
        };
        Self::stored_as(views, budget_mb, dtype)
    }

    /// As [`TargetImages::new`], storing the photos as `dtype` (`U8`, or `F32`).
    fn stored_as(views: usize, budget_mb: usize, dtype: DType) -> Self {
        TargetImages {
            budget_bytes: budget_mb.saturating_mul(MB),
            dtype,
            views: (0..views).map(|_| None).collect(),
            stats: TargetStats::default(),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> TargetStats {
        self.stats
    }

    /// The element type resident photos are stored in.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The target of training view `view`: `image` (its decoded photo, composited over
    /// `composited_over`) over `background`, on `device` (see [`Target`]).
    pub fn target(
        &mut self,
        view: usize,
        image: &DecodedImage,
        composited_over: [f32; 3],
        background: [f32; 3],
        device: &B::Device,
    ) -> Target<B> {
        if let Some(Some(resident)) = self.views.get(view) {
            return composite(resident, composited_over, background, device);
        }
        let bytes = self.device_bytes(image);
        if view < self.views.len() && self.stats.resident_bytes + bytes <= self.budget_bytes {
            let resident = self.upload(image, device);
            let target = composite(&resident, composited_over, background, device);
            self.views[view] = Some(resident);
            self.stats.resident_views += 1;
            self.stats.resident_bytes += bytes;
            return target;
        }
        self.stats.per_step_uploads += 1;
        let shape = [image.height as usize, image.width as usize, 3];
        let pixels = image.over_background(composited_over, background);
        let rgb = Tensor::from_data(TensorData::new(pixels, shape), device);
        masked(rgb, image.mask_tensor(device))
    }

    /// Device bytes `image` takes when resident.
    fn device_bytes(&self, image: &DecodedImage) -> usize {
        image.byte_len() * self.dtype.size()
    }

    fn upload(&self, image: &DecodedImage, device: &B::Device) -> ResidentImage<B> {
        let (h, w) = (image.height as usize, image.width as usize);
        let rgb = Bytes::upload(&image.data, [h, w, 3], self.dtype, device);
        let transparency = image
            .transparency
            .as_ref()
            .map(|t| Bytes::upload(t, [h, w, 1], self.dtype, device));
        let mask = image
            .mask
            .as_ref()
            .map(|m| Bytes::upload(m, [h, w, 1], self.dtype, device));
        ResidentImage {
            rgb,
            transparency,
            mask,
        }
    }
}

/// `rgb` times `mask` (when there is one), with the mask beside it.
fn masked<B: Backend>(rgb: Tensor<B, 3>, mask: Option<Tensor<B, 3>>) -> Target<B> {
    Target {
        rgb: match &mask {
            Some(mask) => rgb * mask.clone(),
            None => rgb,
        },
        mask,
    }
}

/// `rgb / 255`, plus `(background - composited_over) * transparency / 255` where the photo has
/// alpha and the backgrounds differ: [`DecodedImage::over_background`] on the device.
fn composite<B: Backend>(
    image: &ResidentImage<B>,
    composited_over: [f32; 3],
    background: [f32; 3],
    device: &B::Device,
) -> Target<B> {
    let values = image.rgb.values().div_scalar(255.0);
    let rgb = match &image.transparency {
        Some(transparency) if background != composited_over => {
            let shift = [0, 1, 2].map(|c| background[c] - composited_over[c]);
            let shift = Tensor::<B, 1>::from_data(TensorData::new(shift.to_vec(), [3]), device)
                .reshape([1, 1, 3]);
            values + transparency.values().div_scalar(255.0) * shift
        }
        _ => values,
    };
    masked(
        rgb,
        image.mask.as_ref().map(|m| m.values().div_scalar(255.0)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray;

    fn photo(width: u32, height: u32, alpha: bool, seed: u32) -> DecodedImage {
        let n = (width * height) as usize;
        let byte =
            |i: usize, k: u32| ((i as u32).wrapping_mul(2654435761).wrapping_add(k) >> 7) as u8;
        DecodedImage {
            width,
            height,
            data: (0..3 * n).map(|i| byte(i, seed)).collect(),
            transparency: alpha.then(|| (0..n).map(|i| byte(i, seed + 1)).collect()),
            mask: None,
        }
    }

    fn values(t: Target<B>) -> Vec<f32> {
        t.rgb.into_data().to_vec::<f32>().unwrap()
    }

    #[test]
    fn resident_targets_equal_host_targets_bit_for_bit() {
        let device = Default::default();
        let over = [1.0, 1.0, 1.0];
        for (alpha, dtype) in [(false, DType::U8), (true, DType::U8), (true, DType::F32)] {
            let image = photo(7, 5, alpha, 11);
            let mut resident = TargetImages::<B>::stored_as(1, 64, dtype);
            let mut host = TargetImages::<B>::new(1, 0, &device);
            for background in [over, [0.2, 0.7, 0.1]] {
                let expected = image.over_background(over, background);
                let a = values(resident.target(0, &image, over, background, &device));
                let b = values(host.target(0, &image, over, background, &device));
                assert_eq!(a, expected, "alpha {alpha}, background {background:?}");
                assert_eq!(b, expected, "alpha {alpha}, background {background:?}");
            }
            assert_eq!(resident.stats().resident_views, 1);
            assert_eq!(resident.stats().per_step_uploads, 0);
            assert_eq!(host.stats().resident_views, 0);
            assert_eq!(host.stats().per_step_uploads, 2);
        }
    }

    #[test]
    fn masked_targets_are_the_photo_times_the_mask_either_way() {
        let device = Default::default();
        let mut image = photo(7, 5, true, 3);
        let mask: Vec<u8> = (0..35).map(|i| [0, 255, 128][i % 3]).collect();
        image.mask = Some(mask.clone());
        let over = [1.0, 1.0, 1.0];
        let background = [0.2, 0.7, 0.1];
        let expected: Vec<f32> = image
            .over_background(over, background)
            .iter()
            .enumerate()
            .map(|(i, v)| v * (f32::from(mask[i / 3]) / 255.0))
            .collect();
        let weights: Vec<f32> = mask.iter().map(|&m| f32::from(m) / 255.0).collect();
        for budget in [64, 0] {
            let mut targets = TargetImages::<B>::stored_as(1, budget, DType::U8);
            let target = targets.target(0, &image, over, background, &device);
            let got = target
                .mask
                .clone()
                .expect("the mask travels with the photo");
            assert_eq!(got.into_data().to_vec::<f32>().unwrap(), weights);
            assert_eq!(values(target), expected, "budget {budget}");
        }
    }

    #[test]
    fn views_past_the_budget_are_uploaded_per_step() {
        let device = Default::default();
        // A 1 MB budget holds five of these 256x256 photos as u8 (196,608 bytes each), one as
        // f32: the first ones used stay resident, the others travel at every use.
        let images: Vec<DecodedImage> = (0..6).map(|i| photo(256, 256, false, i)).collect();
        let mut targets = TargetImages::<B>::new(images.len(), 1, &device);
        let per_photo = 256 * 256 * 3 * targets.dtype().size();
        let fits = (1 << 20) / per_photo;
        for _ in 0..2 {
            for (view, image) in images.iter().enumerate() {
                let t = targets.target(view, image, [0.0; 3], [0.0; 3], &device);
                assert_eq!(values(t), image.to_f32());
            }
        }
        let stats = targets.stats();
        assert_eq!(stats.resident_views, fits.min(images.len()));
        assert_eq!(stats.resident_bytes, stats.resident_views * per_photo);
        assert_eq!(
            stats.per_step_uploads,
            2 * (images.len() - stats.resident_views) as u64
        );
    }
}
