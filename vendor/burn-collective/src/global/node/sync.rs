use std::{
    marker::PhantomData,
    sync::{Arc, Mutex},
    vec,
};

use burn_communication::{CommunicationChannel, Message, Protocol, ProtocolClient};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, RwLock};

use crate::{NodeId, global::shared::GlobalCollectiveError, node::base::NodeState};

/// Handles the status of sync requests from other nodes
pub(crate) struct SyncService<P: Protocol> {
    /// Current node's state, shared with the thread that does aggregations
    node_state: Arc<RwLock<Option<NodeState>>>,
    /// The number of peers that have requested to sync with us since the last successful sync.
    syncing_peers: Mutex<Vec<NodeId>>,
    /// Notification on each incoming sync request
    sync_notif: Notify,

    _p: PhantomData<P>,
}

#[derive(Debug, Serialize, Deserialize)]
struct SyncRequest(NodeId);

impl<P: Protocol> SyncService<P> {
    pub fn new(node_state: Arc<RwLock<Option<NodeState>>>) -> Self {
        Self {
            node_state,
            syncing_peers: Mutex::new(vec![]),
            sync_notif: Notify::new(),
            _p: PhantomData,
        }
    }

    fn add_syncing_peer(&self, peer: NodeId) {
        let mut syncing_peers = self.syncing_peers.lock().unwrap();
        syncing_peers.push(peer);
    }

    /// Sync with all peers.
    ///
    /// Ember patch: a peer that cannot be reached is an error (`PeerLost`), not a panic.
    pub async fn sync(&self) -> Result<(), GlobalCollectiveError> {
        // we can't sync while we register
        let node_state = self.node_state.read().await;
        let node_state = node_state
            .as_ref()
            .ok_or(GlobalCollectiveError::AllReduceBeforeRegister)?;

        // this peer is syncing
        self.add_syncing_peer(node_state.node_id);
        for (id, addr) in &node_state.nodes {
            if *id == node_state.node_id {
                continue;
            }

            let mut connection = P::Client::connect(addr.clone(), "sync")
                .await
                .ok_or(GlobalCollectiveError::PeerLost(*id))?;
            let msg = SyncRequest(node_state.node_id);
            let sync_bytes = rmp_serde::to_vec(&msg).unwrap();
            connection
                .send(Message::new(sync_bytes.into()))
                .await
                .map_err(|_| GlobalCollectiveError::PeerLost(*id))?;
        }
        loop {
            // Ember patch: created before the check, so that a request handled between the
            // check and the wait still wakes this one (`notify_waiters` stores no permit).
            let notified = self.sync_notif.notified();
            {
                // compare currently synced peers with list of all nodes
                let mut syncing_peers = self.syncing_peers.lock().unwrap();
                let mut synced = syncing_peers.to_vec();
                synced.sort();

                let mut all_node_ids = node_state.nodes.keys().cloned().collect::<Vec<_>>();
                all_node_ids.sort();

                if synced == all_node_ids {
                    // all nodes have synced
                    // Ember patch: clear the list itself, not a copy of it.
                    syncing_peers.clear();
                    return Ok(());
                }
            }
            // Wait for the next sync to come in
            notified.await
        }
    }

    pub async fn handle_sync_connection<C: CommunicationChannel>(&self, mut channel: C) {
        // Ember patch: a peer lost or speaking out of turn is logged, not a panic (its node
        // then fails the sync with the timeout or its own error).
        let msg = match channel.recv().await {
            Ok(Some(msg)) => msg,
            Ok(None) => return,
            Err(err) => {
                log::warn!("A sync request was lost: {err:?}");
                return;
            }
        };
        let Ok(msg) = rmp_serde::from_slice::<SyncRequest>(&msg.data) else {
            log::warn!("A sync request could not be read");
            return;
        };

        self.add_syncing_peer(msg.0);

        self.sync_notif.notify_waiters();
    }
}
