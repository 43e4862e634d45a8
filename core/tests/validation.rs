//! SPEC §6 bad input: every case is InvalidArgument (or Connection for unusable URLs), names the
//! argument, and touches no node. Passwords never appear in any Display or Debug output.

mod common;

use std::time::Duration;

use common::{SEC, cluster, config, ms, unique};
use ironlock::{AcquireOptions, Config, ErrorKind, LockManager};

async fn new_err(c: Config) -> ironlock::Error {
    LockManager::new(c).await.expect_err("must be rejected")
}

#[tokio::test]
async fn bad_settings_name_the_argument() {
    let c = cluster(1);
    let url = c.urls()[0].clone();
    let cases: Vec<(Config, &str)> = vec![
        (Config::new(Vec::<String>::new()), "nodes"),
        (Config::new([url.clone(), url.clone()]), "nodes[1]"),
        (Config::new(["not a url"]), "nodes[0]"),
        (Config::new([""]), "nodes[0]"),
        (
            Config::new([url.clone(), "redis://127.0.0.1:notaport".to_owned()]),
            "nodes[1]",
        ),
        (Config::new([&url]).drift_factor(0.5), "drift_factor"),
        (Config::new([&url]).drift_factor(-0.1), "drift_factor"),
        (Config::new([&url]).drift_factor(f64::NAN), "drift_factor"),
        (
            Config::new([&url]).node_timeout(Duration::ZERO),
            "node_timeout",
        ),
        (
            Config::new([&url]).connect_timeout(Duration::ZERO),
            "connect_timeout",
        ),
        (Config::new([&url]).max_ttl(Duration::ZERO), "max_ttl"),
        (Config::new([&url]).max_ttl(ms(1)), "max_ttl"),
        (Config::new([&url]).min_validity(ms(70_000)), "min_validity"),
        (
            Config::new([&url]).extension_threshold(Some(Duration::ZERO)),
            "extension_threshold",
        ),
        (Config::new([&url]).key_prefix("a\0b"), "key_prefix"),
    ];
    for (cfg, arg) in cases {
        let e = new_err(cfg).await;
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{arg}: {e}");
        assert!(e.message().starts_with(arg), "{arg}: {e}");
    }
}

#[tokio::test]
async fn unusable_urls_are_connection_errors() {
    for (url, arg) in [
        ("http://127.0.0.1:6379", "nodes[0]"),
        ("redis://no-such-host.invalid:6379", "nodes[0]"),
    ] {
        let e = new_err(Config::new([url])).await;
        assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
        assert!(e.message().starts_with(arg), "{e}");
    }
}

#[tokio::test]
async fn bad_acquire_arguments_touch_no_node() {
    let c = cluster(1);
    let m = LockManager::new(config(&c).max_ttl(10 * SEC))
        .await
        .unwrap();
    let r = unique("bad");
    let empty: [&str; 0] = [];
    let cases: Vec<(Vec<&str>, Duration, &str)> = vec![
        (empty.to_vec(), SEC, "resources"),
        (vec![""], SEC, "resources[0]"),
        (vec![&r, "x", &r], SEC, "resources[2]"),
        // `job`'s own keys: its fence counter, its semaphore, its fair queue.
        (
            vec![&r, "job:ironlock:fence"],
            SEC,
            "resources[1]: a name ending in \":ironlock:fence\"",
        ),
        (
            vec!["job:ironlock:semaphore"],
            SEC,
            "resources[0]: a name ending in",
        ),
        (
            vec!["x:ironlock:queue"],
            SEC,
            "resources[0]: a name ending in",
        ),
        (vec![&r], Duration::ZERO, "ttl"),
        (vec![&r], 11 * SEC, "ttl"),
        (vec![&r], ms(2), "ttl"),
    ];
    for (res, ttl, arg) in cases {
        let e = m
            .acquire_with(&res, ttl, AcquireOptions::try_once())
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{arg}: {e}");
        assert!(e.message().starts_with(arg), "{arg}: {e}");
        assert!(e.report().is_none(), "no node was asked: {e}");
    }
    for name in ["job:ironlock:ticket", ""] {
        let e = m.semaphore(name, 2).acquire(SEC).await.unwrap_err();
        assert!(e.message().starts_with("resource: "), "{e}");
    }
    // Only the end counts: "ironlock" elsewhere in a name is the caller's business.
    ironlock::validate_resources(&["ironlock:fence", "a:ironlock:fence:b"]).unwrap();
    assert_eq!(m.stats().rounds, 0);
    assert_eq!(c.command(0, &["DBSIZE"]).unwrap(), ":0\r\n");
    assert!(
        ironlock::resource_from_bytes(3, b"\xff\xfe")
            .unwrap_err()
            .message()
            .starts_with("resources[3]")
    );
    let lock = m.acquire(&[&r], SEC).await.unwrap();
    let e = lock.extend(11 * SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(lock.is_valid(), "a rejected extend leaves the lock alone");
    lock.release().await;
    let e = m.release_token(&[&r], "").await.unwrap_err();
    assert!(e.message().starts_with("token"));
}

#[tokio::test]
async fn passwords_never_appear_in_errors_reports_or_debug() {
    let secret = "s3cret-Pa55";
    let mut c = common::Cluster::start_with(3, &["--requirepass", secret]).unwrap();
    let urls: Vec<String> = c
        .nodes()
        .iter()
        .map(|n| format!("redis://:{secret}@127.0.0.1:{}", n.port()))
        .collect();
    let cfg = Config::new(urls.clone())
        .restart_quarantine(false)
        .retry_count(0);
    assert!(!format!("{cfg:?}").contains(secret));
    let m = LockManager::new(cfg).await.unwrap();
    assert!(!format!("{m:?}").contains(secret));
    let r = unique("pw");
    let lock = m.acquire(&[&r], SEC).await.expect("authenticated");
    let mut texts = vec![
        format!("{lock:?}"),
        format!("{}", lock.report()),
        format!("{:?}", lock.report()),
    ];
    lock.release().await;
    c.kill(0).unwrap();
    c.kill(1).unwrap();
    let e = m.acquire(&[&r], SEC).await.unwrap_err();
    texts.extend([
        format!("{e}"),
        format!("{e:?}"),
        format!("{:?}", m.node_status()),
    ]);
    // A wrong password: the error says so without showing either password.
    let wrong: Vec<String> = urls
        .iter()
        .map(|u| u.replace(secret, "wrong-Pa55"))
        .collect();
    // Two nodes are down (they may come back), one refuses the password: the manager starts,
    // and the acquire names the refusal.
    let m2 = LockManager::new(Config::new(wrong).restart_quarantine(false).retry_count(0))
        .await
        .unwrap();
    let e2 = m2.acquire(&[&r], SEC).await.unwrap_err();
    let t = format!("{e2} {:?}", m2.node_status());
    assert!(t.contains("authentication failed"), "{t}");
    assert!(!t.contains("wrong-Pa55"), "{t}");
    assert!(
        t.to_lowercase().contains("auth") || t.contains("WRONGPASS") || t.contains("password"),
        "{t}"
    );
    texts.push(t);
    for t in texts {
        assert!(!t.contains(secret), "password leaked: {t}");
    }
}

#[test]
fn messages_quote_inputs_cut_and_numbers_by_their_limit() {
    let long = "r".repeat(100_000);
    let e = ironlock::validate_resources(&[long.as_str(), long.as_str()]).unwrap_err();
    assert!(e.message().len() < 200, "{} bytes", e.message().len());
    assert!(e.message().contains("(100000 characters)"), "{e}");
    let e = ironlock::duration_from_secs_f64("ttl", 1e300).unwrap_err();
    assert!(
        e.message().len() < 120 && e.message().contains("1e300"),
        "{e}"
    );
    let e = ironlock::duration_from_millis_f64("ttl", -1e300).unwrap_err();
    assert!(e.message().len() < 120, "{e}");
    let e = Config::new(["redis://127.0.0.1:1"])
        .retry_delay(Duration::MAX)
        .check()
        .unwrap_err();
    assert_eq!(e.message(), "retry_delay: must be at most a day (86400 s)");
    let e = Config::new(["x".repeat(10_000)]).check().unwrap_err();
    assert!(
        e.message().len() < 240 && e.message().contains("(10000 characters)"),
        "{e}"
    );
    let e = Config::new(["redis://127.0.0.1:1"])
        .max_ttl(Duration::MAX)
        .check()
        .unwrap_err();
    assert!(e.message().starts_with("max_ttl: must be at most"), "{e}");
    // node-redlock's users pass durations up to Number.MAX_SAFE_INTEGER ms.
    let huge = Duration::from_millis((1 << 53) - 1);
    assert!(
        Config::new(["redis://127.0.0.1:1"])
            .max_ttl(huge)
            .check()
            .is_ok()
    );
}

#[test]
fn one_server_under_two_spellings_is_refused_naming_both() {
    // The same host and port, spelled so that the text differs: one server, one vote.
    for (a, b) in [
        ("redis://localhost:7951", "redis://127.0.0.1:7951"),
        ("redis://127.0.0.1:7951", "redis://[::1]:7951"),
        ("redis://Example.COM.:7951", "redis://example.com:7951"),
        ("redis://127.0.0.1:7951/0", "redis://127.0.0.1:7951/3"),
        ("redis://u:secret@127.0.0.1:7951", "redis://127.0.0.1:7951"),
    ] {
        let e = Config::new([a, "redis://127.0.0.1:7952", b])
            .check()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{a} {b}: {e}");
        let m = e.message();
        assert!(
            m.starts_with("nodes[2]: duplicate node") && m.contains("the same server as nodes[0]"),
            "{a} {b}: {m}"
        );
        assert!(!m.contains("secret"), "{m}");
    }
    // Different ports or hosts are different servers.
    assert!(
        Config::new(["redis://localhost:7951", "redis://localhost:7952"])
            .check()
            .is_ok()
    );
}

#[tokio::test]
async fn two_urls_that_reach_one_server_are_refused_at_connection() {
    // A TCP port and a Unix socket of one redis-server: no text rule can tell, its run_id does.
    let dir = std::env::temp_dir().join(unique("ironlock-sock"));
    std::fs::create_dir_all(&dir).expect("dir");
    let sock = dir.join("redis.sock");
    let sock_arg = sock.display().to_string();
    let a =
        ironlock_harness::Cluster::start_with(1, &["--unixsocket", &sock_arg]).expect("start node");
    let b = cluster(1);
    let tcp = a.urls()[0].clone();
    let unix = format!("unix://{}", sock.display());
    let e =
        new_err(Config::new([tcp.clone(), b.urls()[0].clone(), unix]).restart_quarantine(false))
            .await;
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let m = e.message();
    assert!(
        m.starts_with("nodes[2]: duplicate node unix://")
            && m.contains("the same server as nodes[0]")
            && m.contains(&tcp)
            && m.contains("run_id"),
        "{m}"
    );
    // Each listed once, the same servers form a manager.
    let ok = LockManager::new(Config::new([tcp, b.urls()[0].clone()]).restart_quarantine(false))
        .await
        .expect("two distinct servers");
    assert!(ok.node_status().iter().all(|n| n.same_server_as.is_none()));
    let _ = std::fs::remove_dir_all(&dir);
}
