//! Implements the collective ring all-reduce algorithm on the global level
//!
//! Ember patch: the ring runs on the tensor's bytes in host memory. The tensor is read once,
//! its elements cut into one slice per node (whatever its shape), and every slice into chunks of
//! at most [`CHUNK_BYTES`], each its own transfer of raw bytes (no serialisation, no copy on
//! the sending side): frames stay far below the websocket's 512 MiB limit, and a chunk is added
//! while the next one is on its way. The sum is written back into the tensor's own buffer.

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

/// Ember patch: the most bytes one transfer carries. Small frames keep the websocket's
/// send buffer from shifting what is left of a large frame after every partial write (1 MiB
/// and 4 MiB measured slower on localhost).
const CHUNK_BYTES: usize = 256 << 10;

/// Ember patch: chunk requests kept ahead of the data.
const WINDOW: usize = 8;

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
        sync_service.sync().await;
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
    let add: fn(&[u8], &[u8]) -> Bytes = match data.dtype {
        DType::F64 => sum::<8, f64>,
        _ => sum::<4, f32>,
    };

    let ring = get_ring_topology(nodes.keys().cloned().collect::<Vec<_>>());
    let layout = ChunkLayout::new(data.num_elements(), data.dtype.size(), ring.len());
    let own = Arc::new(data);
    let own_bytes = Bytes::from_owner(SharedData(own.clone()));
    // Every slice's chunks: views of the tensor's bytes, replaced as the ring goes round.
    let mut slices: Vec<Vec<Bytes>> = (0..ring.len())
        .map(|slice| {
            layout
                .chunks(slice)
                .map(|chunk| own_bytes.slice(chunk))
                .collect()
        })
        .collect();
    drop(own_bytes);

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
        for (index, chunk) in slices[send_slice_idx].iter().enumerate() {
            let id = transfer_id(layout.first_chunk(send_slice_idx) + index);
            data_service.expose_bytes(chunk.clone(), 1, id.into()).await;
        }

        // The chunks are requested ahead of the data, and each is added or stored as it arrives
        // while the next ones are on their way.
        let ids: Vec<TensorTransferId> = (0..slices[recv_slice_idx].len())
            .map(|index| transfer_id(layout.first_chunk(recv_slice_idx) + index).into())
            .collect();
        let phase_one = cycle < ring.len() - 1;
        let mut currents = slices[recv_slice_idx].iter_mut();
        let mut incoherent = false;
        let complete = data_service
            .download_bytes_each(prev_address.clone(), &ids, WINDOW, |chunk| {
                match currents.next() {
                    Some(current) if current.len() == chunk.len() => {
                        *current = if phase_one { add(&chunk, current) } else { chunk };
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
    sync_service.sync().await;

    // Every chunk has been replaced and every view sent: the tensor's buffer is free again.
    let mut summed = Arc::try_unwrap(own).unwrap_or_else(|shared| (*shared).clone());
    let buffer: &mut [u8] = &mut summed.bytes;
    for (slice, chunks) in slices.iter().enumerate() {
        for (range, chunk) in layout.chunks(slice).zip(chunks) {
            buffer[range].copy_from_slice(chunk);
        }
    }
    Ok(B::float_from_data(summed.convert_dtype(dtype), &device))
}

/// Ember patch: the tensor's data as the owner of the bytes the transfers share.
struct SharedData(Arc<TensorData>);

impl AsRef<[u8]> for SharedData {
    fn as_ref(&self) -> &[u8] {
        &self.0.bytes
    }
}

/// Ember patch: `a + b`, element-wise, for elements of `N` bytes in native byte order (the
/// received buffers are not aligned for `F`).
fn sum<const N: usize, F>(a: &[u8], b: &[u8]) -> Bytes
where
    F: core::ops::Add<Output = F> + FromBytes<N>,
{
    let mut out = vec![0u8; a.len()];
    for ((o, x), y) in out
        .chunks_exact_mut(N)
        .zip(a.chunks_exact(N))
        .zip(b.chunks_exact(N))
    {
        let total = F::from_bytes(x.try_into().unwrap()) + F::from_bytes(y.try_into().unwrap());
        o.copy_from_slice(&total.to_bytes());
    }
    Bytes::from(out)
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
