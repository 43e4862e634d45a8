//! `ironlock status`, `release` and `check` against real nodes.

mod common;

use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn status_shows_the_holder_and_release_frees_it() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let key = unique("status");
    let Holder {
        child: holder,
        token,
    } = hold(
        &urls,
        &["--ttl", "3", "--kill-grace", "1"],
        &key,
        "exec sleep 20",
    );

    let out = run(ironlock(&urls).args(["status", "--json", &key]), LIMIT);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    assert_eq!(v["holder"].as_str(), Some(token.as_str()), "{v}");
    // The token names the holding process: this host and the pid of `ironlock run`.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    let who = format!("{}:{}", host.trim(), holder.id());
    assert_eq!(v["holder_process"].as_str(), Some(who.as_str()), "{v}");
    assert_eq!(token.len(), 41 + who.len(), "{token}");
    assert_eq!(v["quorum"], 2);
    assert_eq!(v["key"].as_str(), Some(key.as_str()));
    let nodes = v["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3);
    for n in nodes {
        assert_eq!(n["token"].as_str(), Some(token.as_str()), "{n}");
        let ttl = n["ttl_ms"].as_f64().expect("ttl");
        assert!(ttl > 0.0 && ttl <= 3000.0, "{ttl}");
    }
    let out = run(ironlock(&urls).args(["status", &key]), LIMIT);
    assert!(
        stdout(&out).contains(&format!("held by {who} (token {token}) on 3 of 3 nodes")),
        "{}",
        stdout(&out)
    );
    // Prometheus text: the resource's state, each node's, and the check's own counters.
    let out = run(
        ironlock(&urls).args(["status", "--prometheus", &key]),
        LIMIT,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    for want in [
        format!("ironlock_resource_held{{key=\"{key}\"}} 1\n"),
        format!("ironlock_resource_holding_nodes{{key=\"{key}\"}} 3\n"),
        "ironlock_quorum 2\n".to_owned(),
        format!("ironlock_node_up{{node=\"{}\"}} 1\n", urls[2]),
        "# TYPE ironlock_granted_total counter\n".to_owned(),
        "ironlock_acquire_seconds_bucket{le=\"+Inf\"} 0\n".to_owned(),
    ] {
        assert!(text.contains(&want), "{want:?} missing from\n{text}");
    }
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (_, value) = line.rsplit_once(' ').expect("name value");
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }

    // A wrong token releases nothing: exit 1, key untouched.
    let out = run(
        ironlock(&urls).args(["release", &key, "--token", &"0".repeat(40)]),
        LIMIT,
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(get(&cluster, 0, &key).as_deref(), Some(token.as_str()));

    // The right token deletes it everywhere; the holder notices at its next extension and
    // stops its command: exit 75.
    let out = run(
        ironlock(&urls).args(["release", "--json", &key, "--token", &token]),
        LIMIT,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("release JSON");
    assert_eq!(v["held"], true);
    assert_eq!(v["deleted_on"], 3);
    for i in 0..3 {
        assert_eq!(get(&cluster, i, &key), None, "node {i}");
    }
    let out = run(ironlock(&urls).args(["status", &key]), LIMIT);
    assert_eq!(code(&out), 0);
    assert!(
        stdout(&out).contains(": free (quorum 2)"),
        "{}",
        stdout(&out)
    );
    let out = finish(holder, LIMIT);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
}

/// Issue 29: `status` of a semaphore's name shows its permits (holders and ttl per node, the
/// limit in use), not "free".
#[test]
fn no_holder_keeps_the_token_a_bare_random_value() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let key = unique("noholder");
    let Holder {
        child: mut holder,
        token,
    } = hold(&urls, &["--ttl", "3", "--no-holder"], &key, "exec sleep 20");
    assert_eq!(token.len(), 40, "{token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    let out = run(ironlock(&urls).args(["status", "--json", &key]), LIMIT);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    assert_eq!(v["holder"].as_str(), Some(token.as_str()), "{v}");
    assert!(v["holder_process"].is_null(), "{v}");
    let out = run(ironlock(&urls).args(["status", &key]), LIMIT);
    assert!(
        stdout(&out).contains(&format!("held by {token} on 3 of 3 nodes")),
        "{}",
        stdout(&out)
    );
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn status_shows_the_permits_of_a_semaphore() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let key = unique("slots-status");
    let holders: Vec<_> = (0..2)
        .map(|_| {
            hold(
                &urls,
                &["--slots", "2", "--ttl", "5"],
                &key,
                "exec sleep 20",
            )
        })
        .collect();
    let mut tokens: Vec<&str> = holders.iter().map(|h| h.token.as_str()).collect();
    tokens.sort();
    let out = run(ironlock(&urls).args(["status", &key]), LIMIT);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(!text.contains("free"), "{text}");
    assert!(
        text.contains(&format!(
            "{key:?}: semaphore (limit 2, quorum 3): 2 of 2 permits held: {} on 3 of 3 nodes, {} on 3 of 3 nodes",
            tokens[0], tokens[1]
        )),
        "{text}"
    );
    for u in &urls {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(u.as_str()))
            .unwrap_or_else(|| panic!("no line for {u}: {text}"));
        assert!(line.contains("2 permits of 2: "), "{line}");
        assert!(
            tokens.iter().all(|t| line.contains(&format!("{t} ttl "))),
            "{line}"
        );
    }
    let out = run(ironlock(&urls).args(["status", "--json", &key]), LIMIT);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    assert_eq!(v["holder"], serde_json::Value::Null, "{v}");
    let sem = &v["semaphore"];
    // The semaphore key, in the resource key's hash slot (`{key}` as its hash tag).
    let sem_key = format!("{key}{{{key}}}:ironlock:semaphore");
    assert_eq!(sem["key"].as_str(), Some(sem_key.as_str()));
    assert_eq!(
        (sem["limit"].as_u64(), sem["quorum"].as_u64()),
        (Some(2), Some(3)),
        "{v}"
    );
    let mut held: Vec<&str> = sem["held"]
        .as_array()
        .expect("held")
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    held.sort();
    assert_eq!(held, tokens, "{v}");
    for n in v["nodes"].as_array().expect("nodes") {
        assert_eq!(n["limit"], 2, "{n}");
        let permits = n["permits"].as_array().expect("permits");
        assert_eq!(permits.len(), 2, "{n}");
        for p in permits {
            let ttl = p["ttl_ms"].as_f64().expect("ttl");
            assert!(ttl > 0.0 && ttl <= 5000.0, "{p}");
        }
    }
    let out = run(
        ironlock(&urls).args(["status", "--prometheus", &key]),
        LIMIT,
    );
    assert!(
        stdout(&out).contains(&format!(
            "ironlock_semaphore_permits_held{{key=\"{key}\"}} 2\n"
        )),
        "{}",
        stdout(&out)
    );
    for h in holders {
        signal(&h.child, libc::SIGTERM);
        finish(h.child, LIMIT);
    }
    let out = run(ironlock(&urls).args(["status", &key]), LIMIT);
    assert!(
        stdout(&out).contains(": free (quorum 2)"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn status_without_a_quorum_of_answers_exits_69() {
    let mut cluster = cluster(3);
    let urls = cluster.urls();
    cluster.kill(0).expect("kill");
    cluster.kill(1).expect("kill");
    let out = run(ironlock(&urls).args(["status", &unique("s")]), LIMIT);
    assert_eq!(code(&out), 69, "{}", stdout(&out));
    assert!(stdout(&out).contains("unknown"), "{}", stdout(&out));
    assert_eq!(
        stdout(&out).matches("quorum").count(),
        1,
        "{}",
        stdout(&out)
    );
}

#[test]
fn check_reports_versions_quarantine_and_latency() {
    let mut cluster = cluster(3);
    let urls = cluster.urls();

    let out = run(ironlock(&urls).args(["check", "--json"]), LIMIT);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("check JSON");
    assert_eq!(v["ok"], true);
    assert_eq!(v["eligible"], 3);
    for (n, url) in v["nodes"].as_array().expect("nodes").iter().zip(&urls) {
        assert_eq!(n["url"].as_str(), Some(url.as_str()));
        assert_eq!(n["connected"], true);
        assert_eq!(n["eligible"], true);
        assert!(n["version"].as_str().is_some_and(|s| !s.is_empty()), "{n}");
        assert!(n["latency_ms"].as_f64().is_some_and(|l| l > 0.0), "{n}");
    }

    // With restart quarantine on (the default), freshly started nodes do not count yet.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ironlock"));
    cmd.env("IRONLOCK_NODES", urls.join(","))
        .env_remove("REDIS_URL")
        .args(["check", "--json", "--max-ttl", "30"]);
    let out = run(&mut cmd, LIMIT);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("check JSON");
    assert_eq!(v["ok"], false);
    for n in v["nodes"].as_array().expect("nodes") {
        assert_eq!(n["eligible"], false, "{n}");
        let left = n["quarantine_remaining_ms"].as_f64().expect("remaining");
        assert!(left > 20_000.0 && left <= 31_302.0, "{left}");
    }

    // One node down: still a quorum, but degraded (exit 1); the human table says which one.
    cluster.kill(2).expect("kill");
    let out = run(ironlock(&urls).arg("check"), LIMIT);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "2 of 3 nodes eligible, quorum 2: DEGRADED (1 of 3 nodes do not count; 0 more may fail"
        ),
        "{text}"
    );
    let out = run(ironlock(&urls).args(["check", "--json"]), LIMIT);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("check JSON");
    assert_eq!(
        (v["ok"].clone(), v["degraded"].clone()),
        (true.into(), true.into()),
        "{v}"
    );
    let down = text
        .lines()
        .find(|l| l.starts_with(&urls[2]))
        .expect("a line for the dead node");
    assert!(down.contains("DOWN"), "{down}");
    cluster.kill(1).expect("kill");
    let out = run(ironlock(&urls).arg("check"), LIMIT);
    assert_eq!(code(&out), 69);
    assert!(stdout(&out).contains("NO QUORUM"), "{}", stdout(&out));
}

#[test]
fn passwords_never_appear_in_output() {
    let cluster = ironlock_harness::Cluster::start_with(1, &["--requirepass", "s3cretpw"])
        .expect("start node with a password");
    let port = cluster.nodes()[0].port();
    let good = format!("redis://:s3cretpw@127.0.0.1:{port}");
    let out = run(ironlock(&[good]).args(["check", "-v"]), LIMIT);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains(":***@"), "{}", stdout(&out));
    let bad = format!("redis://:wrongpw@127.0.0.1:{port}");
    for args in [
        vec!["check", "--json"],
        vec!["run", "-n", "-v", "r", "--", "true"],
    ] {
        let out = run(ironlock(std::slice::from_ref(&bad)).args(&args), LIMIT);
        assert_ne!(code(&out), 0);
        let all = stdout(&out) + &stderr(&out);
        assert!(!all.contains("wrongpw"), "{args:?}: {all}");
        assert!(!all.is_empty());
    }
}

#[test]
fn a_password_with_a_reserved_character_is_never_shown() {
    for password in ["Hunter2#Secret", "Hunter2?Secret", "Hunter2/Secret"] {
        let url = format!("redis://alice:{password}@127.0.0.1:6379");
        for args in [vec!["check"], vec!["run", "-n", "r", "--", "true"]] {
            let out = run(ironlock(std::slice::from_ref(&url)).args(&args), LIMIT);
            assert_eq!(code(&out), 64, "{args:?}: {}", stderr(&out));
            let all = stdout(&out) + &stderr(&out);
            for piece in ["Hun", "unt", "ter2", "Sec", "cret"] {
                assert!(!all.contains(piece), "{args:?}: {all}");
            }
            assert!(all.contains("nodes[0]") && all.contains("%23"), "{all}");
        }
    }
}

#[test]
fn key_prefix_names_the_key() {
    let cluster = cluster(1);
    let urls = cluster.urls();
    let resource = unique("prefixed");
    let Holder {
        child: holder,
        token,
    } = hold(&urls, &["--key-prefix", "app:"], &resource, "exec sleep 20");
    assert_eq!(
        get(&cluster, 0, &format!("app:{resource}")),
        Some(token.clone())
    );
    assert_eq!(get(&cluster, 0, &resource), None);
    let out = run(
        ironlock(&urls).args(["status", "--json", "--key-prefix", "app:", &resource]),
        LIMIT,
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    assert_eq!(v["holder"].as_str(), Some(token.as_str()));
    assert_eq!(v["key"].as_str(), Some(format!("app:{resource}").as_str()));
    let out = run(ironlock(&urls).args(["status", "--json", &resource]), LIMIT);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    assert_eq!(v["holder"], serde_json::Value::Null);
    signal(&holder, libc::SIGTERM);
    assert_eq!(code(&finish(holder, LIMIT)), 143);
    assert_eq!(get(&cluster, 0, &format!("app:{resource}")), None);
}

#[test]
fn secrets_stay_off_the_command_line() {
    let cluster = ironlock_harness::Cluster::start_with(1, &["--requirepass", "s3cretpw"])
        .expect("start node with a password");
    let url = format!("redis://:s3cretpw@127.0.0.1:{}", cluster.nodes()[0].port());
    // A password in --node works, with a warning that names the safer places.
    let out = run(ironlock(std::slice::from_ref(&url)).arg("check"), LIMIT);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("visible to other local users") && err.contains("--node-file"),
        "{err}"
    );
    assert!(!err.contains("s3cretpw"), "{err}");
    // No warning without a password.
    let plain = run(
        ironlock(&["redis://127.0.0.1:1".to_owned()]).args(["check", "--json"]),
        LIMIT,
    );
    assert!(
        !stderr(&plain).contains("visible to other"),
        "{}",
        stderr(&plain)
    );
    // --node-file: refused while others may read it, used once it is private.
    let dir = temp_dir();
    let file = dir.join("nodes");
    std::fs::write(&file, format!("# the nodes\n\n{url}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let file_arg = file.to_str().unwrap().to_owned();
    let out = run(
        ironlock(&[]).args(["--node-file", &file_arg, "check"]),
        LIMIT,
    );
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(stderr(&out).contains("chmod 600"), "{}", stderr(&out));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = run(
        ironlock(&[]).args(["--node-file", &file_arg, "check"]),
        LIMIT,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("visible to other"),
        "{}",
        stderr(&out)
    );
    assert!(!(stdout(&out) + &stderr(&out)).contains("s3cretpw"));
    // A file without passwords may be shared (mode 644); a world-writable one never.
    let public = dir.join("public-nodes");
    let open = common::cluster(1);
    std::fs::write(&public, format!("{}\n", open.urls()[0])).unwrap();
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o644)).unwrap();
    let public_arg = public.to_str().unwrap().to_owned();
    let out = run(
        ironlock(&[]).args(["--node-file", &public_arg, "check"]),
        LIMIT,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = run(
        ironlock(&[]).args(["--node-file", &public_arg, "check"]),
        LIMIT,
    );
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(stderr(&out).contains("chmod o-w"), "{}", stderr(&out));
}

#[test]
fn mutual_tls_from_the_command_line() {
    let tmp = temp_dir();
    let dir = tmp.join("pki");
    ironlock_harness::make_test_pki(&dir);
    let path = |f: &str| dir.join(f).to_str().unwrap().to_owned();
    let tls_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    let _c = ironlock_harness::Cluster::start_with(
        1,
        &[
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            &path("server.pem"),
            "--tls-key-file",
            &path("server.key"),
            "--tls-ca-cert-file",
            &path("ca.pem"),
            "--tls-auth-clients",
            "yes",
        ],
    )
    .expect("start a TLS node");
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let resource = unique("mtls");
    // Without a client certificate: a clear reason and what to set.
    let out = run(
        ironlock(std::slice::from_ref(&url)).args([
            "--cacert",
            &path("ca.pem"),
            "run",
            "-n",
            &resource,
            "true",
        ]),
        LIMIT,
    );
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("requires a client certificate"),
        "{}",
        stderr(&out)
    );
    // --cert/--key as flags, and the CA from the environment.
    let out = run(
        ironlock(std::slice::from_ref(&url))
            .env("IRONLOCK_CACERT", path("ca.pem"))
            .args(["--cert", &path("client.pem"), "--key", &path("client.key")])
            .args(["run", "-n", &resource, "sh", "-c", "exit 5"]),
        LIMIT,
    );
    assert_eq!(code(&out), 5, "{}", stderr(&out));
    // A missing key file names the flag.
    let out = run(
        ironlock(std::slice::from_ref(&url)).args(["--key", "/nonexistent/key.pem", "check"]),
        LIMIT,
    );
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--key /nonexistent/key.pem"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_server_name_from_the_command_line_as_the_least_privilege_user() {
    let tmp = temp_dir();
    let dir = tmp.join("pki");
    ironlock_harness::make_test_pki(&dir);
    let path = |f: &str| dir.join(f).to_str().unwrap().to_owned();
    let tls_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    // The certificate names only redis-a.ironlock.test; the URL says 127.0.0.1.
    let _c = ironlock_harness::Cluster::start_with(
        1,
        &[
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            &path("named.pem"),
            "--tls-key-file",
            &path("named.key"),
            "--tls-ca-cert-file",
            &path("ca.pem"),
            "--user",
            "default",
            "on",
            "nopass",
            "~*",
            "&*",
            "+@all",
            "--user",
            "app",
            "on",
            ">app-Pa55",
            "~lk:*",
            "&lk:*",
            "+@all",
            "-@dangerous",
        ],
    )
    .expect("start a TLS node");
    let url = format!("rediss://app:app-Pa55@127.0.0.1:{tls_port}");
    let tls = [
        "--key-prefix",
        "lk:",
        "--cacert",
        &path("ca.pem"),
        "--cert",
        &path("client.pem"),
        "--key",
        &path("client.key"),
    ];
    let resource = unique("sni");
    // The password stays off the command line (IRONLOCK_NODES), as README advises.
    let cli = || {
        let mut cmd = ironlock(&[]);
        cmd.env("IRONLOCK_NODES", &url).args(tls);
        cmd
    };
    let out = run(cli().args(["run", "-n", &resource, "true"]), LIMIT);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("does not name this host: connect by a name it holds, or set --sni to one"),
        "{err}"
    );
    assert!(!err.contains("app-Pa55"), "{err}");
    let out = run(
        cli()
            .env("IRONLOCK_SNI", "redis-a.ironlock.test")
            .args(["run", "-n", "--fencing", &resource, "sh", "-c"])
            .arg("test -n \"$IRONLOCK_FENCE\" && exit 7"),
        LIMIT,
    );
    assert_eq!(code(&out), 7, "{}", stderr(&out));
    let out = run(
        cli().args(["--sni", "not a name", "run", "-n", &resource, "true"]),
        LIMIT,
    );
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--sni: \"not a name\" is not a DNS name"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_shows_a_sentinel_voters_master_and_a_cluster_voters_shards() {
    let group = ironlock_harness::SentinelGroup::start(1, 3).expect("sentinel group");
    let master = group.data.nodes()[group.master().expect("master")].port();
    let out = run(ironlock(&[group.url()]).args(["check", "--json"]), LIMIT);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("check JSON");
    let n = &v["nodes"][0];
    assert_eq!(n["kind"], "sentinel", "{v}");
    assert_eq!(n["master"], format!("127.0.0.1:{master}"), "{v}");
    // The master's replica, as the master reports it.
    let replica = group
        .data
        .nodes()
        .iter()
        .map(|n| n.port())
        .find(|&p| p != master)
        .expect("a replica");
    assert_eq!(
        n["replicas"],
        serde_json::json!([format!("127.0.0.1:{replica}")]),
        "{v}"
    );
    let out = run(ironlock(&[group.url()]).arg("check"), LIMIT);
    assert!(
        stdout(&out).contains(&format!(
            "sentinel master 127.0.0.1:{master}  replicas 127.0.0.1:{replica}  "
        )),
        "{}",
        stdout(&out)
    );

    let c = ironlock_harness::RedisCluster::start(3, 1).expect("cluster");
    let out = run(ironlock(&[c.url()]).args(["check", "--json"]), LIMIT);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("check JSON");
    assert_eq!(v["nodes"][0]["kind"], "cluster", "{v}");
    assert_eq!(v["nodes"][0]["shards"], 3, "{v}");
}
