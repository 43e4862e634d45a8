//! `ironlock-harness`: the test harness as a process, for the C, Python and Node suites.
//!
//! ```text
//! ironlock-harness [--nodes N] [-- EXTRA REDIS-SERVER ARGS...]
//! ironlock-harness --sentinel REPLICAS,SENTINELS
//! ironlock-harness --cluster MASTERS,REPLICAS
//! ironlock-harness --pki DIR
//! ```
//! `--sentinel R,S` starts a master with R replicas under S sentinels instead (the nodes are the
//! data nodes, node 0 the first master); the first line then also has `"sentinel_url"`, and the
//! command `master` answers the index of the node the sentinels name as master now, and
//! `failover` runs `SENTINEL FAILOVER`, waits until the old master is a replica of the new one,
//! and answers the new master's index. `--cluster M,R` forms a Redis Cluster of M masters with
//! R replicas each (the nodes are all of its processes); the first line then also has
//! `"cluster_url"`, and `failover-slot SLOT` fails over the shard serving SLOT (`CLUSTER
//! FAILOVER` on a replica) and answers the new master's index.
//! `--pki DIR` writes a throw-away PKI for TLS tests into DIR (`make_test_pki`: ca.pem,
//! server.pem/key, client.pem/key, other-ca.pem), prints `ok` and exits.
//! Prints one JSON line `{"ports":[...],"urls":[...],"pids":[...]}` once every node answers
//! PING, then reads commands from stdin, one per line, answering each with one line:
//! `kill I`, `start I`, `restart I`, `pause I`, `resume I`, `pids`, `quit`, and
//! `cmd I ARG...` (one Redis command on node I; the answer is the reply as one JSON value:
//! string, integer, null, array, or `{"error": "..."}`). Arguments are split on whitespace.
//! Answers are `ok`, a JSON line (`pids`), or `error: MESSAGE`. When stdin closes (the test
//! process ended or died) every node is killed and the harness exits.

use std::io::{BufRead, Write};

use ironlock_harness::{Cluster, RedisCluster, SentinelGroup};

fn pids_json(c: &Cluster) -> String {
    let pids: Vec<String> = c
        .nodes()
        .iter()
        .map(|n| n.pid().map_or("null".to_owned(), |p| p.to_string()))
        .collect();
    format!("[{}]", pids.join(","))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut n = 3usize;
    let mut extra: Vec<String> = Vec::new();
    let mut sentinel: Option<(usize, usize)> = None;
    let mut redis_cluster: Option<(usize, usize)> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--nodes" | "-n" => match args.next().and_then(|v| v.parse().ok()) {
                Some(v) if v > 0 && v <= 16 => n = v,
                _ => usage("--nodes needs a number from 1 to 16"),
            },
            "--pki" => {
                let Some(dir) = args.next() else {
                    usage("--pki needs a folder");
                };
                ironlock_harness::make_test_pki(std::path::Path::new(&dir));
                println!("ok");
                return;
            }
            "--sentinel" => {
                let spec = args.next().unwrap_or_default();
                let parsed = spec
                    .split_once(',')
                    .and_then(|(r, s)| Some((r.parse().ok()?, s.parse().ok()?)));
                match parsed {
                    Some((r, s)) if s > 0 && r <= 8 && s <= 9 => sentinel = Some((r, s)),
                    _ => usage("--sentinel needs REPLICAS,SENTINELS (e.g. 1,3)"),
                }
            }
            "--cluster" => {
                let spec = args.next().unwrap_or_default();
                let parsed = spec
                    .split_once(',')
                    .and_then(|(m, r)| Some((m.parse().ok()?, r.parse().ok()?)));
                match parsed {
                    Some((m, r)) if (3..=5).contains(&m) && r <= 2 => redis_cluster = Some((m, r)),
                    _ => usage("--cluster needs MASTERS,REPLICAS (3 to 5 masters, e.g. 3,1)"),
                }
            }
            "--" => extra.extend(args.by_ref()),
            "-h" | "--help" => {
                println!("usage: ironlock-harness [--nodes N] [-- EXTRA REDIS-SERVER ARGS...]");
                return;
            }
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    let extra_refs: Vec<&str> = extra.iter().map(String::as_str).collect();
    let mut formed: Option<RedisCluster> = None;
    let started = match (sentinel, redis_cluster) {
        (Some((r, s)), _) => SentinelGroup::start(r, s).map(|g| (None, Some(g))),
        (None, Some((m, r))) => RedisCluster::start(m, r).map(|c| {
            formed = Some(c);
            (None, None)
        }),
        (None, None) => Cluster::start_with(n, &extra_refs).map(|c| (Some(c), None)),
    };
    let (mut plain, mut group) = match started {
        Ok(both) => both,
        Err(e) => {
            eprintln!("ironlock-harness: {e}");
            std::process::exit(1);
        }
    };
    let sentinel_url = group
        .as_ref()
        .map(|g| format!(",\"sentinel_url\":\"{}\"", g.url()))
        .or_else(|| {
            formed
                .as_ref()
                .map(|c| format!(",\"cluster_url\":\"{}\"", c.url()))
        })
        .unwrap_or_default();
    let watch = group.as_ref().map(|g| (g.sentinel_ports(), g.name.clone()));
    let formed_cluster = formed.is_some();
    let cluster: &mut Cluster = match (&mut plain, &mut group, &mut formed) {
        (Some(c), _, _) => c,
        (None, Some(g), _) => &mut g.data,
        (None, None, Some(f)) => &mut f.nodes,
        (None, None, None) => unreachable!("one of the three was started"),
    };
    let ports: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| n.port().to_string())
        .collect();
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{{\"ports\":[{}],\"urls\":[{}],\"pids\":{}{sentinel_url}}}",
        ports.join(","),
        urls.join(","),
        pids_json(cluster)
    );
    let _ = out.flush();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let mut words = line.split_whitespace();
        let cmd = words.next().unwrap_or("");
        let index = words.next().and_then(|w| w.parse::<usize>().ok());
        let result = match (cmd, index) {
            ("quit", _) => break,
            ("cmd", Some(i)) => {
                let rest: Vec<&str> = words.collect();
                cluster
                    .command(i, &rest)
                    .map(|raw| Some(ironlock_harness::resp_to_json(&raw)))
            }
            ("pids", _) => Ok(Some(pids_json(cluster))),
            ("kill", Some(i)) => cluster.kill(i).map(|_| None),
            ("start", Some(i)) => cluster.start_node(i).map(|_| None),
            ("restart", Some(i)) => cluster.restart(i).map(|_| None),
            ("pause", Some(i)) => cluster.pause(i).map(|_| None),
            ("resume", Some(i)) => cluster.resume(i).map(|_| None),
            ("master", _) => match &watch {
                Some((sentinels, name)) => ironlock_harness::sentinel_master_port(sentinels, name)
                    .and_then(|p| cluster.nodes().iter().position(|n| n.port() == p))
                    .map(|i| Some(i.to_string()))
                    .ok_or_else(|| "no sentinel names one of the nodes as master".to_owned()),
                None => Err("not started with --sentinel".to_owned()),
            },
            ("failover", _) => match &watch {
                Some((sentinels, name)) => {
                    ironlock_harness::sentinel_failover(sentinels, name, cluster)
                        .map(|i| Some(i.to_string()))
                }
                None => Err("not started with --sentinel".to_owned()),
            },
            ("failover-slot", Some(slot)) if formed_cluster => {
                let slot = u16::try_from(slot).unwrap_or(u16::MAX);
                ironlock_harness::cluster_master_of_slot(cluster, slot)
                    .ok_or_else(|| format!("no master serves slot {slot}"))
                    .and_then(|m| ironlock_harness::cluster_failover(cluster, m))
                    .map(|i| Some(i.to_string()))
            }
            ("", _) => continue,
            _ => Err(format!("unknown command {line:?}")),
        };
        let _ = match result {
            Ok(None) => writeln!(out, "ok"),
            Ok(Some(json)) => writeln!(out, "{json}"),
            Err(e) => writeln!(out, "error: {e}"),
        };
        let _ = out.flush();
    }
}

fn usage(msg: &str) -> ! {
    eprintln!(
        "ironlock-harness: {msg}\nusage: ironlock-harness [--nodes N] [-- EXTRA REDIS-SERVER ARGS...]"
    );
    std::process::exit(64);
}
