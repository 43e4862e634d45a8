//! Helpers for running the built `ironlock` binary as a user would, against real nodes.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use ironlock_harness::Cluster;

pub use ironlock_harness::unique;

/// Starts `n` nodes or fails the test with the harness's reason.
pub fn cluster(n: usize) -> Cluster {
    Cluster::start(n).unwrap_or_else(|e| panic!("cannot start {n} redis nodes: {e}"))
}

/// A fresh temporary directory for one test, removed with everything in it when dropped.
pub struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh temporary directory for one test (see [`TempDir`]).
pub fn temp_dir() -> TempDir {
    let dir = std::env::temp_dir().join(unique("ironlock-cli-test"));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    TempDir(dir)
}

/// `ironlock` with a clean environment for node selection, pointed at `urls`; fresh test nodes
/// have uptime 0, so restart quarantine is off.
pub fn ironlock(urls: &[String]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ironlock"));
    cmd.env_remove("IRONLOCK_NODES")
        .env_remove("REDIS_URL")
        .env_remove("IRONLOCK_FENCE")
        .stdin(Stdio::null());
    for u in urls {
        cmd.arg("--node").arg(u);
    }
    // The default 50 ms per-node timeout is for production rounds; on a loaded CI machine a
    // release could time out on a node and leave its key until the ttl, which the tests check.
    cmd.args(["--no-restart-quarantine", "--node-timeout", "0.5"]);
    cmd
}

/// Runs to completion (bounded: the test fails after `limit`).
pub fn run(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ironlock");
    finish(child, limit)
}

/// Waits for a spawned child with piped output, killing it and failing after `limit`.
pub fn finish(mut child: Child, limit: Duration) -> Output {
    wait_status(&mut child, limit);
    child.wait_with_output().expect("collect output")
}

/// Polls until the child exits; kills it and fails the test after `limit`.
pub fn wait_status(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ironlock did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls until `path` exists with content that satisfies `ready`; fails after `limit`.
pub fn wait_for_file(path: &Path, limit: Duration, ready: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if ready(&text) {
                return text;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} not ready within {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The exit code, failing the test when the process died of a signal instead.
pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or_else(|| {
        panic!(
            "ironlock died of a signal: {:?}; stderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The value stored under `key` on node `i`: `None` when the key does not exist.
pub fn get(cluster: &Cluster, i: usize, key: &str) -> Option<String> {
    let raw = cluster.command(i, &["GET", key]).expect("GET");
    if raw.starts_with("$-1") {
        return None;
    }
    raw.split("\r\n").nth(1).map(str::to_owned)
}

/// Sends `sig` to a child process.
pub fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child, which has not been reaped yet.
    let rc = unsafe { libc::kill(child.id() as i32, sig) };
    assert_eq!(rc, 0, "kill({}, {sig})", child.id());
}

/// One JSON object per non-empty line.
pub fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Starts a command with piped stdout and stderr.
pub fn spawn(cmd: &mut Command) -> Child {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ironlock")
}

/// A running `ironlock run` that holds `key`: its process and the lock's token.
pub struct Holder {
    pub child: Child,
    pub token: String,
}

/// Starts `ironlock run [options] key -c '…; then'` and waits until its command runs (the lock
/// is held and ironlock's signal handlers are installed). `then` is what the command does while
/// holding: `exec sleep 20` to hold until signalled, `sleep 2` to hold for a while.
pub fn hold(urls: &[String], options: &[&str], key: &str, then: &str) -> Holder {
    let dir = temp_dir();
    let ready = dir.join("token");
    let child = spawn(
        ironlock(urls)
            .arg("run")
            .args(options)
            .args([key, "-c"])
            .arg(format!(
                "echo $IRONLOCK_TOKEN > {}; {then}",
                ready.display()
            )),
    );
    let token = wait_for_file(&ready, Duration::from_secs(30), |t| t.ends_with('\n'))
        .trim()
        .to_owned();
    Holder { child, token }
}
