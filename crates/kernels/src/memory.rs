//! [`DeviceMemory`]: how much device memory a backend's allocator holds, for the peak-memory
//! figures of training runs and benchmarks.
//!
//! CubeCL's allocator (wgpu, CUDA) reserves device memory in pages and hands out slices of
//! them; it reports the bytes of live slices and the bytes of pages reserved. A page stays
//! reserved after its slices are freed, so the reservation sampled between steps follows the
//! peak within a step. The CPU backend has no device memory to report.

/// Device memory held by a backend's allocator, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryUsage {
    /// Bytes of live tensors (without the allocator's padding).
    pub in_use: u64,
    /// Bytes of device memory the allocator has reserved (what the process takes from the
    /// device, besides the driver's context).
    pub reserved: u64,
}

impl MemoryUsage {
    /// The larger of each field of `self` and `other`.
    pub fn max(self, other: MemoryUsage) -> MemoryUsage {
        MemoryUsage {
            in_use: self.in_use.max(other.in_use),
            reserved: self.reserved.max(other.reserved),
        }
    }
}

/// A backend that can say how much device memory its allocator holds.
pub trait DeviceMemory: burn::tensor::backend::Backend {
    /// The allocator's usage on `device` now, as seen from the calling thread's stream; `None`
    /// where the backend has no device memory of its own (the CPU).
    fn memory_usage(device: &Self::Device) -> Option<MemoryUsage>;
}

#[cfg(feature = "ndarray")]
impl<B: crate::ndarray_host::NdArrayBackend> DeviceMemory for B {
    fn memory_usage(_device: &Self::Device) -> Option<MemoryUsage> {
        None
    }
}

#[cfg(feature = "cube")]
impl<R, F, I, BT> DeviceMemory for burn_cubecl::CubeBackend<R, F, I, BT>
where
    R: burn_cubecl::CubeRuntime,
    F: burn_cubecl::FloatElement,
    I: burn_cubecl::IntElement,
    BT: burn_cubecl::BoolElement,
{
    fn memory_usage(device: &Self::Device) -> Option<MemoryUsage> {
        let usage = R::client(device).memory_usage().ok()?;
        Some(MemoryUsage {
            in_use: usage.bytes_in_use,
            reserved: usage.bytes_reserved,
        })
    }
}

#[cfg(feature = "cube")]
impl<B: burn_fusion::FusionBackend + DeviceMemory> DeviceMemory for burn_fusion::Fusion<B> {
    fn memory_usage(device: &Self::Device) -> Option<MemoryUsage> {
        B::memory_usage(device)
    }
}

impl<B, C> DeviceMemory for burn::backend::Autodiff<B, C>
where
    B: DeviceMemory,
    C: burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy,
{
    fn memory_usage(device: &Self::Device) -> Option<MemoryUsage> {
        B::memory_usage(device)
    }
}
