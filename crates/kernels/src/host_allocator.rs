//! The process's heap, set up for a render or training loop on the CPU.
//!
//! Every CPU render allocates tens of megabytes of fresh buffers (the projection's outputs, the
//! tile lists, the images; the backward's per-tile partial sums) and frees them again. glibc's
//! `malloc` hands freed memory at the top of its heaps back to the kernel (and serves large
//! blocks from `mmap`), so the next render faults every page in again, zero-filled by the
//! kernel. `docs/benchmarks-history.md` ("the heap kept between renders") gives the measured
//! cost, with the machine, date and command.
//!
//! [`keep_freed_memory`] tells glibc to keep freed memory for reuse instead. It changes the
//! whole process, so Ember's library code never calls it: the `trainer` binary, the
//! benchmarks and the examples that time renders do, at start-up; a program embedding Ember
//! decides for itself. The cost is that the heap stays at its high-water mark.

/// Asks the C allocator to keep freed memory for reuse instead of returning it to the kernel
/// (glibc on Linux: trimming only above 1 GiB of free memory at a heap's top, `mmap` only for
/// blocks of 32 MiB or more, the largest threshold glibc accepts). Returns whether the settings were applied; elsewhere it does
/// nothing and returns `false`. Process-wide; call it once, early, from a binary.
pub fn keep_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const TRIM: libc::c_int = 1 << 30;
        const MMAP: libc::c_int = 32 << 20;
        // SAFETY: `mallopt` only sets allocator parameters; both values are in range.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM) == 1
                && libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn glibc_takes_the_settings() {
        assert!(super::keep_freed_memory());
    }
}
