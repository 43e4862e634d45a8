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
    let m = LockManager::new(bad)
        .await
        .expect("a wrong password is a failing voter, not a crash");
    let e = m.acquire(&[&r], 5 * SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    let text = format!("{e} {e:?} {:?}", m.node_status());
    assert!(
        text.contains("WRONGPASS") || text.to_lowercase().contains("auth"),
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
