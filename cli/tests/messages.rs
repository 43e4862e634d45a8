//! Errors explain themselves on stderr: the one-line message of a failed acquire names why the
//! nodes did not grant (restart quarantine with the time left, held by another client, per node);
//! and a blackholed node does not hold a command up for its connect timeout.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{cluster, code, finish, hold, ironlock, run, signal, stderr, unique};

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn fresh_nodes_in_restart_quarantine_are_named_with_the_time_left() {
    let cluster = cluster(3);
    // Quarantine on (the default): every fresh node is in it.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ironlock"));
    cmd.env_remove("IRONLOCK_NODES").env_remove("REDIS_URL");
    for u in cluster.urls() {
        cmd.arg("--node").arg(u);
    }
    let out = run(cmd.args(["run", "-n", &unique("q"), "--", "true"]), LIMIT);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let err = stderr(&out);
    // The first line summarizes; one line per node follows.
    let first = err.lines().next().unwrap_or_default();
    assert!(
        first.contains("3 of 3 nodes are in restart quarantine (restarted ")
            && first.contains(" s ago; counted again in ")
            && first.contains("; see --no-restart-quarantine)"),
        "{err}"
    );
    assert_eq!(err.matches("not eligible").count(), 3, "{err}");
}

#[test]
fn a_contended_acquire_names_each_node_that_refused() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let key = unique("held");
    let holder = hold(&urls, &[], &key, "exec sleep 20");
    let out = run(
        ironlock(&urls).args(["run", "-n", &key, "--", "true"]),
        LIMIT,
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(" of 3 nodes did not grant: "), "{err}");
    let named = urls
        .iter()
        .filter(|u| err.contains(&format!("held by another client ({u})")))
        .count();
    // The round ends once a quorum cannot be reached: two refusals of three.
    assert!(named >= 2, "{err}");
    signal(&holder.child, libc::SIGTERM);
    let out = finish(holder.child, LIMIT);
    assert_eq!(code(&out), 143, "{}", stderr(&out));
}

#[test]
fn a_blackholed_node_does_not_hold_start_up_for_its_connect_timeout() {
    let cluster = cluster(3);
    // Accepts connections (the kernel's backlog) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut urls = cluster.urls();
    urls.push(format!("redis://{}", silent.local_addr().unwrap()));
    urls.push("redis://127.0.0.1:1".to_owned());
    let started = Instant::now();
    let out = run(
        ironlock(&urls).args([
            "--connect-timeout",
            "10",
            "run",
            "-n",
            &unique("bh"),
            "--",
            "true",
        ]),
        LIMIT,
    );
    let took = started.elapsed();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // N = 5, quorum 3: the three real nodes answer in milliseconds.
    assert!(
        took < Duration::from_secs(5),
        "waited for the silent node's connect timeout: {took:?}"
    );
}

#[test]
fn slots_admit_at_most_k_commands() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let key = unique("slots");
    let holders: Vec<_> = (0..2)
        .map(|_| hold(&urls, &["--slots", "2"], &key, "exec sleep 20"))
        .collect();
    assert_ne!(holders[0].token, holders[1].token);
    let out = run(
        ironlock(&urls).args(["run", "-n", "--slots", "2", &key, "--", "true"]),
        LIMIT,
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("(limit 2): all 2 permits are held elsewhere"),
        "{}",
        stderr(&out)
    );
    // A lock on the same name is another key.
    let out = run(
        ironlock(&urls).args(["run", "-n", &key, "--", "true"]),
        LIMIT,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // Every holder uses one limit: --slots 3 while 2 slots of 2 are held is refused (it was
    // admitted as a third holder), and so is a wait for it.
    for wait in [&["-n"][..], &["-w", "5"][..]] {
        let started = std::time::Instant::now();
        let out = run(
            ironlock(&urls)
                .arg("run")
                .args(wait)
                .args(["--slots", "3", &key, "--", "true"]),
            LIMIT,
        );
        assert_eq!(code(&out), 64, "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!(
                "limit: the semaphore {key:?} is in use with limit 2 on 3 of 3 nodes; got 3"
            )),
            "{}",
            stderr(&out)
        );
        assert!(started.elapsed() < Duration::from_secs(4), "waited");
    }
    for h in holders {
        signal(&h.child, libc::SIGTERM);
        let out = finish(h.child, LIMIT);
        assert_eq!(code(&out), 143, "{}", stderr(&out));
    }
    // No slot held: the limit may change.
    let out = run(
        ironlock(&urls).args(["run", "-n", "--slots", "3", &key, "--", "true"]),
        LIMIT,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(
        ironlock(&urls).args(["run", "-n", "--slots", "0", &key, "--", "true"]),
        LIMIT,
    );
    assert_eq!(code(&out), 64, "{}", stderr(&out));
}

#[test]
fn a_text_argument_that_is_not_utf8_is_refused_by_its_name() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let bad = OsStr::from_bytes(b"redis://:s3cret\xff@127.0.0.1");
    let cases: [(Vec<&OsStr>, &str); 6] = [
        (
            vec!["run".as_ref(), bad, "--".as_ref(), "true".as_ref()],
            "'<RESOURCE>'",
        ),
        (vec!["status".as_ref(), bad], "'<RESOURCE>'"),
        (
            vec!["release".as_ref(), "job".as_ref(), "--token".as_ref(), bad],
            "'--token <T>'",
        ),
        (
            vec![
                "--key-prefix".as_ref(),
                bad,
                "status".as_ref(),
                "job".as_ref(),
            ],
            "'--key-prefix <PREFIX>'",
        ),
        (
            vec!["--node".as_ref(), bad, "check".as_ref()],
            "'--node <URL>'",
        ),
        (
            vec!["run".as_ref(), "job".as_ref(), "-c".as_ref(), bad],
            "'-c <SHELL COMMAND>'",
        ),
    ];
    for (args, name) in cases {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ironlock"));
        cmd.env_remove("IRONLOCK_NODES")
            .env_remove("REDIS_URL")
            .args(&args);
        let out = run(&mut cmd, LIMIT);
        let err = stderr(&out);
        assert_eq!(code(&out), 64, "{args:?}: {err}");
        assert!(
            err.contains(&format!("{name} is not valid UTF-8")),
            "{args:?}: {err}"
        );
        assert!(
            !err.contains("invalid UTF-8 was detected"),
            "{args:?}: {err}"
        );
        // The value is not echoed: a node URL holds its password.
        assert!(!err.contains("s3cret"), "{args:?}: {err}");
    }
}

#[test]
fn a_wait_for_nodes_in_quarantine_says_why_even_off_a_terminal() {
    let cluster = cluster(3);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ironlock"));
    cmd.env_remove("IRONLOCK_NODES").env_remove("REDIS_URL");
    for u in cluster.urls() {
        cmd.arg("--node").arg(u);
    }
    // No --wait: it waits until the nodes count (about 3 s with --max-ttl 2), and says why once.
    let out = run(
        cmd.args([
            "run",
            "--max-ttl",
            "2",
            "--ttl",
            "1",
            &unique("qwait"),
            "--",
            "true",
        ]),
        LIMIT,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("no quorum counts yet"))
        .collect();
    assert_eq!(said.len(), 1, "said once: {err}");
    assert!(
        said[0].contains("in restart quarantine") && said[0].contains("counted again in"),
        "{err}"
    );
}

#[test]
fn a_node_url_with_an_unusable_scheme_is_a_usage_error() {
    for url in ["http://127.0.0.1:6379", "memcached://127.0.0.1:11211"] {
        let out = run(
            ironlock(&[url.to_owned()]).args(["run", "-n", "x", "--", "true"]),
            LIMIT,
        );
        assert_eq!(code(&out), 64, "{url}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("nodes[0]: unsupported scheme"),
            "{url}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn settings_in_messages_are_spelled_as_the_command_line_spells_them() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let cases: [(&[&str], &str); 4] = [
        (&["--max-ttl", "0"], "ironlock: --max-ttl: must be positive"),
        (
            &["--node-timeout", "0"],
            "ironlock: --node-timeout: must be positive",
        ),
        (
            &["--connect-timeout", "0"],
            "ironlock: --connect-timeout: must be positive",
        ),
        (
            &["run", "--ttl", "120"],
            "ironlock: --ttl: must be at most --max-ttl (60s)",
        ),
    ];
    for (options, want) in cases {
        // Not `ironlock()`: it gives --node-timeout already.
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ironlock"));
        cmd.env_remove("IRONLOCK_NODES")
            .env_remove("REDIS_URL")
            .arg("--no-restart-quarantine");
        for u in &urls {
            cmd.arg("--node").arg(u);
        }
        cmd.args(options);
        if options[0] != "run" {
            cmd.arg("run");
        }
        let out = run(cmd.args(["-n", &unique("spell"), "--", "true"]), LIMIT);
        let err = stderr(&out);
        assert_eq!(code(&out), 64, "{options:?}: {err}");
        assert!(err.contains(want), "{options:?}: {err}");
        for word in ["max_ttl", "node_timeout", "connect_timeout"] {
            assert!(!err.contains(word), "{options:?}: {err}");
        }
    }
}

#[test]
fn a_skip_with_conflict_exit_code_0_is_silent_as_flock() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let key = unique("cron");
    let holder = hold(&urls, &[], &key, "exec sleep 20");
    // The README's cron recipe: held elsewhere, exit 0, and nothing for cron to mail.
    let out = run(
        ironlock(&urls).args(["run", "-n", "-E", "0", &key, "--", "echo", "ran"]),
        LIMIT,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    assert_eq!(common::stdout(&out), "");
    // -v still says why.
    let out = run(
        ironlock(&urls).args(["-v", "run", "-n", "-E", "0", &key, "--", "true"]),
        LIMIT,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("did not grant"), "{}", stderr(&out));
    // Any other exit code for a conflict keeps the message; so does no quorum with -E 0.
    let out = run(
        ironlock(&urls).args(["run", "-n", "-E", "3", &key, "--", "true"]),
        LIMIT,
    );
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("did not grant"), "{}", stderr(&out));
    let down = [
        "redis://127.0.0.1:1".to_owned(),
        "redis://127.0.0.1:2".to_owned(),
    ];
    let out = run(
        ironlock(&down).args(["run", "-n", "-E", "0", &key, "--", "true"]),
        LIMIT,
    );
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(!stderr(&out).is_empty());
    signal(&holder.child, libc::SIGTERM);
    let out = finish(holder.child, LIMIT);
    assert_eq!(code(&out), 143, "{}", stderr(&out));
}
