//! Implements the collective ring all-reduce algorithm on the global level
//!
//! Ember patch: the ring runs on the tensor's bytes in host memory. The tensor is read once,
//! its elements cut into one slice per node (whatever its shape), and every slice into chunks of
//! at most [`CHUNK_BYTES`], each its own transfer of raw bytes (no serialisation, no copy on
//! the sending side): frames stay far below the websocket's 512 MiB limit, and a chunk is added
//! while the next one is on its way. Arriving chunks are added into, or stored over, the
//! tensor's own buffer in place: no other buffer is allocated and nothing is copied at the end.

use core::ops::Range;
use std::{collections::HashMap, sync::Arc};

use crate::{NodeId, global::shared::GlobalCollectiveError, node::sync::SyncService};
use burn_backend::{Backend, DType, TensorData};
use burn_communication::{
    Address, Protocol,
    data_service::{TensorDataService, TensorTransferId},
};
use bytes::Bytes;

// https://blog.dailydoseofds.com/p/all-reduce-and-ring-reduce-for-model

// Example: tensors=3, slices=3

// phase 1
// o->o  o
// o  o->o
//>o  o  o->

// o  1->o
//>o  o  1->
// 1->o  o

// o  1  2
// 2  o  1
// 1  2  o

// phase 2
//>o  1  2->
// 2->o  1
// 1  2->o

// 2->1  2
// 2  2->1
//>1  2  2->

// 2  2  2
// 2  2  2
// 2  2  2

/// Ember patch: the most bytes one transfer carries. Measured on localhost (two nodes, 1M
/// Gaussians): 1 MiB with [`WINDOW`] 16 ahead of 256 KiB (window 8) and of 2 and 4 MiB.
const CHUNK_BYTES: usize = 1 << 20;

/// Ember patch: chunk requests kept ahead of the data (16 MiB in flight per peer).
const WINDOW: usize = 16;

/// Ring all-reduce algorithm with summation
///
/// * `node` - The id of the current node
/// * `nodes` - Map of all nodes in the operation
/// * `data_service` - The data service handles peer-to-peer tensor transfers
/// * `sync_service` - The sync service handles syncing with peers
/// * `tensor` - The tensor to reduce, summed in f64 if it is f64 and in f32 otherwise
pub(crate) async fn ring_all_reduce_sum<B, P>(
    node: NodeId,
    nodes: &HashMap<NodeId, Address>,
    data_service: Arc<TensorDataService<B, P>>,
    sync_service: Arc<SyncService<P>>,
    tensor: B::FloatTensorPrimitive,
) -> Result<B::FloatTensorPrimitive, GlobalCollectiveError>
where
    B: Backend,
    P: Protocol,
{
    if nodes.len() == 1 {
        sync_service.sync().await?;
        return Ok(tensor);
    }
    let device = B::float_device(&tensor);
    let data = B::float_into_data(tensor)
        .await
        .map_err(|e| GlobalCollectiveError::Server(format!("reading the tensor: {e:?}")))?;
    let dtype = data.dtype;
    let data = match dtype {
        DType::F64 | DType::F32 => data,
        _ => data.convert::<f32>(),
    };
    let add: fn(&mut [u8], &[u8]) = match data.dtype {
        DType::F64 => add_f64,
        _ => add_f32,
    };

    let ring = get_ring_topology(nodes.keys().cloned().collect::<Vec<_>>());
    let layout = ChunkLayout::new(data.num_elements(), data.dtype.size(), ring.len());
    let buffer = RingBuffer::new(data);

    let mut send_slice_idx = ring
        .iter()
        .position(|id| *id == node)
        .expect("Node is in ring");
    let prev_node_idx = (send_slice_idx + ring.len() - 1) % ring.len(); // +ring.len for overflow
    let prev_node = ring[prev_node_idx];
    let prev_address = nodes.get(&prev_node).unwrap();

    // Phase 1 adds the received slice to this node's; phase 2 replaces it. Each round is
    // `slices.len() - 1` cycles.
    let cycles = 2 * (ring.len() - 1);
    for cycle in 0..cycles {
        let recv_slice_idx = (send_slice_idx + ring.len() - 1) % ring.len();
        let transfer_id = |chunk: usize| (cycle * layout.total_chunks() + chunk) as u64;
        for (index, range) in layout.chunks(send_slice_idx).enumerate() {
            let id = transfer_id(layout.first_chunk(send_slice_idx) + index);
            let chunk = Bytes::from_owner(ChunkOf {
                buffer: buffer.clone(),
                range,
            });
            data_service.expose_bytes(chunk, 1, id.into()).await;
        }

        // The chunks are requested ahead of the data, and each is added or stored in place as
        // it arrives while the next ones are on their way.
        let ids: Vec<TensorTransferId> = (layout.first_chunk(recv_slice_idx)
            ..layout.first_chunk(recv_slice_idx + 1))
            .map(|chunk| transfer_id(chunk).into())
            .collect();
        let phase_one = cycle < ring.len() - 1;
        let mut ranges = layout.chunks(recv_slice_idx);
        let mut incoherent = false;
        let complete = data_service
            .download_bytes_each(prev_address.clone(), &ids, WINDOW, |chunk| {
                match ranges.next() {
                    Some(range) if range.len() == chunk.len() => {
                        // SAFETY: nothing reads this chunk's bytes now. In phase 1 this node
                        // has not sent its slice yet; in phase 2 it sent it in phase 1, and
                        // what arrived is the sum over every node, this node's part included:
                        // that part left this node, so it has been read. The slice is sent
                        // again only after this cycle, and other cycles write other slices.
                        let bytes = unsafe { buffer.bytes_mut(range) };
                        match phase_one {
                            true => add(bytes, &chunk),
                            false => bytes.copy_from_slice(&chunk),
                        }
                        true
                    }
                    _ => {
                        incoherent = true;
                        false
                    }
                }
            })
            .await;
        if incoherent {
            return Err(GlobalCollectiveError::PeerSentIncoherentTensor);
        }
        if !complete {
            return Err(GlobalCollectiveError::PeerLost(prev_node));
        }
        send_slice_idx = recv_slice_idx;
    }

    // Wait for all nodes to finish
    sync_service.sync().await?;

    let summed = RingBuffer::into_data(buffer).await;
    Ok(B::float_from_data(summed.convert_dtype(dtype), &device))
}

/// Ember patch: the tensor's bytes, sent from in chunks ([`ChunkOf`], sharing the buffer) while
/// the ring writes other chunks of it in place. The ring's order keeps the two apart: a chunk is
/// written only while nothing reads it (see the `SAFETY` note in the ring), and a chunk sent is
/// borrowed (by `Bytes::from_owner`) only when it is sent, after the writes to it.
struct RingBuffer {
    /// Owns the allocation; not touched again until [`RingBuffer::into_data`].
    data: TensorData,
    /// `data`'s bytes, taken once from a unique borrow: every view and write goes through it.
    start: *mut u8,
    len: usize,
}

// SAFETY: the buffer is a plain byte allocation; its chunks being sent are only read, and the
// ring writes others (`RingBuffer::bytes_mut`).
unsafe impl Send for RingBuffer {}
unsafe impl Sync for RingBuffer {}

impl RingBuffer {
    fn new(data: TensorData) -> Arc<Self> {
        let mut buffer = Arc::new(Self {
            data,
            start: core::ptr::null_mut(),
            len: 0,
        });
        let unique = Arc::get_mut(&mut buffer).expect("a new Arc is unique");
        let bytes: &mut [u8] = &mut unique.data.bytes;
        unique.len = bytes.len();
        unique.start = bytes.as_mut_ptr();
        buffer
    }

    /// # Safety
    /// No [`ChunkOf`] of `range` may be read, and no other `bytes_mut` of it be alive, until
    /// the returned slice is dropped.
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes_mut(&self, range: Range<usize>) -> &mut [u8] {
        assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: in bounds, and exclusive by the caller's promise.
        unsafe { core::slice::from_raw_parts_mut(self.start.add(range.start), range.len()) }
    }

    /// The summed data, once the data service has dropped the last chunks (their sends end
    /// right after the peers' downloads, which the ring's final sync waited for).
    async fn into_data(mut buffer: Arc<Self>) -> TensorData {
        for _ in 0..1000 {
            match Arc::try_unwrap(buffer) {
                Ok(unique) => return unique.data,
                Err(shared) => buffer = shared,
            }
            tokio::task::yield_now().await;
        }
        // A chunk still held (not seen): read the sum out rather than wait on it.
        buffer.data.clone()
    }
}

/// Ember patch: one chunk of a [`RingBuffer`], as the owner of the bytes that send it.
struct ChunkOf {
    buffer: Arc<RingBuffer>,
    range: Range<usize>,
}

impl AsRef<[u8]> for ChunkOf {
    fn as_ref(&self) -> &[u8] {
        let RingBuffer { start, len, .. } = *self.buffer;
        assert!(self.range.start <= self.range.end && self.range.end <= len);
        // SAFETY: in bounds; `Bytes::from_owner` borrows it once, when the ring sends the chunk
        // (after its writes to it), and the ring writes it again only once it has been read.
        unsafe { core::slice::from_raw_parts(start.add(self.range.start), self.range.len()) }
    }
}

/// Ember patch: [`add_into`] for f32 and f64, as functions of this crate: compiled with it (not
/// in the generic ring's caller, whose build may be unoptimised).
fn add_f32(a: &mut [u8], b: &[u8]) {
    add_into::<4, f32>(a, b)
}

fn add_f64(a: &mut [u8], b: &[u8]) {
    add_into::<8, f64>(a, b)
}

/// Ember patch: `a += b`, element-wise, for elements of `N` bytes in native byte order (the
/// received buffers are not aligned for `F`).
fn add_into<const N: usize, F>(a: &mut [u8], b: &[u8])
where
    F: core::ops::Add<Output = F> + FromBytes<N>,
{
    for (x, y) in a.chunks_exact_mut(N).zip(b.chunks_exact(N)) {
        let total = F::from_bytes((&*x).try_into().unwrap()) + F::from_bytes(y.try_into().unwrap());
        x.copy_from_slice(&total.to_bytes());
    }
}

/// Ember patch: a float read from and written to its native-order bytes.
trait FromBytes<const N: usize> {
    fn from_bytes(bytes: [u8; N]) -> Self;
    fn to_bytes(self) -> [u8; N];
}

impl FromBytes<4> for f32 {
    fn from_bytes(bytes: [u8; 4]) -> Self {
        f32::from_ne_bytes(bytes)
    }
    fn to_bytes(self) -> [u8; 4] {
        self.to_ne_bytes()
    }
}

impl FromBytes<8> for f64 {
    fn from_bytes(bytes: [u8; 8]) -> Self {
        f64::from_ne_bytes(bytes)
    }
    fn to_bytes(self) -> [u8; 8] {
        self.to_ne_bytes()
    }
}

/// Ember patch: the byte ranges of the ring's slices and of their chunks. Slice `s` of `n`
/// holds elements `s E / n .. (s + 1) E / n` of `E`; a chunk at most [`CHUNK_BYTES`] of them.
/// Every node computes the same layout, so a chunk's transfer id names it on both ends.
struct ChunkLayout {
    slices: Vec<Range<usize>>,
    first_chunks: Vec<usize>,
    chunk_bytes: usize,
}

impl ChunkLayout {
    fn new(elements: usize, element_size: usize, slice_count: usize) -> Self {
        let chunk_bytes = CHUNK_BYTES / element_size * element_size;
        let slices: Vec<Range<usize>> = (0..slice_count)
            .map(|s| {
                s * elements / slice_count * element_size
                    ..(s + 1) * elements / slice_count * element_size
            })
            .collect();
        let mut first_chunks = Vec::with_capacity(slice_count + 1);
        let mut total = 0;
        for slice in &slices {
            first_chunks.push(total);
            total += slice.len().div_ceil(chunk_bytes);
        }
        first_chunks.push(total);
        Self {
            slices,
            first_chunks,
            chunk_bytes,
        }
    }

    fn chunks(&self, slice: usize) -> impl Iterator<Item = Range<usize>> + '_ {
        let range = self.slices[slice].clone();
        range
            .clone()
            .step_by(self.chunk_bytes)
            .map(move |start| start..(start + self.chunk_bytes).min(range.end))
    }

    fn first_chunk(&self, slice: usize) -> usize {
        self.first_chunks[slice]
    }

    fn total_chunks(&self) -> usize {
        self.first_chunks[self.slices.len()]
    }
}

/// Get the ring topology
fn get_ring_topology(mut nodes: Vec<NodeId>) -> Vec<NodeId> {
    // This ordering could be more sophisticated, using node proximities etc
    nodes.sort();

    nodes
}
