//! `ironlock run` as a user runs it: spawned processes against real redis-server nodes.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn concurrent_runs_never_overlap() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let dir = temp_dir();
    let log = dir.join("log");
    let key = unique("overlap");
    let script = format!(
        "echo \"enter $IRONLOCK_TOKEN\" >> {0}; sleep 0.15; echo \"leave $IRONLOCK_TOKEN\" >> {0}",
        log.display()
    );
    let children: Vec<_> = (0..6)
        .map(|_| spawn(ironlock(&urls).args(["run", "--ttl", "5", &key, "-c", &script])))
        .collect();
    for child in children {
        let out = finish(child, LIMIT);
        assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    }
    let text = std::fs::read_to_string(&log).expect("log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 12, "six enter/leave pairs expected:\n{text}");
    let mut tokens = std::collections::HashSet::new();
    for pair in lines.chunks(2) {
        let enter = pair[0].strip_prefix("enter ").expect("enter line");
        let leave = pair[1].strip_prefix("leave ").expect("leave line");
        assert_eq!(enter, leave, "interleaved critical sections:\n{text}");
        // 40 random hex characters, then this host and the pid of the `run` that held it.
        let (random, _) = enter.split_at(40);
        assert!(
            random.bytes().all(|b| b.is_ascii_hexdigit()),
            "token: {enter}"
        );
        assert!(ironlock::holder_of(enter).is_some(), "token: {enter}");
        assert!(tokens.insert(enter.to_owned()), "token reused: {enter}");
    }
    for i in 0..3 {
        assert_eq!(get(&cluster, i, &key), None, "key left on node {i}");
    }
}

#[test]
fn lost_lock_terminates_then_kills_the_command() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let dir = temp_dir();

    // A command that exits on SIGTERM: it gets SIGTERM, ironlock exits 75.
    let marks = dir.join("marks");
    let key = unique("lost");
    let script = format!(
        "trap 'echo TERM >> {0}; exit 0' TERM; echo started >> {0}; while :; do sleep 0.05; done",
        marks.display()
    );
    let child = spawn(ironlock(&urls).args([
        "run",
        "--ttl",
        "1",
        "--kill-grace",
        "5",
        &key,
        "-c",
        &script,
    ]));
    wait_for_file(&marks, LIMIT, |t| t.contains("started"));
    for i in 0..3 {
        cluster.command(i, &["DEL", &key]).expect("DEL");
    }
    let out = finish(child, LIMIT);
    assert_eq!(code(&out), 75, "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("lost the lock"), "{}", stderr(&out));
    let text = std::fs::read_to_string(&marks).expect("marks");
    assert!(text.contains("TERM"), "the command got no SIGTERM: {text}");

    // A command that ignores SIGTERM: SIGKILL after --kill-grace.
    let marks = dir.join("marks2");
    let key = unique("lost-kill");
    let script = format!(
        "trap '' TERM; echo started >> {0}; while :; do sleep 0.05; done",
        marks.display()
    );
    let child = spawn(
        ironlock(&urls)
            .args(["run", "--ttl", "1", "--kill-grace", "0.5", "--json", &key])
            .args(["-c", &script]),
    );
    wait_for_file(&marks, LIMIT, |t| t.contains("started"));
    for i in 0..3 {
        cluster.command(i, &["DEL", &key]).expect("DEL");
    }
    let out = finish(child, LIMIT);
    assert_eq!(code(&out), 75, "stderr: {}", stderr(&out));
    let events = json_lines(&stderr(&out));
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    let at = |name: &str| names.iter().position(|n| *n == name);
    assert!(
        at("lost") < at("killed") && at("killed") < at("exited"),
        "{names:?}"
    );
    let exited = &events[at("exited").unwrap()];
    assert_eq!(exited["signal"], 9, "{exited}");
    assert_eq!(exited["lost"], true);
}

#[test]
fn exit_codes() {
    let mut cluster = cluster(3);
    let urls = cluster.urls();
    let key = unique("codes");
    let limit = LIMIT;

    // The command's own code, and 128 + signal when a signal killed it.
    let out = run(
        ironlock(&urls).args(["run", &key, "--", "sh", "-c", "exit 7"]),
        limit,
    );
    assert_eq!(code(&out), 7);
    let out = run(
        ironlock(&urls).args(["run", &key, "-c", "kill -TERM $$"]),
        limit,
    );
    assert_eq!(code(&out), 143);
    let out = run(
        ironlock(&urls).args(["run", &key, "--", "/nonexistent/cmd"]),
        limit,
    );
    assert_eq!(code(&out), 127);
    assert!(stderr(&out).contains("cannot run"), "{}", stderr(&out));

    // flock's habits: no `--` needed, the command's own options pass through unchanged.
    let out = run(
        ironlock(&urls).args(["run", &key, "sh", "-c", "exit 9"]),
        limit,
    );
    assert_eq!(code(&out), 9, "stderr: {}", stderr(&out));

    // Held elsewhere: -E with -n at once, and with -w after the wait.
    let holder = hold(&urls, &[], &key, "exec sleep 20").child;
    // flock's long spellings: --nb for -n, --timeout for -w.
    let out = run(
        ironlock(&urls).args(["run", "--nb", "-E", "41", &key, "true"]),
        limit,
    );
    assert_eq!(code(&out), 41, "stderr: {}", stderr(&out));
    let out = run(
        ironlock(&urls).args(["run", "--timeout", "0.2", "-E", "40", &key, "true"]),
        limit,
    );
    assert_eq!(code(&out), 40, "stderr: {}", stderr(&out));
    let out = run(
        ironlock(&urls).args(["run", "-n", "-E", "42", &key, "--", "true"]),
        limit,
    );
    assert_eq!(code(&out), 42, "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("held elsewhere"), "{}", stderr(&out));
    let t = Instant::now();
    let out = run(
        ironlock(&urls).args(["run", "-w", "0.6", &key, "--", "true"]),
        limit,
    );
    assert_eq!(code(&out), 1, "default -E is 1; stderr: {}", stderr(&out));
    assert!(
        t.elapsed() >= Duration::from_millis(600),
        "{:?}",
        t.elapsed()
    );

    // SIGTERM to ironlock reaches the command (exec'd sleep dies of it): 143, lock released.
    signal(&holder, libc::SIGTERM);
    let out = finish(holder, limit);
    assert_eq!(code(&out), 143, "stderr: {}", stderr(&out));
    for i in 0..3 {
        assert_eq!(get(&cluster, i, &key), None, "key left on node {i}");
    }

    // Usage errors: 64 with a usage message, never clap's 2.
    for bad in [
        vec!["--bogus"],
        vec!["run", &key],
        vec!["run", "-n", "-w", "1", &key, "--", "true"],
        vec!["run", "--ttl=-1", &key, "--", "true"],
        vec!["run", "--ttl", "120", &key, "--", "true"],
        vec!["run", "-E", "300", &key, "--", "true"],
        vec!["status"],
    ] {
        let out = run(ironlock(&urls).args(&bad), limit);
        assert_eq!(code(&out), 64, "{bad:?}: stderr: {}", stderr(&out));
        assert!(!stderr(&out).is_empty(), "{bad:?}: no message");
    }
    let out = run(ironlock(&urls).arg("--bogus"), limit);
    assert!(stderr(&out).contains("Usage:"), "{}", stderr(&out));
    let out = run(ironlock(&urls).arg("--help"), limit);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains("run"), "{}", stdout(&out));
    let out = run(ironlock(&urls).arg("-V"), limit);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).starts_with("ironlock "), "{}", stdout(&out));

    // No quorum at all: 69, with -n, with -w, and without either (no silent endless wait).
    for i in 0..3 {
        cluster.kill(i).expect("kill");
    }
    for extra in [&["-n"][..], &["-w", "0.3"], &[]] {
        let out = run(
            ironlock(&urls)
                .arg("run")
                .args(extra)
                .args([&key, "--", "true"]),
            limit,
        );
        assert_eq!(code(&out), 69, "{extra:?}: stderr: {}", stderr(&out));
        assert!(stderr(&out).contains("not connected"), "{}", stderr(&out));
    }
}

#[test]
fn command_sees_the_lock_in_its_environment() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let key = unique("env");
    let print = "echo R=$IRONLOCK_RESOURCE; echo T=$IRONLOCK_TOKEN; echo F=$IRONLOCK_FENCE; echo V=$IRONLOCK_VALIDITY_MS; echo P=$PPID";
    let field = |text: &str, name: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} missing in {text}"))
            .to_owned()
    };
    let out = run(
        ironlock(&urls).args(["run", "--fencing", "--ttl", "10", &key, "-c", print]),
        LIMIT,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(field(&text, "R"), key);
    let token = field(&text, "T");
    let holder = ironlock::holder_of(&token).expect("the token names its holder");
    assert!(
        token[..40].bytes().all(|b| b.is_ascii_hexdigit()) && token[40..] == format!(".{holder}"),
        "{token}"
    );
    // The command's parent is the `ironlock run` that holds the lock.
    let pid = field(&text, "P");
    assert!(holder.ends_with(&format!(":{pid}")), "{token} vs pid {pid}");
    let fence: u64 = field(&text, "F").parse().expect("numeric fence");
    assert!(fence > 0);
    let validity: u64 = field(&text, "V").parse().expect("numeric validity");
    assert!(validity > 0 && validity < 10_000, "{validity}");

    // Without --fencing no fence, even one inherited from an outer run.
    let out = run(
        ironlock(&urls)
            .env("IRONLOCK_FENCE", "123")
            .args(["run", &key, "-c", print]),
        LIMIT,
    );
    assert_eq!(field(&stdout(&out), "F"), "");
    // A later fencing token is larger.
    let out = run(
        ironlock(&urls).args(["run", "--fencing", &key, "-c", print]),
        LIMIT,
    );
    let later: u64 = field(&stdout(&out), "F").parse().expect("numeric fence");
    assert!(later > fence, "{later} <= {fence}");
}

#[test]
fn json_events_parse_and_waiting_is_silent_off_a_terminal() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let key = unique("json");
    let holder = hold(&urls, &[], &key, "sleep 2.5").child;

    // A blocking waiter with no -v and stderr not a terminal prints nothing of its own.
    let waiter = spawn(ironlock(&urls).args(["run", &key, "--", "echo", "waited"]));
    // A JSON waiter, concurrently.
    let json_waiter =
        spawn(ironlock(&urls).args(["run", "--json", &key, "-c", "echo $IRONLOCK_TOKEN"]));
    let out = finish(waiter, LIMIT);
    assert_eq!(code(&out), 0);
    assert_eq!(stdout(&out), "waited\n");
    assert_eq!(stderr(&out), "", "nothing extra off a terminal");
    assert_eq!(code(&finish(holder, LIMIT)), 0);

    let out = finish(json_waiter, LIMIT);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let events = json_lines(&stderr(&out));
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(names.first(), Some(&"waiting"), "{names:?}");
    assert_eq!(
        names
            .iter()
            .skip_while(|n| **n == "waiting")
            .collect::<Vec<_>>(),
        [&"acquired", &"started", &"exited", &"released"],
        "{names:?}"
    );
    let acquired = &events[names.iter().position(|n| *n == "acquired").unwrap()];
    assert_eq!(acquired["token"].as_str(), Some(stdout(&out).trim()));
    assert_eq!(acquired["resource"].as_str(), Some(key.as_str()));
    assert_eq!(
        acquired["report"]["nodes"].as_array().map(Vec::len),
        Some(3)
    );
    assert!(acquired["validity_ms"].as_f64().is_some_and(|v| v > 0.0));
    let waiting = &events[0];
    assert_eq!(waiting["kind"], "CONTENDED");
    assert!(waiting["report"]["nodes"][0]["vote"].is_string());
    let released = events.last().unwrap();
    assert_eq!(released["held"], true);
    // A release returns once a quorum (2 of 3) deleted the keys; the last one may be pending.
    let deleted_on = released["deleted_on"].as_u64().unwrap_or(0);
    assert!((2..=3).contains(&deleted_on), "{released}");

    // Errors are JSON events too.
    let out = run(
        ironlock(&urls).args(["run", "--json", "--ttl", "999", &key, "--", "true"]),
        LIMIT,
    );
    assert_eq!(code(&out), 64);
    let events = json_lines(&stderr(&out));
    assert_eq!(events[0]["event"], "error");
    assert_eq!(events[0]["kind"], "INVALID_ARGUMENT");
    assert_eq!(events[0]["exit_code"], 64);
}

#[test]
fn a_signal_while_waiting_ends_the_wait() {
    let cluster = cluster(1);
    let urls = cluster.urls();
    let dir = temp_dir();
    let key = unique("interrupt");
    let holder = hold(&urls, &[], &key, "exec sleep 20").child;
    // Its JSON events go to a file, so the test can see it is waiting (handlers installed).
    let events = dir.join("events");
    let waiter = ironlock(&urls)
        .args(["run", "--json", &key, "--", "echo", "must not run"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&events).expect("events file"))
        .spawn()
        .expect("spawn waiter");
    wait_for_file(&events, LIMIT, |t| t.contains("\"waiting\""));
    signal(&waiter, libc::SIGINT);
    let t = Instant::now();
    let out = finish(waiter, LIMIT);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(code(&out), 130);
    assert_eq!(stdout(&out), "");
    let text = std::fs::read_to_string(&events).expect("events");
    let last = json_lines(&text).pop().expect("events");
    assert_eq!(last["event"], "interrupted", "{text}");
    assert_eq!(last["signal"], "SIGINT");
    let token = get(&cluster, 0, &key).expect("the holder still holds the key");
    signal(&holder, libc::SIGTERM);
    assert_eq!(code(&finish(holder, LIMIT)), 143);
    assert_eq!(
        get(&cluster, 0, &key),
        None,
        "holder {token} did not release"
    );
}

#[test]
fn signals_reach_the_command_once() {
    let cluster = cluster(1);
    let urls = cluster.urls();
    let dir = temp_dir();
    let key = unique("forward");
    let marks = dir.join("marks");
    // Counts SIGINT and SIGHUP, exits 9 on SIGTERM.
    let script = format!(
        "trap 'echo INT >> {0}' INT; trap 'echo HUP >> {0}' HUP; trap 'exit 9' TERM; \
         echo started >> {0}; while :; do sleep 0.05; done",
        marks.display()
    );
    let child = spawn(ironlock(&urls).args(["run", &key, "-c", &script]));
    wait_for_file(&marks, LIMIT, |t| t.contains("started"));
    signal(&child, libc::SIGINT);
    wait_for_file(&marks, LIMIT, |t| t.contains("INT"));
    signal(&child, libc::SIGHUP);
    wait_for_file(&marks, LIMIT, |t| t.contains("HUP"));
    signal(&child, libc::SIGTERM);
    let out = finish(child, LIMIT);
    assert_eq!(code(&out), 9, "{}", stderr(&out));
    let text = std::fs::read_to_string(&marks).expect("marks");
    assert_eq!(text, "started\nINT\nHUP\n");
    assert_eq!(get(&cluster, 0, &key), None, "not released");
}

/// Pids of live (not zombie) `sleep` processes whose arguments contain `marker`.
fn live_with_marker(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        let mut args = cmdline.split('\0');
        let is_sleep = args.next().is_some_and(|a| a.ends_with("sleep"));
        if !is_sleep || !args.any(|a| a.contains(marker)) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // The state follows the parenthesised command name: a zombie has exited.
        let state = stat.rsplit(')').next().unwrap_or("").trim_start();
        if !state.starts_with('Z') && !state.is_empty() {
            found.push(pid);
        }
    }
    found
}

/// Fails unless every `sleep` marked `marker` is gone within 5 s (the kernel's SIGKILL is
/// immediate; the margin is for a loaded machine).
fn assert_none_left(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !live_with_marker(marker).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        live_with_marker(marker),
        Vec::<i32>::new(),
        "a command outlived its killed supervisor"
    );
}

#[test]
fn a_killed_supervisor_takes_its_command_with_it() {
    // `kill -9` of `ironlock run` (an operator, a container runtime, the OOM killer) must not
    // leave the command running without anybody holding the lock for it.
    let cluster = cluster(3);
    let urls = cluster.urls();
    let dir = temp_dir();
    let key = unique("orphan");
    // A unique sleep duration marks the commands of this test in /proc.
    let marker = format!("29.{}", std::process::id());
    let started = dir.join("started");
    let script = format!("echo $$ >> {}; exec sleep {marker}", started.display());
    let holder = spawn(ironlock(&urls).args(["run", "-q", "--ttl", "2", &key, "-c", &script]));
    wait_for_file(&started, LIMIT, |t| t.ends_with('\n'));
    // The shell wrote its pid and then execs `sleep`: wait for the exec.
    let deadline = Instant::now() + LIMIT;
    while live_with_marker(&marker).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(live_with_marker(&marker).len(), 1, "the command runs");
    let mut holder = holder;
    signal(&holder, libc::SIGKILL);
    wait_status(&mut holder, LIMIT);
    assert_none_left(&marker);

    // Under load, and at every moment of the start-up (before, during and after the fork): eight
    // supervisors killed at staggered times leave no command behind.
    let marker = format!("28.{}", std::process::id());
    let burners: Vec<_> = (0..2)
        .map(|_| {
            std::process::Command::new("sh")
                .args(["-c", "i=0; while [ $i -lt 3000000 ]; do i=$((i+1)); done"])
                .spawn()
                .expect("spawn load")
        })
        .collect();
    let mut victims = Vec::new();
    for i in 0..8u64 {
        let key = unique("orphan-race");
        let script = format!("exec sleep {marker}");
        let child = spawn(ironlock(&urls).args(["run", "-q", "--ttl", "2", &key, "-c", &script]));
        victims.push((child, Duration::from_millis(40 * i)));
    }
    let t0 = Instant::now();
    for (child, after) in &mut victims {
        if let Some(left) = after.checked_sub(t0.elapsed()) {
            std::thread::sleep(left);
        }
        signal(child, libc::SIGKILL);
    }
    for (child, _) in &mut victims {
        wait_status(child, LIMIT);
    }
    for mut b in burners {
        let _ = b.kill();
        let _ = b.wait();
    }
    assert_none_left(&marker);
}

#[test]
fn min_hold_keeps_the_lock_after_a_short_command() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let key = unique("min-hold");
    let started = Instant::now();
    let out = finish(
        spawn(ironlock(&urls).args(["run", "--ttl", "5", "--min-hold", "1.5", &key, "true"])),
        LIMIT,
    );
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    // The command is done, the lock is not free yet: a second run is refused (-n, exit 1).
    let again = finish(
        spawn(ironlock(&urls).args(["run", "-n", &key, "true"])),
        LIMIT,
    );
    assert_eq!(code(&again), 1, "stderr: {}", stderr(&again));
    assert!(
        started.elapsed() < Duration::from_millis(1400),
        "too slow to tell"
    );
    // Once the hold is over it runs.
    let waited = finish(
        spawn(ironlock(&urls).args(["run", "--wait", "5", &key, "true"])),
        LIMIT,
    );
    assert_eq!(code(&waited), 0, "stderr: {}", stderr(&waited));
    assert!(started.elapsed() >= Duration::from_millis(1450));
    for (flags, needle) in [
        (
            vec!["--ttl", "1", "--min-hold", "2"],
            "--min-hold: must not exceed the --ttl",
        ),
        (
            vec!["--slots", "2", "--min-hold", "1"],
            "--min-hold: applies to locks",
        ),
        (vec!["--min-hold", "nan"], "--min-hold"),
    ] {
        let mut cmd = ironlock(&urls);
        cmd.arg("run").args(&flags).args([key.as_str(), "true"]);
        let bad = finish(spawn(&mut cmd), LIMIT);
        assert_eq!(code(&bad), 64, "{flags:?}: {}", stderr(&bad));
        assert!(stderr(&bad).contains(needle), "{flags:?}: {}", stderr(&bad));
    }
}

#[test]
fn readers_run_together_and_a_writer_runs_alone() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let dir = temp_dir();
    let log = dir.join("log");
    let key = unique("rw");
    // Each command logs its start and end; readers hold for 0.6 s, the writer for 0.2 s.
    let entry = |who: &str, secs: &str| {
        format!(
            "echo \"start {who}\" >> {0}; sleep {secs}; echo \"end {who}\" >> {0}",
            log.display()
        )
    };
    let readers: Vec<_> = (0..3)
        .map(|i| {
            let script = entry(&format!("r{i}"), "0.6");
            spawn(ironlock(&urls).args(["run", "--read", "--wait", "10", &key, "-c", &script]))
        })
        .collect();
    wait_for_file(&log, LIMIT, |t| t.lines().count() >= 3);
    let script = entry("w", "0.2");
    let writer =
        spawn(ironlock(&urls).args(["run", "--write", "--wait", "10", &key, "-c", &script]));
    for child in readers {
        let out = finish(child, LIMIT);
        assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    }
    let out = finish(writer, LIMIT);
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let text = std::fs::read_to_string(&log).expect("log");
    let lines: Vec<&str> = text.lines().collect();
    // The three readers all started before any ended; the writer started after the last ended.
    let first_end = lines.iter().position(|l| l.starts_with("end ")).unwrap();
    assert_eq!(first_end, 3, "readers did not overlap:\n{text}");
    let w = lines
        .iter()
        .position(|l| *l == "start w")
        .expect("writer ran");
    assert_eq!(w, 6, "the writer overlapped a reader:\n{text}");
    // A plain run of the name is refused while a reader holds; bad combinations are refused.
    let holder = spawn(ironlock(&urls).args(["run", "--read", &key, "sleep", "2"]));
    wait_for(|| get(&cluster, 0, &key).is_some());
    let plain = finish(
        spawn(ironlock(&urls).args(["run", "-n", &key, "true"])),
        LIMIT,
    );
    assert_eq!(code(&plain), 1, "stderr: {}", stderr(&plain));
    // `status` shows the reader a quorum holds, not a token under the key.
    let status = finish(
        spawn(ironlock(&urls).args(["status", "--json", &key])),
        LIMIT,
    );
    let v: serde_json::Value = serde_json::from_str(stdout(&status).trim()).expect("json");
    assert_eq!(v["readers"].as_array().map(Vec::len), Some(1), "{v}");
    assert!(v["holder"].is_null(), "{v}");
    assert_eq!(v["nodes"][0]["readers"][0]["token"], v["readers"][0], "{v}");
    let out = finish(holder, LIMIT);
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    for flags in [vec!["--read", "--write"], vec!["--read", "--slots", "2"]] {
        let mut cmd = ironlock(&urls);
        cmd.arg("run").args(&flags).args([key.as_str(), "true"]);
        let bad = finish(spawn(&mut cmd), LIMIT);
        assert_eq!(code(&bad), 64, "{flags:?}: {}", stderr(&bad));
        assert!(
            stderr(&bad).contains("cannot be used with"),
            "{flags:?}: {}",
            stderr(&bad)
        );
    }
    // Readers and writers may wait in line.
    for side in ["--read", "--write"] {
        let fair = finish(
            spawn(ironlock(&urls).args(["run", side, "--fair", "--wait", "5", &key, "true"])),
            LIMIT,
        );
        assert_eq!(code(&fair), 0, "{side} --fair: {}", stderr(&fair));
    }
    let bad = finish(
        spawn(ironlock(&urls).args(["run", "--write", "--min-hold", "1", &key, "true"])),
        LIMIT,
    );
    assert_eq!(code(&bad), 64, "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("--min-hold: applies to locks, not to read-write locks"),
        "{}",
        stderr(&bad)
    );
    for i in 0..3 {
        assert_eq!(get(&cluster, i, &key), None, "key left on node {i}");
    }
}

/// Polls `ready` every 20 ms for up to 10 s.
fn wait_for(ready: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !ready() {
        assert!(Instant::now() < until, "timed out waiting");
        std::thread::sleep(Duration::from_millis(20));
    }
}
