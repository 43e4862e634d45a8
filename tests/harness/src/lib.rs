//! Real `redis-server` processes for tests: started on free loopback ports in temporary
//! directories without persistence (`--save '' --appendonly no`), and killed (-9), paused
//! (SIGSTOP/SIGCONT) and restarted on demand. Every process is killed when the [`Cluster`] is
//! dropped, and also when the test process dies (parent-death signal).

mod pki;
mod redis_cluster;
mod sentinel;

pub use pki::make_test_pki;
pub use redis_cluster::{
    RedisCluster, failover as cluster_failover, master_of_slot as cluster_master_of_slot,
};
pub use sentinel::{
    SentinelGroup, failover as sentinel_failover, master_port as sentinel_master_port,
};

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Spawns a server process with no standard streams that the kernel kills when the harness
/// dies (`PR_SET_PDEATHSIG`), so no redis-server or sentinel outlives a crashed test.
pub(crate) fn spawn_quiet(cmd: &mut Command) -> std::io::Result<Child> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: prctl is async-signal-safe; it only asks the kernel to kill this child when the
    // harness dies.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn()
}

/// The `redis-server` binary: `$REDIS_SERVER`, else `redis-server` from `PATH`.
pub fn redis_server() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

/// One redis-server on a fixed loopback port.
pub struct Node {
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
    paused: bool,
}

impl Node {
    fn spawn(port: u16, dir: &Path, extra: &[String]) -> std::io::Result<Child> {
        let mut cmd = Command::new(redis_server());
        cmd.args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args([
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
            "--protected-mode",
            "no",
        ])
        .arg("--dir")
        .arg(dir)
        .args(extra);
        spawn_quiet(&mut cmd)
    }

    fn start(&mut self) -> Result<(), String> {
        let mut child = Node::spawn(self.port, &self.dir, &self.extra).map_err(|e| {
            format!(
                "cannot start {}: {e} (is redis-server installed?)",
                redis_server()
            )
        })?;
        self.paused = false;
        await_own_listener(
            &mut child,
            self.port,
            "redis-server",
            Duration::from_secs(10),
        )?;
        self.child = Some(child);
        Ok(())
    }

    /// The loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// A set of independent redis-server masters.
pub struct Cluster {
    nodes: Vec<Node>,
    root: PathBuf,
}

/// A name no other test or earlier run uses (Redis keys, temp dirs): `PREFIX-pid-nanos-seq`.
pub fn unique(prefix: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// A loopback port nobody listens on now, and never one this process handed out before (tests
/// run concurrently in one process; a port is free again between this call and its server's
/// bind). Another process may still take it: servers check that they hold it
/// ([`await_own_listener`]).
pub(crate) fn free_port() -> std::io::Result<u16> {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..100 {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if !given.contains(&port) {
            given.push(port);
            return Ok(port);
        }
    }
    Err(std::io::Error::other(
        "no loopback port this process has not used yet",
    ))
}

/// True when the process `pid` holds the socket listening on 127.0.0.1:`port` (Linux: the
/// listener's inode in /proc/net/tcp among the process's descriptors). A PING answered on a
/// port proves only that *some* server listens there: a port handed out by `free_port` can be
/// taken by another test's server (or a client's connection) before ours binds it, and ours
/// then exits while the other answers — two tests would share one node.
pub(crate) fn listens(pid: u32, port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    let local = format!("0100007F:{port:04X}");
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode; 0A = LISTEN.
            (f.len() > 9 && f[1] == local && f[3] == "0A").then(|| format!("socket:[{}]", f[9]))
        })
        .collect();
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|l| inodes.iter().any(|i| l.as_os_str() == i.as_str()))
    })
}

/// Waits until the child answers PING on `port` itself; `what` names it in errors. Fails at
/// once when the child exits or another process answers on the port (the child is then
/// killed), and after `limit`.
pub(crate) fn await_own_listener(
    child: &mut Child,
    port: u16,
    what: &str,
    limit: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{what} on port {port} exited: {status}"));
        }
        if ping(port) {
            if listens(child.id(), port) {
                return Ok(());
            }
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "port {port} was taken by another process before {what} bound it"
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(format!(
        "{what} on port {port} did not answer PING within {} s",
        limit.as_secs()
    ))
}

/// True when a redis-server on `port` answers PING (with PONG, or with an error such as NOAUTH
/// when it requires a password).
pub fn ping(port: u16) -> bool {
    let Ok(mut s) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 1];
    s.read_exact(&mut buf).is_ok() && matches!(buf[0], b'+' | b'-')
}

impl Cluster {
    /// Starts `n` nodes.
    pub fn start(n: usize) -> Result<Cluster, String> {
        Cluster::start_with(n, &[])
    }

    /// Starts `n` nodes, each with extra redis-server arguments (e.g. `--requirepass x`).
    pub fn start_with(n: usize, extra: &[&str]) -> Result<Cluster, String> {
        let root = std::env::temp_dir().join(unique("ironlock-harness"));
        std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        let mut cluster = Cluster {
            nodes: Vec::with_capacity(n),
            root,
        };
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        for i in 0..n {
            let dir = cluster.root.join(format!("node{i}"));
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let mut last = String::new();
            let mut started = false;
            for _ in 0..5 {
                let port = free_port().map_err(|e| e.to_string())?;
                let mut node = Node {
                    port,
                    dir: dir.clone(),
                    extra: extra.clone(),
                    child: None,
                    paused: false,
                };
                match node.start() {
                    Ok(()) => {
                        cluster.nodes.push(node);
                        started = true;
                        break;
                    }
                    Err(e) => last = e,
                }
            }
            if !started {
                return Err(last);
            }
        }
        Ok(cluster)
    }

    /// The nodes.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// One URL per node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    fn node(&mut self, i: usize) -> Result<&mut Node, String> {
        let n = self.nodes.len();
        self.nodes
            .get_mut(i)
            .ok_or_else(|| format!("no node {i} (have {n})"))
    }

    /// SIGKILL node `i` and reap it. Its data is gone (no persistence).
    pub fn kill(&mut self, i: usize) -> Result<(), String> {
        let node = self.node(i)?;
        if let Some(mut c) = node.child.take() {
            if node.paused {
                signal(c.id(), libc::SIGCONT);
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        node.paused = false;
        Ok(())
    }

    /// Starts node `i` again on the same port (empty: no persistence).
    pub fn start_node(&mut self, i: usize) -> Result<(), String> {
        let node = self.node(i)?;
        if node.child.is_some() {
            return Err(format!("node {i} is running"));
        }
        // The port may linger briefly after a kill; retry for a while.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match node.start() {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// kill -9 then start again: the node comes back empty, with a fresh run_id and uptime 0.
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        self.kill(i)?;
        self.start_node(i)
    }

    /// SIGSTOP node `i`: it keeps its sockets but answers nothing.
    pub fn pause(&mut self, i: usize) -> Result<(), String> {
        let node = self.node(i)?;
        let pid = node
            .pid()
            .ok_or_else(|| format!("node {i} is not running"))?;
        signal(pid, libc::SIGSTOP);
        node.paused = true;
        Ok(())
    }

    /// SIGCONT node `i`.
    pub fn resume(&mut self, i: usize) -> Result<(), String> {
        let node = self.node(i)?;
        let pid = node
            .pid()
            .ok_or_else(|| format!("node {i} is not running"))?;
        signal(pid, libc::SIGCONT);
        node.paused = false;
        Ok(())
    }

    /// Starts one more node with its own extra redis-server arguments (e.g. `--replicaof
    /// 127.0.0.1 PORT`); returns its index.
    pub fn add_node(&mut self, extra: &[&str]) -> Result<usize, String> {
        let i = self.nodes.len();
        let dir = self.root.join(format!("node{i}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut last = String::new();
        for _ in 0..5 {
            let mut node = Node {
                port: free_port().map_err(|e| e.to_string())?,
                dir: dir.clone(),
                extra: extra.iter().map(|s| s.to_string()).collect(),
                child: None,
                paused: false,
            };
            match node.start() {
                Ok(()) => {
                    self.nodes.push(node);
                    return Ok(i);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Runs one command on node `i` over a fresh connection and returns the raw RESP reply.
    pub fn command(&self, i: usize, args: &[&str]) -> Result<String, String> {
        let node = self.nodes.get(i).ok_or_else(|| format!("no node {i}"))?;
        raw_command(node.port, args)
    }
}

/// Sends one command in RESP and returns the first reply line(s) as text (for test set-up).
pub fn raw_command(port: u16, args: &[&str]) -> Result<String, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 65536];
    let n = s.read(&mut buf).map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Turns a raw RESP2 reply into one JSON value (strings escaped, nil as null).
pub fn resp_to_json(raw: &str) -> String {
    fn value(lines: &mut std::str::Split<'_, &str>) -> String {
        let Some(line) = lines.next() else {
            return "null".into();
        };
        let (tag, rest) = line.split_at(line.len().min(1));
        match tag {
            "+" => json_string(rest),
            "-" => format!("{{\"error\":{}}}", json_string(rest)),
            ":" => rest.to_owned(),
            "$" if rest == "-1" => "null".into(),
            "$" => json_string(lines.next().unwrap_or("")),
            "*" if rest == "-1" => "null".into(),
            "*" => {
                let n: usize = rest.parse().unwrap_or(0);
                let items: Vec<String> = (0..n).map(|_| value(lines)).collect();
                format!("[{}]", items.join(","))
            }
            _ => json_string(line),
        }
    }
    value(&mut raw.split("\r\n"))
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub(crate) fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a pid we spawned and have not reaped.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            let _ = self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server started on a port another server already answers on fails to start instead of
    /// passing that server off as its own (two tests would share a node).
    #[test]
    fn a_port_answered_by_another_server_is_not_taken_for_ours() {
        let cluster = Cluster::start(1).unwrap();
        let taken = cluster.nodes()[0].port();
        let other = cluster.root.join("intruder");
        std::fs::create_dir_all(&other).unwrap();
        let mut node = Node {
            port: taken,
            dir: other,
            extra: Vec::new(),
            child: None,
            paused: false,
        };
        let e = node.start().unwrap_err();
        assert!(
            e.contains(&format!("port {taken}")) && node.child.is_none(),
            "{e}"
        );
        assert!(listens(cluster.nodes()[0].pid().unwrap(), taken));
        assert!(ping(taken), "the first server still answers");
    }
}
