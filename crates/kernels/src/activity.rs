//! Counting what the host asks of a GPU: kernel launches and blocking reads of device memory.
//!
//! A training step is host-bound when the host spends longer recording and launching its
//! kernels than the device spends running them, and it loses the overlap of the two whenever
//! the host waits for the device (a read of device memory blocks until everything queued before
//! it has run). Both are counted here, in-process, on every CubeCL runtime (wgpu and cuda), so
//! that they can be measured, and tested, on a machine without a GPU.
//!
//! # How
//! CubeCL reports both through `tracing` spans (its `tracing` feature, which Ember's `cube`
//! feature turns on): every kernel launch runs `ComputeClient::launch_inner`, and every
//! synchronous read (`Tensor::into_data`, `into_scalar`, a kernel's own read-back) blocks in
//! `cubecl_common::future::block_on`. [`count_device_activity`] installs, once per process, a
//! global subscriber that counts those two spans and ignores every other callsite (their
//! interest is cached as "never", so the rest of CubeCL's instrumentation costs one branch).
//! A `block_on` inside another on the same thread (a read waiting on a read) counts once.
//!
//! What is counted as a read: every blocking wait on a future of the device, on any thread:
//! reads of device memory, and the waits CubeCL makes for itself (a kernel's first compilation
//! checking its shader, an autotune measurement). An explicit `Backend::sync` is not a read and
//! is not counted. The counts cover the whole process: compare two snapshots
//! ([`ActivityCounts::since`]) around the work to measure, with nothing else using the device;
//! [`DeviceActivity::reads_on_this_thread`] counts one thread's reads alone.
//!
//! On ndarray there is no device: its ops run on the host and launch nothing, so its counts
//! mean nothing (a caller reports them as missing).

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};

/// Launches and reads counted since [`count_device_activity`] first ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ActivityCounts {
    /// Kernel launches (Burn's fused kernels and Ember's own alike).
    pub launches: u64,
    /// Blocking reads of device memory and other waits on the device (see the module docs).
    pub reads: u64,
}

impl ActivityCounts {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &ActivityCounts) -> ActivityCounts {
        ActivityCounts {
            launches: self.launches - earlier.launches,
            reads: self.reads - earlier.reads,
        }
    }
}

/// Why the device activity cannot be counted in this process.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActivityError {
    /// Another global `tracing` subscriber was installed first (by the application).
    #[error(
        "another global tracing subscriber is installed, so Ember cannot count kernel launches and device reads"
    )]
    SubscriberTaken,
}

/// The handle of the running counter (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct DeviceActivity {
    counter: &'static ActivityCounter,
}

impl DeviceActivity {
    /// The counts since the counter was installed, over the whole process.
    pub fn now(&self) -> ActivityCounts {
        ActivityCounts {
            launches: self.counter.launches.load(Ordering::Relaxed),
            reads: self.counter.reads.load(Ordering::Relaxed),
        }
    }

    /// The reads the calling thread made since the counter was installed: what a loop on this
    /// thread waited for, whatever other threads of the process do meanwhile.
    pub fn reads_on_this_thread(&self) -> u64 {
        THREAD_READS.get()
    }
}

/// Starts counting kernel launches and device reads for the rest of the process (the first call
/// installs the global subscriber; later calls return the same counter). Fails when the
/// application installed a global `tracing` subscriber of its own first.
pub fn count_device_activity() -> Result<DeviceActivity, ActivityError> {
    static INSTALLED: OnceLock<Result<&'static ActivityCounter, ActivityError>> = OnceLock::new();
    let counter = INSTALLED.get_or_init(|| {
        let counter: &'static ActivityCounter = Box::leak(Box::default());
        tracing::subscriber::set_global_default(CountingSubscriber(counter))
            .map(|()| counter)
            .map_err(|_| ActivityError::SubscriberTaken)
    });
    counter.clone().map(|counter| DeviceActivity { counter })
}

#[derive(Debug, Default)]
struct ActivityCounter {
    launches: AtomicU64,
    reads: AtomicU64,
}

/// Which of the two counted spans a callsite is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counted {
    Launch,
    Read,
}

impl Counted {
    fn of(metadata: &Metadata<'_>) -> Option<Counted> {
        if !metadata.is_span() {
            return None;
        }
        match (metadata.target(), metadata.name()) {
            ("cubecl_runtime::client", "launch_inner") => Some(Counted::Launch),
            ("cubecl_common::future", "block_on") => Some(Counted::Read),
            _ => None,
        }
    }

    /// The span id handed out for this kind (ids must be non-zero; the subscriber keeps no
    /// per-span state, so one id per kind is enough).
    fn id(self) -> Id {
        Id::from_u64(match self {
            Counted::Launch => 1,
            Counted::Read => 2,
        })
    }
}

thread_local! {
    /// `block_on` spans this thread is inside (a nested one is part of the outer read).
    static READ_DEPTH: Cell<u32> = const { Cell::new(0) };
    /// The reads this thread made.
    static THREAD_READS: Cell<u64> = const { Cell::new(0) };
}

struct CountingSubscriber(&'static ActivityCounter);

impl Subscriber for CountingSubscriber {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        match Counted::of(metadata) {
            Some(_) => Interest::always(),
            None => Interest::never(),
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        Counted::of(metadata).is_some()
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let kind = Counted::of(span.metadata());
        match kind {
            Some(Counted::Launch) => {
                self.0.launches.fetch_add(1, Ordering::Relaxed);
            }
            Some(Counted::Read) if READ_DEPTH.get() == 0 => {
                self.0.reads.fetch_add(1, Ordering::Relaxed);
                THREAD_READS.set(THREAD_READS.get() + 1);
            }
            _ => {}
        }
        kind.unwrap_or(Counted::Launch).id()
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, _event: &Event<'_>) {}

    fn enter(&self, span: &Id) {
        if *span == Counted::Read.id() {
            READ_DEPTH.set(READ_DEPTH.get() + 1);
        }
    }

    fn exit(&self, span: &Id) {
        if *span == Counted::Read.id() {
            READ_DEPTH.set(READ_DEPTH.get().saturating_sub(1));
        }
    }
}
