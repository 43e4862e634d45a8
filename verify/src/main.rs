//! `ironlock-verify`: checks the protocol model at CI's bounds (or `--deep`), then every mutant,
//! printing one line per run. Exit code 1 if the model fails or a mutant is missed.

mod check;
mod model;

use model::{Mutant, Params};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let deep = args.iter().any(|a| a == "--deep");
    let trace = args.iter().any(|a| a == "--trace");
    let only: Option<&str> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str);
    if let Some(b) = args
        .iter()
        .position(|a| a == "--budget")
        .and_then(|i| args.get(i + 1))
        .and_then(|b| b.parse::<f64>().ok())
        .filter(|b| *b > 0.0)
    {
        let _ = check::BUDGET.set(std::time::Duration::from_secs_f64(b));
    }
    let threads: usize = std::env::var("VERIFY_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    let mut configs = check::configs(deep);
    if let Some(h) = std::env::var("VERIFY_HORIZON")
        .ok()
        .and_then(|h| h.parse().ok())
    {
        for p in &mut configs {
            p.max_time = h;
        }
    }
    let mut bad = 0;
    let (mut total_states, mut total_secs) = (0usize, 0f64);
    let bounds = if deep { "deep" } else { "ci" };
    for p in &configs {
        if only.is_some_and(|o| o != p.name && o != "model") {
            continue;
        }
        let m = model::Redlock::new(p.clone());
        let o = check::run(p.clone(), threads);
        total_states += o.states;
        total_secs += o.took.as_secs_f64();
        let verdict = match &o.failure {
            None if o.cut => "no counterexample within the budget (not exhaustive)".to_owned(),
            None => "pass".to_owned(),
            Some((prop, path)) if path.is_empty() => {
                bad += 1;
                format!("FAIL (never reached: {prop})")
            }
            Some((prop, path)) => {
                bad += 1;
                format!("FAIL ({prop}; counterexample of {} steps)", path.len())
            }
        };
        let qt = if p.fair || !p.roles.is_empty() {
            format!(" queue_timeout={}", p.queue_timeout)
        } else {
            String::new()
        };
        let clients = if p.roles.is_empty() {
            p.clients.to_string()
        } else {
            let roles: Vec<String> = p.roles.iter().map(|r| format!("{r:?}")).collect();
            roles.join(",").to_lowercase()
        };
        let reached: String = o
            .reached
            .iter()
            .map(|(prop, len)| {
                let what = prop.split(':').next().unwrap_or(prop);
                format!("; {what} reached in {len} steps")
            })
            .collect();
        println!(
            "model {:<13} N={} clients={} limit={} Q={} ttl={} drift={} quarantine={}{qt} horizon={} ({bounds}): {verdict}; {} states ({} distinct) in {:.1} s{reached}",
            o.config,
            p.nodes,
            clients,
            p.limit,
            m.q,
            p.ttl,
            m.drift,
            m.quarantine,
            p.max_time,
            o.states,
            o.unique,
            o.took.as_secs_f64()
        );
        if let (true, Some((_, path))) = (trace, &o.failure) {
            print_path(path);
        }
    }
    for m in Mutant::ALL {
        if only.is_some_and(|o| o != m.name() && o != "mutants") {
            continue;
        }
        let mut caught = None;
        let mut explored = 0usize;
        let mut secs = 0f64;
        for name in check::targets(m) {
            let p = configs.iter().find(|p| p.name == *name).expect("config");
            let o = check::run(
                Params {
                    mutant: Some(m),
                    ..p.clone()
                },
                threads,
            );
            explored += o.states;
            secs += o.took.as_secs_f64();
            // Caught: a counterexample (an unreached situation proves nothing about the mutant).
            if let Some((prop, path)) = o.failure.filter(|(_, path)| !path.is_empty()) {
                caught = Some((o.config, prop, path));
                break;
            }
        }
        total_states += explored;
        total_secs += secs;
        match caught {
            Some((config, prop, path)) => {
                println!(
                    "mutant {:<28} caught in {config}: {} steps, {explored} states, {secs:.1} s ({})",
                    m.name(),
                    path.len(),
                    prop.split(':').next().unwrap_or(prop)
                );
                if trace {
                    print_path(&path);
                }
            }
            None => {
                bad += 1;
                println!(
                    "mutant {:<28} MISSED: no counterexample in {explored} states ({secs:.1} s)",
                    m.name()
                );
            }
        }
    }
    println!("verify ({bounds} bounds): {total_states} states explored in {total_secs:.1} s");
    std::process::exit(i32::from(bad > 0));
}

fn print_path(path: &[String]) {
    for (i, step) in path.iter().enumerate() {
        println!("    {:>2}. {step}", i + 1);
    }
}
