//! The public GPU sort and scan (`ember_kernels::sort`) against the host on random inputs
//! (fresh seeds, lengths around the 256-entry blocks), and their refusals of bad inputs, on the
//! unfused cube backend of every compiled GPU runtime.

use crate::sort::{RadixSortBackend, SortError, exclusive_sum, sort_pairs};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Tensor, TensorData};
use rand::RngExt;

use ember_test_utils::fresh_rng;

type U32s<B> = Tensor<B, 1, Int>;

fn upload<B: Backend>(values: &[u32], device: &B::Device) -> U32s<B> {
    let data = TensorData::new(values.to_vec(), [values.len()]);
    U32s::<B>::from_data(data, (device, DType::U32))
}

fn download<B: Backend>(t: U32s<B>) -> Vec<u32> {
    t.into_data().convert::<u32>().into_vec::<u32>().unwrap()
}

fn check<B: RadixSortBackend>(name: &str) {
    let device: B::Device = Default::default();
    let mut rng = fresh_rng(name);
    for (len, bits) in [(2, 32), (255, 32), (257, 13), (4099, 16), (70_001, 32)] {
        let mask = if bits == 32 {
            u32::MAX
        } else {
            (1 << bits) - 1
        };
        let keys: Vec<u32> = (0..len).map(|_| rng.random::<u32>() & mask).collect();
        let values: Vec<u32> = (0..len).map(|_| rng.random::<u32>()).collect();
        let (k, v) = sort_pairs(
            upload::<B>(&keys, &device),
            upload::<B>(&values, &device),
            bits,
        )
        .unwrap();
        let mut want: Vec<(u32, u32)> = keys.iter().copied().zip(values.iter().copied()).collect();
        // Stable: equal keys keep their input order.
        want.sort_by_key(|p| p.0);
        let got: Vec<(u32, u32)> = download(k).into_iter().zip(download(v)).collect();
        assert_eq!(got, want, "sort_pairs len {len} bits {bits}");

        let counts: Vec<u32> = (0..len).map(|_| rng.random_range(0..1000u32)).collect();
        let (sums, total) = exclusive_sum(upload::<B>(&counts, &device)).unwrap();
        let mut acc = 0u32;
        let want: Vec<u32> = counts
            .iter()
            .map(|c| {
                let before = acc;
                acc += c;
                before
            })
            .collect();
        assert_eq!(download(sums), want, "exclusive_sum len {len}");
        assert_eq!(download(total), vec![acc], "exclusive_sum total, len {len}");
    }
    let keys = upload::<B>(&[3, 1, 2], &device);
    let short = upload::<B>(&[0, 1], &device);
    assert_eq!(
        sort_pairs(keys.clone(), short, 32).err(),
        Some(SortError::Length { keys: 3, values: 2 })
    );
    assert_eq!(
        sort_pairs(keys.clone(), keys.clone(), 33).err(),
        Some(SortError::Bits(33))
    );
    let signed = U32s::<B>::from_data(TensorData::new(vec![1i32, 2], [2]), (&device, DType::I32));
    assert!(matches!(
        exclusive_sum(signed),
        Err(SortError::DType { name: "values", .. })
    ));
}

#[cfg(feature = "wgpu")]
#[test]
fn sort_and_scan_match_the_host_wgpu() {
    check::<crate::WgpuCube>("sort_gpu wgpu");
}

#[cfg(feature = "cuda")]
#[test]
fn sort_and_scan_match_the_host_cuda() {
    check::<crate::CudaCube>("sort_gpu cuda");
}
