//! `ironlock elect` and `ironlock leader` as a user runs them, against real nodes.

mod common;

use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn candidates_run_in_turn_with_growing_terms_and_leader_shows_who_leads() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let dir = temp_dir();
    let log = dir.join("log");
    let name = unique("elect");
    let none = run(ironlock(&urls).args(["leader", "--json", &name]), LIMIT);
    assert_eq!(code(&none), 0, "{}", stderr(&none));
    let v: serde_json::Value = serde_json::from_str(stdout(&none).trim()).expect("json");
    assert_eq!(v["leader"], false, "{v}");
    let script = |who: &str, secs: &str| {
        format!(
            "echo \"start {who} $IRONLOCK_TERM\" >> {0}; sleep {secs}; echo \"end {who}\" >> {0}",
            log.display()
        )
    };
    let a = spawn(ironlock(&urls).args([
        "elect",
        "--ttl",
        "5",
        "--value",
        "a:1",
        &name,
        "-c",
        &script("a", "1"),
    ]));
    wait_for_file(&log, LIMIT, |t| t.contains("start a"));
    let shown = run(ironlock(&urls).args(["leader", "--json", &name]), LIMIT);
    let v: serde_json::Value = serde_json::from_str(stdout(&shown).trim()).expect("json");
    assert_eq!(
        (v["leader"].as_bool(), v["value"].as_str()),
        (Some(true), Some("a:1")),
        "{v}"
    );
    let b =
        spawn(ironlock(&urls).args(["elect", "--value", "b", &name, "-c", &script("b", "0.2")]));
    std::thread::sleep(Duration::from_millis(300));
    let c =
        spawn(ironlock(&urls).args(["elect", "--value", "c", &name, "-c", &script("c", "0.2")]));
    for child in [a, b, c] {
        let out = finish(child, LIMIT);
        assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    }
    let text = std::fs::read_to_string(&log).expect("log");
    let lines: Vec<&str> = text.lines().collect();
    let order: Vec<&str> = lines.iter().map(|l| l.split(' ').nth(1).unwrap()).collect();
    assert_eq!(
        order,
        ["a", "a", "b", "b", "c", "c"],
        "one leader at a time, in line:\n{text}"
    );
    let terms: Vec<u64> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("start "))
        .map(|l| l.split(' ').nth(1).unwrap().parse().expect("IRONLOCK_TERM"))
        .collect();
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms grow: {terms:?}"
    );
    let after = run(ironlock(&urls).args(["leader", &name]), LIMIT);
    assert!(stdout(&after).contains("no leader"), "{}", stdout(&after));
    for i in 0..3 {
        assert_eq!(get(&cluster, i, &name), None, "key left on node {i}");
    }
}
