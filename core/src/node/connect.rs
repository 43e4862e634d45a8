//! Connecting a node: standalone, Sentinel-managed and Redis Cluster voters, the background
//! reconnect loop, and what every (re)connection reads — the node's age and master (restart and
//! failover quarantine), its identity (one server, one vote) and its data epoch (re-seating).

use super::*;

impl Node {
    /// Connects once (used at manager start); on failure a background reconnect loop takes over.
    /// True when connected.
    pub(crate) async fn connect_or_schedule(self: &Arc<Self>) -> bool {
        // Counts as the reconnect loop while it runs: a request meanwhile starts no other.
        self.reconnecting.store(true, Ordering::Release);
        self.watch_sentinels();
        let attempt = self.try_connect().await;
        self.reconnecting.store(false, Ordering::Release);
        match attempt {
            Ok(()) => true,
            Err(e) => {
                self.note_error(e);
                self.schedule_reconnect();
                false
            }
        }
    }

    /// True when the last connection attempt failed because the host name did not resolve.
    pub(crate) fn unresolvable(&self) -> bool {
        self.unresolvable.load(Ordering::Acquire)
    }

    /// True when the last connection attempt was refused the user name or password: retrying
    /// will not help until someone fixes them.
    pub(crate) fn auth_refused(&self) -> bool {
        self.auth_refused.load(Ordering::Acquire)
    }

    /// A failed connection attempt as the report says it: the server's refusal of the
    /// credentials in plain words (and remembered), a TLS hint where one fits.
    fn connect_error(&self, e: &redis::RedisError) -> String {
        let refused = e.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"));
        self.auth_refused.store(refused, Ordering::Release);
        if refused {
            return format!(
                "authentication failed: the server refused the user name or password (WRONGPASS; {})",
                self.scrub(&e.to_string())
            );
        }
        let tls = self.display.starts_with("rediss");
        with_tls_hint(self.scrub(&e.to_string()), tls)
    }

    /// Restart detection without `INFO`: the age of the node's data from the epoch key (see
    /// [`crate::scripts::EPOCH_SOURCE`]) stands in for its uptime.
    async fn data_age(&self, conn: &mut MultiplexedConnection) -> Result<ServerInfo, String> {
        let (age, born): (i64, i64) = tokio::time::timeout(
            self.connect_timeout,
            redis::cmd("EVAL")
                .arg(crate::scripts::EPOCH_SOURCE)
                .arg(1)
                .arg(&self.epoch_key)
                .query_async(conn),
        )
        .await
        .map_err(|_| "data age (INFO not permitted): no reply within connect_timeout".to_owned())?
        .map_err(|e| {
            format!(
                "INFO is not permitted and the data age key {:?} cannot be used: {}",
                self.epoch_key,
                self.scrub(&e.to_string())
            )
        })?;
        Ok(ServerInfo {
            run_id: format!("epoch:{born}"),
            version: String::new(),
            uptime: Duration::from_secs(age.max(0) as u64),
            ..ServerInfo::default()
        })
    }

    /// How long this promoted master has reigned, from the record on the node (see
    /// [`crate::scripts::MASTER_SOURCE`]).
    async fn reign(
        &self,
        conn: &mut MultiplexedConnection,
        replid: &str,
    ) -> Result<Duration, String> {
        let age: i64 = tokio::time::timeout(
            self.connect_timeout,
            redis::cmd("EVAL")
                .arg(crate::scripts::MASTER_SOURCE)
                .arg(1)
                .arg(&self.master_key)
                .arg(replid)
                .query_async(conn),
        )
        .await
        .map_err(|_| "dating the master's reign: no reply within connect_timeout".to_owned())?
        .map_err(|e| {
            format!(
                "this master was promoted from a replica and the key {:?} that dates its reign cannot be used: {}",
                self.master_key,
                self.scrub(&e.to_string())
            )
        })?;
        Ok(Duration::from_secs(age.max(0) as u64))
    }

    /// Resolves a TCP node's host name first, so that a name that does not resolve is reported
    /// as such ("cannot resolve host …"), not as whatever the connect attempt says.
    async fn resolve(&self) -> Result<(), String> {
        let client = self.client();
        let (host, port) = match client.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(h, p) => (h.clone(), *p),
            redis::ConnectionAddr::TcpTls { host, port, .. } => match &self.pinned {
                Some(p) => (p.host.clone(), *port),
                None => (host.clone(), *port),
            },
            _ => return Ok(()),
        };
        let lookup = tokio::time::timeout(
            self.connect_timeout,
            tokio::net::lookup_host((host.as_str(), port)),
        )
        .await;
        let failed = matches!(lookup, Ok(Err(_)));
        self.unresolvable.store(failed, Ordering::Release);
        match lookup {
            Ok(Err(e)) => Err(format!(
                "cannot resolve host {:?}: {e}",
                crate::config::cut(&host)
            )),
            Err(_) => Err(format!(
                "cannot resolve host {:?}: no answer within connect_timeout",
                crate::config::cut(&host)
            )),
            Ok(Ok(_)) => Ok(()),
        }
    }

    /// The data node's client (cheap to clone).
    pub(super) fn client(&self) -> redis::Client {
        self.client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Points a Sentinel voter's client at the master its sentinels name now; returns when the
    /// sentinels were asked (the start of the master's lease), `None` for other voters.
    async fn find_master(&self) -> Result<Option<Instant>, String> {
        let Some((spec, template, tls)) = &self.sentinel else {
            return Ok(None);
        };
        let asked = Instant::now();
        let (client, master) =
            topology::find_master(spec, template, tls, self.connect_timeout, |e| {
                self.hide_sentinel_secrets(e)
            })
            .await?;
        *self.client.lock().unwrap_or_else(|p| p.into_inner()) = client;
        self.state.lock().unwrap_or_else(|p| p.into_inner()).master = Some(master);
        Ok(Some(asked))
    }

    /// A sentinel's error with the data nodes' and the sentinels' own passwords hidden.
    pub(super) fn hide_sentinel_secrets(&self, e: &str) -> String {
        let secret = self
            .sentinel
            .as_ref()
            .and_then(|(spec, _, _)| spec.sentinels.first())
            .and_then(|s| s.redis_settings().password());
        scrub(&self.scrub(e), secret)
    }

    /// Connects a cluster voter: the cluster connection, then every shard's master checked.
    async fn connect_cluster(&self, cv: &ClusterVoter) -> Result<(), String> {
        let client =
            shards::cluster_client(&cv.spec.seeds, &cv.template, &cv.tls, self.connect_timeout)?;
        let mut conn = tokio::time::timeout(self.connect_timeout, client.get_async_connection())
            .await
            .map_err(|_| "no cluster connection within connect_timeout".to_owned())?
            .map_err(|e| self.scrub(&e.to_string()))?;
        let read = shards::read(&mut conn, &self.check(cv))
            .await
            .map_err(|e| self.scrub(&e))?;
        self.install_shards(cv, read.list);
        let received = Instant::now();
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.closed {
            return Ok(());
        }
        st.conn = Some(Conn::Cluster(conn));
        st.generation += 1;
        st.eligible_at = received;
        st.quarantine = Quarantine::Restart;
        st.connected_at = Some(received);
        st.info = Some(ServerInfo {
            version: read.version,
            ..ServerInfo::default()
        });
        st.last_error = None;
        Ok(())
    }

    fn check<'a>(&self, cv: &'a ClusterVoter) -> shards::Check<'a> {
        shards::Check {
            template: &cv.template,
            tls: &cv.tls,
            connect_timeout: self.connect_timeout,
            quarantine: self.quarantine,
            key_prefix: &cv.key_prefix,
        }
    }

    /// Takes a fresh reading of the shards; a change of any shard's master is a change of the
    /// voter's data (re-seat writes keys back there).
    fn install_shards(&self, cv: &ClusterVoter, list: Vec<Shard>) {
        let signature: String = list
            .iter()
            .map(|s| format!("{}-{}={}/{};", s.start, s.end, s.addr, s.replid))
            .collect();
        let mut old = cv.signature.lock().unwrap_or_else(|p| p.into_inner());
        if *old != signature {
            self.data_epoch.fetch_add(1, Ordering::AcqRel);
            *old = signature;
        }
        drop(old);
        *cv.shards.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(list);
    }

    /// Reads a cluster voter's shards again in the background (a vote found a shard served by
    /// a master other than the one checked), unless a reading is under way.
    pub(super) fn refresh_shards(self: &Arc<Self>) {
        let Some(cv) = &self.cluster else { return };
        if cv.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(self);
        self.rt.spawn(async move {
            let Some(node) = weak.upgrade() else { return };
            let Some(cv) = &node.cluster else { return };
            if let Some((Conn::Cluster(mut conn), _)) = node.current() {
                match shards::read(&mut conn, &node.check(cv)).await {
                    Ok(read) => node.install_shards(cv, read.list),
                    Err(e) => node.note_error(node.scrub(&e)),
                }
            }
            cv.refreshing.store(false, Ordering::Release);
        });
    }

    async fn try_connect(&self) -> Result<(), String> {
        if let Some(cv) = &self.cluster {
            self.resolve().await?;
            return self.connect_cluster(cv).await;
        }
        let asked = self.find_master().await?;
        self.resolve().await?;
        let mut config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None)
            .set_pipeline_buffer_size(4096);
        if let Some(p) = &self.pinned {
            config = config.set_dns_resolver(p.clone());
        }
        let mut conn = self
            .client()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| self.connect_error(&e))?;
        // Read uptime after connecting: a node that restarted lost its keys and must stay out of
        // the quorum until every lock it might have held has expired (seeds: delayed restarts).
        let mut ask = redis::pipe();
        ask.cmd("INFO").arg("server").cmd("INFO").arg("replication");
        let reply: redis::RedisResult<(String, String)> =
            tokio::time::timeout(self.connect_timeout, ask.query_async(&mut conn))
                .await
                .map_err(|_| "INFO server: no reply within connect_timeout".to_owned())?;
        let info = match reply {
            Ok((server, replication)) => parse_info(&format!("{server}\r\n{replication}")),
            // INFO is @dangerous: a least-privilege ACL user dates the node's data instead.
            Err(e) if e.code() == Some("NOPERM") => match self.quarantine {
                Some(_) => self.data_age(&mut conn).await?,
                None => ServerInfo::default(),
            },
            Err(e) => return Err(self.scrub(&e.to_string())),
        };
        if info.cluster_node {
            // Its keys would be spread over shards this connection cannot reach (MOVED for
            // most names), and its other nodes listed as more voters would vote twice.
            return Err(format!(
                "is a node of a Redis Cluster (redis_mode:cluster), which serves only its own hash slots: give the whole cluster as one voter, redis-cluster://{}",
                self.display
                    .split_once("://")
                    .map_or(&*self.display, |(_, rest)| rest)
            ));
        }
        if info.role == "slave" {
            // A voter writes its keys on a master; a replica refuses them (READONLY).
            return Err(format!(
                "is a replica (of {}), not a master: a voter must be a master (after a failover, name the new master, or let Sentinel find it with a redis-sentinel:// URL)",
                crate::config::cut(&info.master_of_replica)
            ));
        }
        // A master promoted from a replica may lack keys its old master granted and had not
        // replicated: its reign is dated on the node itself, so that a client that never saw
        // the old master keeps it out as long as one that did.
        // With replica acknowledgement every granted key reached the replicas before it
        // counted, so the promoted one has them all: no failover quarantine.
        let reign = match (self.quarantine, info.promoted) {
            (Some(_), true) if self.replica_acks == 0 => {
                Some(self.reign(&mut conn, &info.replid).await?)
            }
            _ => None,
        };
        let received = Instant::now();
        let mut load = redis::pipe();
        for source in crate::scripts::ALL_SOURCES {
            load.cmd("SCRIPT").arg("LOAD").arg(source);
        }
        tokio::time::timeout(
            self.connect_timeout,
            load.query_async::<Vec<String>>(&mut conn),
        )
        .await
        .map_err(|_| "SCRIPT LOAD: no reply within connect_timeout".to_owned())?
        .map_err(|e| self.scrub(&e.to_string()))?;
        // uptime_in_seconds is floored: the true uptime may be up to 1 s more, so the +1 s in the
        // quarantine makes this conservative.
        // A Sentinel voter's old master may still answer as a master after the failover, its
        // votes counting until its lease lapses (`SENTINEL_LEASE`): the new one waits that much
        // longer.
        let lease = if self.sentinel.is_some() {
            topology::SENTINEL_LEASE
        } else {
            Duration::ZERO
        };
        let (eligible_at, why) = match self.quarantine {
            Some(q) => {
                let restart = received + q.saturating_sub(info.uptime);
                let failover = |age: Duration| received + (q + lease).saturating_sub(age);
                match reign {
                    Some(age) if failover(age) > restart => {
                        (failover(age), Quarantine::Failover(age))
                    }
                    _ => (restart, Quarantine::Restart),
                }
            }
            None => (received, Quarantine::Restart),
        };
        let major: Option<u32> = info.version.split('.').next().and_then(|m| m.parse().ok());
        self.set_nx_get
            .store(major.is_some_and(|m| m >= 7), Ordering::Relaxed);
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.closed {
            // The manager closed while this connection was being made: drop it.
            return Ok(());
        }
        let same_data = st
            .info
            .as_ref()
            .is_some_and(|old| old.run_id == info.run_id || info.run_id.is_empty());
        if !same_data {
            self.data_epoch.fetch_add(1, Ordering::AcqRel);
        }
        if eligible_at > received {
            self.counters.quarantines.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("ironlock_quarantines_total").increment(1);
        }
        st.conn = Some(Conn::Single(conn));
        st.generation += 1;
        st.confirmed_at = asked;
        st.unconfirmed = None;
        st.eligible_at = eligible_at;
        st.quarantine = why;
        st.connected_at = Some(received);
        // A data epoch (no INFO) dates the data to the second and two servers may share it:
        // only a real run_id says that two URLs are one server.
        let id = if info.run_id.starts_with("epoch:") {
            ""
        } else {
            info.run_id.as_str()
        };
        self.identities.record(self.index, id);
        st.info = Some(info);
        st.last_error = None;
        drop(st);
        tracing::debug!(node = %self.display, quarantined_for = ?eligible_at.saturating_duration_since(received), "connected");
        Ok(())
    }

    fn note_error(&self, e: String) {
        tracing::warn!(node = %self.display, error = %e, "node connection failed");
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_error = Some(e);
    }

    /// Closes the connection for good (the manager closed): the socket is released now, not
    /// when the last handle of the manager goes away, and no reconnection is made. Requests
    /// still in flight finish on their own handle of the connection.
    pub(crate) fn close(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.closed = true;
        st.conn = None;
        st.connected_at = None;
        st.last_error = Some("the lock manager is closed".to_owned());
    }

    pub(super) fn is_closed(&self) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).closed
    }

    /// Starts the background reconnect loop on the manager's runtime unless one runs already.
    pub(super) fn schedule_reconnect(self: &Arc<Self>) {
        if self.is_closed() {
            return;
        }
        if self.reconnecting.swap(true, Ordering::AcqRel) {
            return;
        }
        self.watch_sentinels();
        let weak: Weak<Node> = Arc::downgrade(self);
        self.rt.spawn(async move {
            let mut backoff = Duration::from_millis(20);
            loop {
                tokio::time::sleep(backoff).await;
                let Some(node) = weak.upgrade() else { return };
                if node.is_closed() {
                    return;
                }
                match node.try_connect().await {
                    Ok(()) => {
                        node.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                        node.reconnecting.store(false, Ordering::Release);
                        return;
                    }
                    Err(e) => node.note_error(e),
                }
                // Capped well below the shortest useful ttl: a held lock re-seats on a restarted
                // node only once it is connected again (SPEC §12), and a rolling restart gives
                // each node one short window.
                backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
            }
        });
    }
}
