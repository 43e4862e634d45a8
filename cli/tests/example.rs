//! Runs `cli/examples/quickstart.sh` (the README's quick start) against three fresh nodes.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

#[test]
fn quickstart_script_runs() {
    let cluster = cluster(3);
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_ironlock"))
        .parent()
        .expect("binary directory");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart.sh");
    let out = run(
        Command::new("sh")
            .arg(&script)
            .env("PATH", path)
            .env("IRONLOCK_NODES", cluster.urls().join(","))
            .env("IRONLOCK_QUARANTINE", "off")
            .env_remove("REDIS_URL"),
        Duration::from_secs(60),
    );
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "stdout: {text}\nstderr: {}", stderr(&out));
    assert!(
        text.contains("3 of 3 nodes eligible, quorum 2: OK"),
        "{text}"
    );
    assert!(
        text.contains("holding backup:nightly with token "),
        "{text}"
    );
    assert!(text.contains("fencing token 1"), "{text}");
    assert!(text.contains("busy: exit code 3"), "{text}");
    assert!(!text.contains("never printed"), "{text}");
    // "free" (or, on a loaded machine where a release timed out on one node, a minority key
    // that expires with its ttl): nobody holds it.
    assert!(text.contains("\"backup:nightly\": "), "{text}");
    assert!(!text.contains("held by"), "{text}");
}
