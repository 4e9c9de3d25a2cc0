//! `[distributed]`: data-parallel training on several devices of one machine, and across
//! machines (nodes meeting at an orchestrator).

use serde::{Deserialize, Serialize};

/// Data-parallel training: one replica of the field per device, each rendering its share of the
/// batch, the gradients and densification statistics summed with Burn's collective engine
/// (`burn::collective`) so that every replica takes the same step. Across machines, `nodes`
/// processes (one per machine, each with its `devices`) meet at an orchestrator
/// (`trainer orchestrator`) and sum over the network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DistributedConfig {
    /// Device indices of this node, one peer each (`[0, 1, 2, 3]`: four GPUs). Empty or one
    /// entry trains on one device. On the CPU backend every peer is a thread on the CPU.
    /// `batch_size` must be a multiple of the peers of all nodes.
    pub devices: Vec<usize>,
    /// How the peers of one node sum their tensors: `"tree"`, `"ring"` or `"centralized"`
    /// (across nodes: a ring).
    pub strategy: ReduceStrategyKind,
    /// Compare a hash of every replica's parameters with peer 0's every this many steps
    /// (`0`: never); a difference stops the run with `TrainError::ReplicasDiverged`. Debug and
    /// test builds check every 10 steps even when this is 0.
    pub check_every: usize,
    /// Processes (machines) training together, each with `devices` peers; `1` trains on this
    /// machine alone.
    pub nodes: usize,
    /// This process's place among the `nodes`, `0..nodes`: node `r`'s peers are the global
    /// ranks `r D ..(r + 1) D` (`D` devices per node). Node 0 writes the run's files.
    pub node_rank: usize,
    /// Seconds a node waits for the others at any collective operation (registering, a
    /// step's sums) before it stops with an error naming what it waited for: a node that died,
    /// never started or cannot be reached. Node 0's evaluations and checkpoints pause the
    /// others for as long: raise it when an evaluation takes longer.
    pub timeout_s: f64,
    /// With `nodes > 1`: the orchestrator's `host:port`, the same on every node.
    pub orchestrator: Option<String>,
    /// With `nodes > 1`: `host:port` at which the other nodes reach this one; this node listens
    /// on that port (on every interface) for their tensor transfers.
    pub node_address: Option<String>,
}

impl Default for DistributedConfig {
    fn default() -> Self {
        DistributedConfig {
            devices: Vec::new(),
            strategy: ReduceStrategyKind::Tree,
            check_every: 0,
            nodes: 1,
            node_rank: 0,
            timeout_s: 300.0,
            orchestrator: None,
            node_address: None,
        }
    }
}

impl DistributedConfig {
    /// Peers on this node: the device count, at least 1.
    pub fn local_peers(&self) -> usize {
        self.devices.len().max(1)
    }

    /// Peers of the whole run, over every node.
    pub fn peers(&self) -> usize {
        self.local_peers() * self.nodes.max(1)
    }

    /// The global rank of this node's first peer.
    pub fn first_rank(&self) -> usize {
        self.node_rank * self.local_peers()
    }

    /// Whether the run spans several processes.
    pub fn is_multi_node(&self) -> bool {
        self.nodes > 1
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.nodes == 0 {
            return Err("`distributed.nodes` must be at least 1".into());
        }
        if self.node_rank >= self.nodes {
            return Err(format!(
                "`distributed.node_rank` is {}: the ranks of {} nodes are 0..{}",
                self.node_rank, self.nodes, self.nodes
            ));
        }
        if !(self.timeout_s.is_finite() && self.timeout_s > 0.0) {
            return Err("`distributed.timeout_s` must be a positive number of seconds".into());
        }
        if !self.is_multi_node() {
            return Ok(());
        }
        for (key, value) in [
            ("orchestrator", &self.orchestrator),
            ("node_address", &self.node_address),
        ] {
            let Some(value) = value else {
                return Err(format!(
                    "`distributed.{key}` must be set when `distributed.nodes` is {}",
                    self.nodes
                ));
            };
            host_port(value).map_err(|why| format!("`distributed.{key}` = {value:?}: {why}"))?;
        }
        Ok(())
    }
}

/// The host and port of a `host:port` address (`[::1]:7000` for IPv6).
pub fn host_port(address: &str) -> Result<(&str, u16), String> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| "not `host:port`".to_string())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host.contains('/') {
        return Err("not `host:port` (no scheme, no path)".to_string());
    }
    let port: u16 = port
        .parse()
        .map_err(|_| format!("`{port}` is not a port number"))?;
    if port == 0 {
        return Err("port 0 is not a port others can reach".to_string());
    }
    Ok((host, port))
}

/// burn-collective's all-reduce algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceStrategyKind {
    /// A binary tree: summed towards the root, the result sent back down.
    Tree,
    /// A ring: each peer sums one slice, then the slices go round.
    Ring,
    /// Every peer sends to one, which sums and sends the result back.
    Centralized,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TrainConfig;
    use crate::error::TrainError;

    #[test]
    fn multi_node_keys_are_checked() {
        let two = [
            "distributed.nodes=2",
            "distributed.orchestrator=\"10.0.0.1:7070\"",
            "distributed.node_address=\"10.0.0.2:7071\"",
            "batch_size=2",
        ];
        let config = TrainConfig::default().with_overrides(&two).unwrap();
        assert_eq!(config.distributed.peers(), 2);
        assert_eq!(config.distributed.local_peers(), 1);
        let rank_one = config
            .clone()
            .with_overrides(&[
                "distributed.node_rank=1",
                "distributed.devices=[0, 1]",
                "batch_size=4",
            ])
            .unwrap();
        assert_eq!(rank_one.distributed.peers(), 4);
        assert_eq!(rank_one.distributed.first_rank(), 2);
        let refused = |overrides: &[&str], expected: &str| match TrainConfig::default()
            .with_overrides(&two)
            .unwrap()
            .with_overrides(overrides)
        {
            Err(TrainError::Config { message, .. }) => {
                assert!(message.contains(expected), "{overrides:?}: {message}")
            }
            other => panic!("{overrides:?}: expected a config error, got {other:?}"),
        };
        refused(
            &["distributed.node_rank=2"],
            "the ranks of 2 nodes are 0..2",
        );
        refused(
            &["distributed.nodes=0"],
            "`distributed.nodes` must be at least 1",
        );
        refused(&["batch_size=3"], "a multiple of the peers");
        refused(&["distributed.timeout_s=0"], "`distributed.timeout_s`");
        refused(
            &["distributed.orchestrator=\"10.0.0.1\""],
            "not `host:port`",
        );
        refused(&["distributed.node_address=\"ws://a:1\""], "no scheme");
        refused(
            &["distributed.node_address=\"a:99999\""],
            "is not a port number",
        );
        refused(&["distributed.node_address=\"a:0\""], "port 0");
        let unset = TrainConfig::default().with_overrides(&["distributed.nodes=2", "batch_size=2"]);
        match unset {
            Err(TrainError::Config { message, .. }) => {
                assert!(
                    message.contains("`distributed.orchestrator` must be set"),
                    "{message}"
                )
            }
            other => panic!("expected a config error, got {other:?}"),
        }
        assert_eq!(host_port("[::1]:7070"), Ok(("::1", 7070)));
    }
}
