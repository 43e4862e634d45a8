//! TLS against a real redis-server (generated CA and certificates, verification on by default,
//! a wrong CA rejected) and an ACL user with a password (wrong password: a clear error that
//! shows no password).

mod common;

use common::{SEC, unique};
use ironlock::{Config, ErrorKind, LockManager, Vote};
use ironlock_harness::Cluster;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn tls_verifies_the_server_and_rejects_a_wrong_ca() {
    let dir = std::env::temp_dir().join(unique("ironlock-pki").replace(':', "-"));
    ironlock_harness::make_test_pki(&dir);
    let (cert, key, ca) = (
        dir.join("server.pem"),
        dir.join("server.key"),
        dir.join("ca.pem"),
    );
    let mut clusters = Vec::new();
    let mut urls = Vec::new();
    for _ in 0..3 {
        let tls_port = free_port().to_string();
        let c = Cluster::start_with(
            1,
            &[
                "--tls-port",
                &tls_port,
                "--tls-cert-file",
                cert.to_str().unwrap(),
                "--tls-key-file",
                key.to_str().unwrap(),
                "--tls-ca-cert-file",
                ca.to_str().unwrap(),
                "--tls-auth-clients",
                "no",
            ],
        )
        .unwrap();
        urls.push(format!("rediss://127.0.0.1:{tls_port}"));
        clusters.push(c);
    }
    let base = || {
        Config::new(urls.clone())
            .restart_quarantine(false)
            .retry_count(0)
            .connect_timeout(2 * SEC)
            .node_timeout(SEC / 2)
    };
    // The right CA: granted over TLS.
    let m = LockManager::new(base().tls_ca_cert(Some(std::fs::read(&ca).unwrap())))
        .await
        .unwrap();
    let r = unique("tls");
    let lock = m.acquire(&[&r], 5 * SEC).await.expect("granted over TLS");
    assert!(lock.release().await.held);
    // The wrong CA: every node fails verification, nothing is granted.
    let wrong = LockManager::new(
        base().tls_ca_cert(Some(std::fs::read(dir.join("other-ca.pem")).unwrap())),
    )
    .await
    .unwrap();
    let e = wrong.acquire(&[&r], 5 * SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert_eq!(e.report().unwrap().count(Vote::Error), 3, "{e}");
    let why = format!("{:?}", wrong.node_status()[0].last_error);
    assert!(
        why.to_lowercase().contains("certificate") || why.contains("UnknownIssuer"),
        "{why}"
    );
    // No CA given: the system trust store does not know the test CA, so verification fails too.
    let system = LockManager::new(base()).await.unwrap();
    assert_eq!(
        system.acquire(&[&r], 5 * SEC).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    // Garbage instead of a PEM certificate is a bad argument.
    let bad = LockManager::new(base().tls_ca_cert(Some(b"not a certificate".to_vec()))).await;
    if let Err(e) = bad {
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.message().starts_with("tls_ca_cert"), "{e}");
    } else {
        let m = bad.unwrap();
        assert_eq!(
            m.acquire(&[&r], 5 * SEC).await.unwrap_err().kind(),
            ErrorKind::Unavailable
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn acl_user_with_password() {
    let c = Cluster::start_with(
        3,
        &[
            "--user",
            "default",
            "off",
            "--user",
            "alice",
            "on",
            ">alice-Pa55",
            "~*",
            "&*",
            "+@all",
        ],
    )
    .unwrap();
    let url = |pw: &str, port: u16| format!("redis://alice:{pw}@127.0.0.1:{port}");
    let ports: Vec<u16> = c.nodes().iter().map(|n| n.port()).collect();
    let good = Config::new(ports.iter().map(|p| url("alice-Pa55", *p)))
        .restart_quarantine(false)
        .retry_count(0);
    let m = LockManager::new(good).await.unwrap();
    let r = unique("acl");
    let lock = m.acquire(&[&r], 5 * SEC).await.expect("alice may lock");
    assert!(lock.release().await.held);

    let bad = Config::new(ports.iter().map(|p| url("not-her-Pa55", *p)))
        .restart_quarantine(false)
        .retry_count(0);
    // Refused by every node: the manager cannot be used at all, and says why at once.
    let started = std::time::Instant::now();
    let e = LockManager::new(bad)
        .await
        .expect_err("credentials refused by a quorum: refused at start");
    assert!(started.elapsed() < 2 * SEC, "{:?}", started.elapsed());
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    let text = format!("{e} {e:?}");
    assert!(
        text.contains("authentication failed: the server refused the user name or password")
            && text.contains("WRONGPASS"),
        "{text}"
    );
    for secret in ["not-her-Pa55", "alice-Pa55"] {
        assert!(!text.contains(secret), "password shown: {text}");
    }
}

/// The minimal ACL line of the README: a user limited to the key prefix and its channels, with
/// `+@all -@dangerous` (no INFO, no CONFIG, no KEYS…).
const LEAST_PRIVILEGE: [&str; 8] = [
    "--user",
    "app",
    "on",
    ">app-Pa55",
    "~lk:*",
    "&lk:*",
    "+@all",
    "-@dangerous",
];

fn least_privilege_cluster(n: usize) -> Cluster {
    // The default user stays for the test harness's own commands.
    let mut args = vec!["--user", "default", "on", "nopass", "~*", "&*", "+@all"];
    args.extend(LEAST_PRIVILEGE);
    Cluster::start_with(n, &args).unwrap()
}

fn app_urls(c: &Cluster) -> Vec<String> {
    c.nodes()
        .iter()
        .map(|n| format!("redis://app:app-Pa55@127.0.0.1:{}", n.port()))
        .collect()
}

#[tokio::test]
async fn a_least_privilege_acl_user_locks_extends_fences_and_is_woken() {
    let c = least_privilege_cluster(3);
    let config = Config::new(app_urls(&c))
        .key_prefix("lk:")
        .restart_quarantine(false)
        .retry_delay(10 * SEC);
    let m = LockManager::new(config).await.unwrap();
    let r = unique("least");
    let lock = m
        .acquire_with(
            &[&r],
            5 * SEC,
            ironlock::AcquireOptions::default().fencing(true),
        )
        .await
        .expect("the restricted user may lock");
    assert!(lock.fence().is_some());
    lock.extend(5 * SEC).await.expect("and extend");
    assert!(
        m.inspect(&r)
            .await
            .unwrap()
            .iter()
            .all(|h| h.token.as_deref() == Some(lock.token()))
    );
    // A waiter with a 10 s retry delay is woken by the release (PUBLISH/SUBSCRIBE on lk:*).
    let waiter = {
        let m = m.clone();
        let r = r.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let l = m
                .acquire_with(&[&r], 5 * SEC, ironlock::AcquireOptions::wait(8 * SEC))
                .await
                .unwrap();
            let waited = started.elapsed();
            l.release().await;
            waited
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(lock.release().await.held);
    let waited = waiter.await.unwrap();
    assert!(
        waited < 5 * SEC,
        "not woken by the release: waited {waited:?}"
    );
}

#[tokio::test]
async fn without_info_a_node_that_lost_its_data_is_quarantined() {
    let mut c = least_privilege_cluster(1);
    // A short max_ttl keeps the quarantine short: 2 s + drift + 1 s.
    let urls = app_urls(&c);
    let config = || {
        Config::new(urls.clone())
            .key_prefix("lk:")
            .max_ttl(2 * SEC)
            .retry_count(0)
    };
    let m = LockManager::new(config()).await.unwrap();
    let e = m.acquire(&[unique("q")], SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(e.message().contains("restart quarantine"), "{e}");
    // The data is dated by the first client; another client connecting later counts its age.
    tokio::time::sleep(std::time::Duration::from_millis(3500)).await;
    let later = LockManager::new(config()).await.unwrap();
    let lock = later
        .acquire_with(&[unique("q")], SEC, ironlock::AcquireOptions::wait(2 * SEC))
        .await
        .expect("eligible once the data is older than the quarantine");
    lock.release().await;
    // A restart without persistence loses the date: quarantined again, for every client.
    drop((m, later));
    c.restart(0).unwrap();
    let fresh = LockManager::new(config()).await.unwrap();
    let e = fresh.acquire(&[unique("q")], SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.message().contains("restart quarantine"), "{e}");
}

#[tokio::test]
async fn mutual_tls_as_the_least_privilege_user_with_fencing() {
    let dir = std::env::temp_dir().join(unique("ironlock-mtls").replace(':', "-"));
    ironlock_harness::make_test_pki(&dir);
    let path = |f: &str| dir.join(f).to_str().unwrap().to_owned();
    let tls_port = free_port().to_string();
    let mut args = vec![
        "--tls-port".to_owned(),
        tls_port.clone(),
        "--tls-cert-file".to_owned(),
        path("server.pem"),
        "--tls-key-file".to_owned(),
        path("server.key"),
        "--tls-ca-cert-file".to_owned(),
        path("ca.pem"),
        // Redis's own default, spelled out: a client certificate is required.
        "--tls-auth-clients".to_owned(),
        "yes".to_owned(),
    ];
    args.extend(["--user", "default", "on", "nopass", "~*", "&*", "+@all"].map(String::from));
    args.extend(LEAST_PRIVILEGE.map(String::from));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let _c = Cluster::start_with(1, &refs).unwrap();
    let url = format!("rediss://app:app-Pa55@127.0.0.1:{tls_port}");
    let read = |f: &str| Some(std::fs::read(dir.join(f)).unwrap());
    let base = || {
        Config::new([url.clone()])
            .key_prefix("lk:")
            .restart_quarantine(false)
            .retry_count(0)
            .connect_timeout(2 * SEC)
            .tls_ca_cert(read("ca.pem"))
    };
    // Without a client certificate: the handshake fails, and the message says what to set.
    let m = LockManager::new(base()).await.unwrap();
    let e = m.acquire(&[unique("mtls")], 5 * SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(
        e.message()
            .contains("requires a client certificate: set tls_client_cert and tls_client_key"),
        "{e}"
    );
    // With it: granted, with a fencing token, by the restricted user.
    let config = base()
        .tls_client_cert(read("client.pem"))
        .tls_client_key(read("client.key"));
    assert!(!format!("{config:?}").contains("PRIVATE KEY"));
    let m = LockManager::new(config).await.unwrap();
    let lock = m
        .acquire_with(
            &[unique("mtls")],
            5 * SEC,
            ironlock::AcquireOptions::default().fencing(true),
        )
        .await
        .expect("granted over mutual TLS");
    assert!(lock.fence().is_some());
    assert!(lock.release().await.held);
    // A certificate without its key is a bad argument.
    let e = LockManager::new(base().tls_client_cert(read("client.pem")))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.message().starts_with("tls_client_key"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One TLS node (`tls-auth-clients yes`, the least-privilege user) serving `cert`/`key` from
/// `dir`; returns the cluster and the TLS port.
fn tls_node(dir: &std::path::Path, cert: &str, key: &str) -> (Cluster, u16) {
    let path = |f: &str| dir.join(f).to_str().unwrap().to_owned();
    let port = free_port();
    let mut args: Vec<String> = vec![
        "--tls-port".into(),
        port.to_string(),
        "--tls-cert-file".into(),
        path(cert),
        "--tls-key-file".into(),
        path(key),
        "--tls-ca-cert-file".into(),
        path("ca.pem"),
        "--tls-auth-clients".into(),
        "yes".into(),
    ];
    args.extend(["--user", "default", "on", "nopass", "~*", "&*", "+@all"].map(String::from));
    args.extend(LEAST_PRIVILEGE.map(String::from));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    (Cluster::start_with(1, &refs).unwrap(), port)
}

/// Node 0's certificate names only `redis-a.ironlock.test` (the URL says 127.0.0.1); node 1's is
/// signed by another CA. Per-node TLS settings (server name, CA) make both usable, with
/// verification on; without them each handshake error says what to set. Release wake-ups work
/// through both kinds of notification connection (node 0's is RESP3 pushes).
#[tokio::test]
async fn a_server_name_and_per_node_tls_with_mutual_tls_as_the_least_privilege_user() {
    let dir = std::env::temp_dir().join(unique("ironlock-sni").replace(':', "-"));
    ironlock_harness::make_test_pki(&dir);
    let read = |f: &str| Some(std::fs::read(dir.join(f)).unwrap());
    let (_a, port_a) = tls_node(&dir, "named.pem", "named.key");
    let (_b, port_b) = tls_node(&dir, "other-server.pem", "other-server.key");
    let urls = [port_a, port_b].map(|p| format!("rediss://app:app-Pa55@127.0.0.1:{p}"));
    let base = || {
        Config::new(urls.clone())
            .key_prefix("lk:")
            .restart_quarantine(false)
            .retry_count(0)
            .connect_timeout(2 * SEC)
            .tls_ca_cert(read("ca.pem"))
            .tls_client_cert(read("client.pem"))
            .tls_client_key(read("client.key"))
    };
    // Without them: both handshakes fail, and the one-line message says why, per node.
    let m = LockManager::new(base()).await.unwrap();
    let e = m.acquire(&[unique("sni")], 5 * SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let text = e.message();
    assert!(
        text.contains("the server's certificate does not name this host"),
        "{text}"
    );
    assert!(
        text.contains("the server's certificate is not signed by a trusted CA: set tls_ca_cert"),
        "{text}"
    );
    assert!(!e.to_string().contains("app-Pa55"), "{e}");
    drop(m);
    // With them: granted by both nodes (N = 2, quorum 2), with a fencing token.
    let config = base()
        .node_tls(
            0,
            ironlock::NodeTls {
                server_name: Some("redis-a.ironlock.test".into()),
                ..Default::default()
            },
        )
        .node_tls(
            1,
            ironlock::NodeTls {
                ca_cert: read("other-ca.pem"),
                ..Default::default()
            },
        )
        .retry_count(20)
        .retry_delay(10 * SEC);
    assert!(!format!("{config:?}").contains("PRIVATE KEY"));
    let m = LockManager::new(config).await.unwrap();
    let r = unique("sni");
    let lock = m
        .acquire_with(
            &[&r],
            5 * SEC,
            ironlock::AcquireOptions::default().fencing(true),
        )
        .await
        .expect("granted with per-node TLS");
    assert!(lock.fence().is_some());
    // A waiter with a 10 s retry delay is woken by the release: both nodes announce it.
    let waiter = {
        let m = m.clone();
        let r = r.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let l = m
                .acquire_with(&[&r], 5 * SEC, ironlock::AcquireOptions::wait(8 * SEC))
                .await
                .unwrap();
            let waited = started.elapsed();
            l.release().await;
            waited
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(lock.release().await.held);
    let waited = waiter.await.unwrap();
    assert!(waited < 5 * SEC, "not woken by the release: {waited:?}");
    assert!(m.stats().wakeups >= 1, "{:?}", m.stats());
    // The manager-wide server name is the fallback of every node.
    let one = Config::new([urls[0].clone()])
        .key_prefix("lk:")
        .restart_quarantine(false)
        .retry_count(0)
        .connect_timeout(2 * SEC)
        .tls_ca_cert(read("ca.pem"))
        .tls_client_cert(read("client.pem"))
        .tls_client_key(read("client.key"))
        .tls_server_name(Some("redis-a.ironlock.test".into()));
    let m1 = LockManager::new(one).await.unwrap();
    m1.acquire(&[unique("sni")], 5 * SEC)
        .await
        .expect("granted")
        .release()
        .await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_tls_settings_name_the_argument() {
    let check = |c: Config, starts: &str| {
        let e = c.check().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.message().starts_with(starts), "{e}");
    };
    let tls = || Config::new(["rediss://127.0.0.1:6380", "redis://127.0.0.1:6379"]);
    let named = |n: &str| ironlock::NodeTls {
        server_name: Some(n.into()),
        ..Default::default()
    };
    check(
        tls().node_tls(2, named("a.test")),
        "node_tls[2]: there is no node 2",
    );
    check(
        tls().node_tls(1, named("a.test")),
        "node_tls[1]: nodes[1] (redis://127.0.0.1:6379) does not use TLS",
    );
    check(
        tls().node_tls(0, named("no spaces")),
        "node_tls[0].server_name: \"no spaces\" is not a DNS name",
    );
    check(
        tls().tls_server_name(Some(String::new())),
        "tls_server_name: \"\" is not a DNS name",
    );
    let key_only = ironlock::NodeTls {
        client_key: Some(b"-----BEGIN PRIVATE KEY-----".to_vec()),
        ..Default::default()
    };
    check(
        tls().node_tls(0, key_only.clone()),
        "node_tls[0].client_cert: a client key needs its certificate",
    );
    assert!(!format!("{:?}", tls().node_tls(0, key_only)).contains("PRIVATE"));
    assert!(tls().node_tls(0, named("10.0.0.1")).check().is_ok());
}
