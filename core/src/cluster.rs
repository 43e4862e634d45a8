//! What a manager and every lock it granted share: the settings, the nodes, the runtime all
//! background work runs on, the release notifier and the counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::runtime::Handle;

use crate::alarm::Alarm;
use crate::config::Config;
use crate::drain::InFlight;
use crate::error::{Error, ErrorKind, Result};
use crate::node::{Node, NodeSettings};
use crate::notify::Notifier;
use crate::quorum;
use crate::stats::Recorder;

pub(crate) struct Cluster {
    pub(crate) config: Config,
    pub(crate) nodes: Vec<Arc<Node>>,
    pub(crate) quorum: usize,
    /// The runtime the manager was created on. Every background task (reconnection, late
    /// replies, rollback of a cancelled acquire, release wake-ups, auto-extension) is spawned
    /// here, so it runs whichever thread (a binding's caller, a destructor) triggered it.
    pub(crate) rt: Handle,
    pub(crate) notifier: Arc<Notifier>,
    pub(crate) inflight: Arc<InFlight>,
    pub(crate) stats: Recorder,
    /// Extends the plain locks and writers kept alive (`keeper.rs`).
    pub(crate) keeper: crate::keeper::Keeper,
    closed: AtomicBool,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.notifier.shutdown();
    }
}

impl Cluster {
    /// Validates `config` and builds the nodes on `rt` (no connection yet).
    pub(crate) fn new(config: Config, rt: Handle) -> Result<Cluster> {
        let specs = config.validate()?;
        let quarantine = config
            .restart_quarantine
            .then(|| config.max_ttl + config.drift(config.max_ttl) + Duration::from_secs(1));
        let inflight = Arc::new(InFlight::new());
        let settings = NodeSettings {
            node_timeout: config.node_timeout,
            connect_timeout: config.connect_timeout,
            quarantine,
            replica_acks: config.replica_acks,
            inflight: inflight.clone(),
            rt: rt.clone(),
            alarm: Alarm::new(rt.clone()),
            epoch_key: crate::scripts::epoch_key(&config.key_prefix),
            master_key: crate::scripts::master_key(&config.key_prefix),
            identities: crate::topology::Identities::new(
                specs
                    .iter()
                    .map(|s| Arc::from(s.display.as_str()))
                    .collect(),
            ),
        };
        let mut nodes = Vec::with_capacity(specs.len());
        for (i, spec) in specs.into_iter().enumerate() {
            let display = spec.display.clone();
            let own = config.node_tls.get(&i);
            let node =
                Node::new(i, spec, &settings).map_err(|e| match e.strip_prefix("tls: ") {
                    Some(why) => Error::invalid(format!(
                        "{}: unusable certificate or key: {why}",
                        match own {
                            Some(_) => format!("node_tls[{i}]"),
                            None if config.tls_ca_cert.is_some()
                                && config.tls_client_cert.is_none() =>
                            {
                                "tls_ca_cert".to_owned()
                            }
                            None => "tls_ca_cert / tls_client_cert / tls_client_key".to_owned(),
                        }
                    )),
                    None => {
                        Error::new(ErrorKind::Connection, format!("nodes[{i}]: {display}: {e}"))
                    }
                })?;
            nodes.push(node);
        }
        let quorum = quorum::quorum(nodes.len());
        let notifier = Notifier::new(nodes.clone(), quorum, rt.clone());
        Ok(Cluster {
            config,
            nodes,
            quorum,
            rt,
            notifier,
            inflight,
            stats: Recorder::new(),
            keeper: crate::keeper::Keeper::default(),
            closed: AtomicBool::new(false),
        })
    }

    /// Refuses a node list in which two nodes turned out to be one server (the same `run_id`
    /// at connection), naming both.
    pub(crate) fn check_distinct(&self) -> Result<()> {
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(why) = node.same_server_text() {
                return Err(Error::invalid(format!(
                    "nodes[{i}]: duplicate node {}: {why}",
                    node.display
                )));
            }
        }
        Ok(())
    }

    /// Where `node` stands in the configured order.
    pub(crate) fn index_of(&self, node: &Arc<Node>) -> usize {
        self.nodes
            .iter()
            .position(|n| Arc::ptr_eq(n, node))
            .unwrap_or(usize::MAX)
    }

    /// The key of `resource` on every node.
    pub(crate) fn key(&self, resource: &str) -> String {
        format!("{}{resource}", self.config.key_prefix)
    }

    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.notifier.shutdown();
        for node in &self.nodes {
            node.close();
        }
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::new(
                ErrorKind::Unavailable,
                "the lock manager is closed",
            ));
        }
        Ok(())
    }
}
