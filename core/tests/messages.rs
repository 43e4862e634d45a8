//! Errors explain themselves: the one-line message summarizes why each node that did not grant
//! did not (the same text reaches Python's str(e), Node's err.message, C's last error, the CLI).

mod common;

use common::{SEC, cluster, config, manager, ms, unique};
use ironlock::{Config, ErrorKind, LockManager};

#[tokio::test]
async fn fresh_nodes_in_restart_quarantine_are_named_with_the_time_left() {
    let c = cluster(3);
    let m = LockManager::new(Config::new(c.urls()).retry_count(0))
        .await
        .unwrap();
    let e = m.acquire(&[unique("q")], SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    let text = e.message();
    // The nodes' uptime is whole seconds: 0 s, or 1 s on a busy machine; the quarantine is
    // max_ttl (60 s) + drift + 1 s.
    let (ago, left) =
        quarantine_numbers(text).unwrap_or_else(|| panic!("no quarantine text in: {text}"));
    assert!(
        text.contains("3 of 3 nodes are in restart quarantine (restarted "),
        "{text}"
    );
    assert!(ago <= 2, "{text}");
    assert!((59..=62).contains(&left), "{text}");
    assert!(text.contains("see restart_quarantine"), "{text}");
}

/// The two numbers of "(restarted A s ago; counted again in L s".
fn quarantine_numbers(text: &str) -> Option<(u64, u64)> {
    let rest = text.split("(restarted ").nth(1)?;
    let (ago, rest) = rest.split_once(" s ago; counted again in ")?;
    let (left, _) = rest.split_once(" s")?;
    Some((ago.parse().ok()?, left.parse().ok()?))
}

#[tokio::test]
async fn refusals_and_dead_nodes_are_named_per_node() {
    let mut c = cluster(3);
    let holder = manager(&c).await;
    let r = unique("held");
    let lock = holder.acquire(&[&r], 10 * SEC).await.unwrap();
    c.kill(2).unwrap();
    let m = LockManager::new(config(&c).retry_count(0)).await.unwrap();
    let e = m.acquire(&[&r], SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended);
    let text = e.message();
    let urls = c.urls();
    assert!(text.contains("nodes did not grant: "), "{text}");
    // The round is decided by the first refusal: the other live node may still be pending.
    assert!(
        (0..2).any(|i| text.contains(&format!("held by another client ({})", urls[i]))),
        "{text}"
    );
    assert!(text.contains(&format!("({})", urls[2])), "{text}");
    assert!(text.to_lowercase().contains("refused"), "{text}");
    // Granted, refused, failed and not yet answered: every node is counted once.
    common::assert_counts_add_up(text, 3);
    lock.release().await;
}

/// A manager over one URL with quick failures.
async fn failing_acquire(url: String) -> ironlock::Error {
    let m = LockManager::new(
        Config::new([url])
            .restart_quarantine(false)
            .retry_count(0)
            .connect_timeout(ms(500)),
    )
    .await
    .unwrap();
    m.acquire(&[unique("m")], SEC).await.unwrap_err()
}

fn port_of(url: &str) -> &str {
    url.rsplit(':').next().unwrap()
}

#[tokio::test]
async fn tls_against_a_plain_server_says_so() {
    let c = cluster(1);
    let e = failing_acquire(format!("rediss://127.0.0.1:{}", port_of(&c.urls()[0]))).await;
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(
        e.message()
            .contains("does the server speak TLS on this port (its --tls-port)?"),
        "{e}"
    );
}

#[tokio::test]
async fn a_refused_password_is_named_and_never_shown() {
    // Refused by the only node: no quorum can ever form, so the manager is refused at once.
    let c = cluster(1);
    let e = LockManager::new(
        Config::new([format!(
            "redis://:s3cretpw@127.0.0.1:{}",
            port_of(&c.urls()[0])
        )])
        .restart_quarantine(false)
        .connect_timeout(ms(500)),
    )
    .await
    .expect_err("credentials refused by the only node");
    assert_eq!(e.kind(), ErrorKind::Connection);
    let text = e.message();
    assert!(
        text.contains("authentication failed: the server refused the user name or password")
            && text.contains("nodes[0] redis://:***@127.0.0.1:"),
        "{text}"
    );
    assert!(!e.to_string().contains("s3cretpw"), "{e}");
}

#[tokio::test]
async fn plain_against_a_tls_port_says_so() {
    let dir = std::env::temp_dir().join(unique("ironlock-msg-tls").replace(':', "-"));
    ironlock_harness::make_test_pki(&dir);
    let path = |f: &str| dir.join(f).to_str().unwrap().to_owned();
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let (cert, key, ca) = (path("server.pem"), path("server.key"), path("ca.pem"));
    let args = [
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
    ];
    let _c = ironlock_harness::Cluster::start_with(1, &args).unwrap();
    let e = failing_acquire(format!("redis://127.0.0.1:{tls_port}")).await;
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(
        e.message()
            .contains("does this port want TLS (a rediss:// URL)?"),
        "{e}"
    );
}
