//! Runs every scenario of `tests/corpus/scenarios/` against the Rust core.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use ironlock::{
    AcquireOptions, Config, Leadership, Lock, LockManager, SettingKind, SettingValue, Vote,
};
use serde_json::Value;

/// Commands of `redis` steps that only read, so that a mismatch may be retried.
const READ_ONLY: [&str; 7] = ["GET", "EXISTS", "PTTL", "TTL", "DBSIZE", "ZCARD", "HGET"];

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/scenarios")
}

fn ms(v: &Value) -> Duration {
    Duration::from_millis(v.as_u64().expect("integer milliseconds"))
}

fn settings(urls: Vec<String>, s: &Value) -> Config {
    let mut c = Config::new(urls)
        .restart_quarantine(false)
        .retry_count(0)
        .connect_timeout(Duration::from_secs(5));
    let Some(map) = s.as_object() else { return c };
    for (k, v) in map {
        // Durations are `<name>_ms` in the corpus; everything else is named as in the table.
        let name = k.strip_suffix("_ms").unwrap_or(k);
        let value = match ironlock::setting(name).unwrap().kind {
            SettingKind::Count | SettingKind::OptionalCount => {
                SettingValue::Count(v.as_u64().unwrap())
            }
            SettingKind::Duration | SettingKind::OptionalDuration => SettingValue::Duration(ms(v)),
            SettingKind::Fraction => SettingValue::Fraction(v.as_f64().unwrap()),
            SettingKind::Flag => SettingValue::Flag(v.as_bool().unwrap()),
            SettingKind::Text => SettingValue::Text(v.as_str().unwrap().to_owned()),
        };
        c = c.set(name, value).unwrap();
    }
    c
}

fn code(r: &Result<(), ironlock::Error>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => e.kind().code().into(),
    }
}

fn vote_name(v: Vote) -> &'static str {
    v.as_str()
}

fn check_votes(step: &Value, report: Option<&ironlock::Report>, ctx: &str) {
    let Some(expected) = step.get("expect_votes").and_then(Value::as_object) else {
        return;
    };
    let report = report.unwrap_or_else(|| panic!("{ctx}: no report"));
    for (vote, n) in expected {
        let got = report
            .nodes
            .iter()
            .filter(|r| vote_name(r.vote) == vote)
            .count();
        assert_eq!(
            got as u64,
            n.as_u64().unwrap(),
            "{ctx}: votes {vote} in {report}"
        );
    }
}

/// `"$a"` stands for the token of lock (or leadership) `a`.
fn expand(
    v: &Value,
    locks: &HashMap<String, Lock>,
    leaders: &HashMap<String, Leadership>,
) -> Value {
    match v.as_str().and_then(|s| s.strip_prefix('$')) {
        Some(name) => Value::String(match locks.get(name) {
            Some(l) => l.token().to_owned(),
            None => leaders[name].lock().token().to_owned(),
        }),
        None => v.clone(),
    }
}

/// `expect_message`: every listed text is in the error's one-line message, where `{nodeI}`
/// stands for node I's `host:port`.
fn check_message(step: &Value, message: Option<String>, urls: &[String], ctx: &str) {
    let Some(parts) = step.get("expect_message").and_then(Value::as_array) else {
        return;
    };
    let message = message.unwrap_or_else(|| panic!("{ctx}: no error message"));
    for part in parts {
        let mut want = part.as_str().unwrap().to_owned();
        for (i, url) in urls.iter().enumerate() {
            let addr = url.rsplit(['/', '@']).next().unwrap();
            want = want.replace(&format!("{{node{i}}}"), addr);
        }
        assert!(
            message.contains(&want),
            "{ctx}: {want:?} not in {message:?}"
        );
    }
}

fn load(path: &PathBuf) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

async fn run(sc: Value, mut cluster: common::Cluster, user: Option<&'static str>) {
    let name = sc["name"].as_str().unwrap().to_owned();
    let urls = match user {
        Some(user) => cluster
            .urls()
            .iter()
            .map(|u| u.replacen("redis://", &format!("redis://{user}@"), 1))
            .collect(),
        None => cluster.urls(),
    };
    let manager = LockManager::new(settings(urls.clone(), &sc["settings"]))
        .await
        .unwrap();
    let mut locks: HashMap<String, Lock> = HashMap::new();
    let mut leaders: HashMap<String, Leadership> = HashMap::new();
    let mut keepers = Vec::new();
    for (i, step) in sc["steps"].as_array().unwrap().iter().enumerate() {
        let op = step["op"].as_str().unwrap();
        let ctx = format!("{name} step {i} ({op})");
        let node = || step["node"].as_u64().unwrap() as usize;
        match op {
            "acquire" => {
                let resources: Vec<String> = step["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r.as_str().unwrap().to_owned())
                    .collect();
                let o = &step["options"];
                let options = AcquireOptions {
                    wait: o.get("wait_ms").map(ms),
                    retry_count: o.get("retry_count").map(|v| v.as_u64().unwrap() as u32),
                    fencing: o.get("fencing").and_then(Value::as_bool).unwrap_or(false),
                    fair: o.get("fair").and_then(Value::as_bool),
                    holder: None,
                    min_hold: o.get("min_hold_ms").map(ms),
                };
                let ttl = ms(&step["ttl_ms"]);
                // `limit`: a permit of the semaphore resources[0] (SPEC §11).
                // `access`: the read or write side of the read-write lock resources[0].
                let access = step.get("access").and_then(Value::as_str);
                let r = match (step.get("limit").and_then(Value::as_u64), access) {
                    (Some(limit), _) => {
                        manager
                            .semaphore(resources[0].as_str(), limit as u32)
                            .acquire_with(ttl, options)
                            .await
                    }
                    (None, Some("read")) => {
                        let rw = manager.rw_lock(resources[0].as_str());
                        rw.read_with(ttl, options).await
                    }
                    (None, Some("write")) => {
                        let rw = manager.rw_lock(resources[0].as_str());
                        rw.write_with(ttl, options).await
                    }
                    (None, Some(other)) => panic!("{ctx}: unknown access {other:?}"),
                    (None, None) => manager.acquire_with(&resources, ttl, options).await,
                };
                let (got, report) = match &r {
                    Ok(l) => ("ok".to_owned(), Some(l.report())),
                    Err(e) => (e.kind().code().to_owned(), e.report().cloned()),
                };
                assert_eq!(got, step["expect"].as_str().unwrap(), "{ctx}: {r:?}");
                check_votes(step, report.as_ref(), &ctx);
                check_message(
                    step,
                    r.as_ref().err().map(|e| e.message().to_owned()),
                    &urls,
                    &ctx,
                );
                if let Some(rounds) = step.get("expect_rounds") {
                    let report = report.as_ref().expect("a report");
                    assert_eq!(u64::from(report.rounds), rounds.as_u64().unwrap(), "{ctx}");
                    assert!(report.elapsed > Duration::ZERO, "{ctx}: {report}");
                }
                if let Ok(l) = r {
                    locks.insert(step["as"].as_str().unwrap().to_owned(), l);
                }
            }
            "extend" => {
                let l = &locks[step["lock"].as_str().unwrap()];
                let r = l.extend(ms(&step["ttl_ms"])).await;
                assert_eq!(code(&r), step["expect"].as_str().unwrap(), "{ctx}: {r:?}");
            }
            "finish" => {
                let l = &locks[step["lock"].as_str().unwrap()];
                let r = l.finish().await.map(drop);
                assert_eq!(code(&r), step["expect"].as_str().unwrap(), "{ctx}: {r:?}");
            }
            "keep_alive" => {
                let l = &locks[step["lock"].as_str().unwrap()];
                keepers.push(l.keep_alive());
            }
            "expect_lost" => {
                let l = &locks[step["lock"].as_str().unwrap()];
                assert_eq!(l.is_lost(), step["lost"].as_bool().unwrap(), "{ctx}");
            }
            "release" => {
                let l = &locks[step["lock"].as_str().unwrap()];
                let r = l.release().await;
                assert_eq!(
                    r.held,
                    step["expect_held"].as_bool().unwrap(),
                    "{ctx}: {}",
                    r.report
                );
            }
            "expect_valid" => {
                let l = &locks[step["lock"].as_str().unwrap()];
                assert_eq!(l.is_valid(), step["valid"].as_bool().unwrap(), "{ctx}");
            }
            "expect_fence" => {
                let l = &locks[step["lock"].as_str().unwrap()];
                assert_eq!(
                    l.fence().is_some(),
                    step["present"].as_bool().unwrap(),
                    "{ctx}"
                );
            }
            "expect_fence_increasing" => {
                let fences: Vec<u64> = step["locks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| locks[n.as_str().unwrap()].fence().expect("fence"))
                    .collect();
                assert!(fences.windows(2).all(|w| w[0] < w[1]), "{ctx}: {fences:?}");
            }
            "redis" => {
                let args: Vec<String> = step["args"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap().to_owned())
                    .collect();
                let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                let matches = |got: &Value| {
                    step.get("expect")
                        .is_none_or(|exp| *got == expand(exp, &locks, &leaders))
                        && step.get("expect_gt").is_none_or(|gt| {
                            got.as_i64().unwrap_or(i64::MIN) > gt.as_i64().unwrap()
                        })
                };
                // A read that does not match yet is retried for up to 200 ms (README: requests
                // a round stopped waiting for reach the other nodes in the background).
                let read_only = READ_ONLY.contains(&refs[0].to_ascii_uppercase().as_str());
                let mut tries = 0;
                let got = loop {
                    let raw = cluster.command(node(), &refs).unwrap();
                    let got: Value =
                        serde_json::from_str(&ironlock_harness::resp_to_json(&raw)).unwrap();
                    tries += 1;
                    if !read_only || tries == 40 || matches(&got) {
                        break got;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                };
                if let Some(exp) = step.get("expect") {
                    assert_eq!(got, expand(exp, &locks, &leaders), "{ctx}: {args:?}");
                }
                if let Some(gt) = step.get("expect_gt") {
                    assert!(got.as_i64().unwrap() > gt.as_i64().unwrap(), "{ctx}: {got}");
                }
            }
            "campaign" => {
                let election = manager.election(step["election"].as_str().unwrap());
                let r = election
                    .campaign_with(
                        step["value"].as_str().unwrap(),
                        ms(&step["ttl_ms"]),
                        step.get("wait_ms").map(ms),
                    )
                    .await;
                let got = r.as_ref().map_or_else(|e| e.kind().code(), |_| "ok");
                assert_eq!(got, step["expect"].as_str().unwrap(), "{ctx}: {r:?}");
                check_message(
                    step,
                    r.as_ref().err().map(|e| e.message().to_owned()),
                    &urls,
                    &ctx,
                );
                if let Ok(l) = r {
                    leaders.insert(step["as"].as_str().unwrap().to_owned(), l);
                }
            }
            "proclaim" => {
                let l = &leaders[step["leadership"].as_str().unwrap()];
                let r = l.proclaim(step["value"].as_str().unwrap()).await;
                assert_eq!(code(&r), step["expect"].as_str().unwrap(), "{ctx}: {r:?}");
            }
            "resign" => {
                leaders[step["leadership"].as_str().unwrap()].resign().await;
            }
            "expect_leading" => {
                let l = &leaders[step["leadership"].as_str().unwrap()];
                assert_eq!(l.is_leader(), step["leading"].as_bool().unwrap(), "{ctx}");
            }
            "expect_terms_increasing" => {
                let terms: Vec<u64> = step["leaderships"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| leaders[n.as_str().unwrap()].term())
                    .collect();
                assert!(terms.windows(2).all(|w| w[0] < w[1]), "{ctx}: {terms:?}");
            }
            "leader" => {
                let r = manager
                    .election(step["election"].as_str().unwrap())
                    .leader()
                    .await;
                let want = &step["expect"];
                match (r, want.as_str()) {
                    (Err(e), Some(code)) => assert_eq!(e.kind().code(), code, "{ctx}: {e:?}"),
                    (Ok(None), None) => assert!(want.is_null(), "{ctx}: nobody leads, want {want}"),
                    (Ok(Some(who)), None) => {
                        assert!(!want.is_null(), "{ctx}: {who:?} leads, want nobody");
                        let l = &leaders[want["leadership"].as_str().unwrap()];
                        assert_eq!(who.value, want["value"].as_str().unwrap(), "{ctx}");
                        assert_eq!(who.term, l.term(), "{ctx}");
                        assert_eq!(who.token, l.lock().token(), "{ctx}");
                        assert!(who.validity > Duration::ZERO, "{ctx}: {who:?}");
                    }
                    (r, _) => panic!("{ctx}: {r:?}, want {want}"),
                }
            }
            "kill" => cluster.kill(node()).unwrap(),
            "start" => cluster.start_node(node()).unwrap(),
            "restart" => cluster.restart(node()).unwrap(),
            "pause" => cluster.pause(node()).unwrap(),
            "resume" => cluster.resume(node()).unwrap(),
            "sleep" => tokio::time::sleep(ms(&step["ms"])).await,
            other => panic!("{ctx}: unknown op {other}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_corpus_scenario_passes() {
    run_all(&[], None).await;
}

/// The whole corpus again as an ACL user without the dangerous commands (no INFO: restart
/// quarantine dates the nodes' data instead), as README's "Least privilege" promises.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_corpus_scenario_passes_as_a_user_without_dangerous_commands() {
    const ACL: [&str; 15] = [
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
        "~*",
        "&*",
        "+@all",
        "-@dangerous",
    ];
    run_all(&ACL, Some("app:app-Pa55")).await;
}

async fn run_all(node_args: &[&str], user: Option<&'static str>) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 20, "corpus has {} scenarios", files.len());
    // Scenarios are independent (own nodes): run them concurrently to keep the suite short.
    // Nodes are started here, on the test thread, so that starting them (which blocks) never
    // stalls the runtime's workers while other scenarios talk to Redis.
    let handles: Vec<_> = files
        .iter()
        .map(|f| {
            let sc = load(f);
            let n = sc["nodes"].as_u64().unwrap() as usize;
            let cluster = common::Cluster::start_with(n, node_args)
                .unwrap_or_else(|e| panic!("harness: {e}"));
            tokio::spawn(run(sc, cluster, user))
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
}
