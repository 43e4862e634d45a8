//! `ironlock`: a distributed flock(1) over the ironlock core. The user guide's command-line pages
//! (docs/src/start/cli.md, docs/src/reference/cli.md) give the options, the output formats and
//! the exit codes.

mod args;
mod check;
mod exit;
mod leader;
mod output;
mod run;
mod status;

use std::process::ExitCode;

use clap::Parser;
use ironlock::{Config, Error, duration_from_secs_f64};

use crate::args::{Cli, Command, Global};
use crate::output::Output;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap exits with 2 on usage errors; sysexits (and this tool) say 64.
            let code = if e.use_stderr() { exit::USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let out = Output::new(cli.global.quiet, cli.global.verbose, cli.global.json);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            out.error(&format!("cannot start the async runtime: {e}"));
            return ExitCode::from(exit::INTERNAL);
        }
    };
    let code = runtime.block_on(dispatch(cli, &out));
    // Reconnection and pub/sub tasks have nothing left to do; do not wait for them.
    runtime.shutdown_background();
    ExitCode::from(code)
}

async fn dispatch(cli: Cli, out: &Output) -> u8 {
    let config = match config(&cli.global, out) {
        Ok(c) => c,
        Err(e) => return fail(out, &e, 1),
    };
    match cli.command {
        Command::Run(args) => run::run(args, config, out).await,
        Command::Status {
            resource,
            prometheus,
        } => {
            let key_prefix = &cli.global.key_prefix;
            if prometheus {
                status::prometheus(&resource, key_prefix, config, out).await
            } else {
                status::status(&resource, key_prefix, config, out).await
            }
        }
        Command::Release { resource, token } => {
            status::release(&resource, &token, config, out).await
        }
        Command::Elect(args) => run::run(args.into(), config, out).await,
        Command::Leader { name, watch } => leader::leader(&name, watch, config, out).await,
        Command::Check => match settings(&cli.global) {
            Ok(settings) => check::check(config, settings, out).await,
            Err(e) => fail(out, &e, 1),
        },
    }
}

/// The manager settings from the global options and the environment.
fn config(global: &Global, out: &Output) -> Result<Config, Error> {
    // A password in an argument is visible to every local user (ps, /proc): say so, as
    // redis-cli does for -a.
    if global.nodes.iter().any(|u| ironlock::redact_url(u) != *u) {
        out.error(
            "warning: a password given with --node is visible to other local users (ps); \
             put the URLs in IRONLOCK_NODES or in a --node-file readable only by you",
        );
    }
    let mut nodes = global.nodes.clone();
    if let Some(file) = &global.node_file {
        nodes.extend(args::read_node_file(file).map_err(invalid)?);
    }
    if nodes.is_empty() {
        nodes = args::default_nodes(
            std::env::var("IRONLOCK_NODES").ok(),
            std::env::var("REDIS_URL").ok(),
        )
        .map_err(invalid)?;
    }
    let config = settings(global)?(nodes);
    // Every problem `check` finds is in the arguments (it connects to nothing), an unusable
    // scheme included: a usage error (64), like a URL without a scheme, not an outage (69).
    config
        .check()
        .map_err(|e| invalid(e.message().to_owned()))?;
    Ok(config)
}

/// An `InvalidArgument` error from a message.
fn invalid(message: String) -> Error {
    Error::new(ironlock::ErrorKind::InvalidArgument, message)
}

/// A configuration for any node list with the command line's settings.
fn settings(global: &Global) -> Result<impl Fn(Vec<String>) -> Config + use<>, Error> {
    let max_ttl = duration_from_secs_f64("--max-ttl", global.max_ttl)?;
    let node_timeout = duration_from_secs_f64("--node-timeout", global.node_timeout)?;
    let connect_timeout = duration_from_secs_f64("--connect-timeout", global.connect_timeout)?;
    let prefix = global.key_prefix.clone();
    let quarantine = !global.no_restart_quarantine;
    let reseat = !global.no_reseat;
    let replica_acks = global.replica_acks;
    let pem = |flag: &str, path: &Option<std::path::PathBuf>| -> Result<Option<Vec<u8>>, Error> {
        path.as_ref()
            .map(|p| std::fs::read(p).map_err(|e| invalid(format!("{flag} {}: {e}", p.display()))))
            .transpose()
    };
    let ca = pem("--cacert", &global.cacert)?;
    let cert = pem("--cert", &global.cert)?;
    let key = pem("--key", &global.key)?;
    let sni = global.sni.clone();
    Ok(move |nodes| {
        Config::new(nodes)
            .key_prefix(prefix.clone())
            .max_ttl(max_ttl)
            .node_timeout(node_timeout)
            .connect_timeout(connect_timeout)
            .restart_quarantine(quarantine)
            .reseat(reseat)
            .replica_acks(replica_acks)
            .tls_ca_cert(ca.clone())
            .tls_client_cert(cert.clone())
            .tls_client_key(key.clone())
            .tls_server_name(sni.clone())
    })
}

/// The core's setting names in its messages, as the command line spells them ("max_ttl" →
/// "--max-ttl"): every setting the command line has an option for, and `run`'s ttl (first, so
/// that the `--ttl` it becomes is not respelled again, and `max_ttl` is one word).
const FLAG_WORDS: [(&str, &str); 12] = [
    ("ttl", "--ttl"),
    ("tls_ca_cert", "--cacert"),
    ("tls_client_cert", "--cert"),
    ("tls_client_key", "--key"),
    ("tls_server_name", "--sni"),
    ("restart_quarantine", "--no-restart-quarantine"),
    ("max_ttl", "--max-ttl"),
    ("node_timeout", "--node-timeout"),
    ("connect_timeout", "--connect-timeout"),
    ("key_prefix", "--key-prefix"),
    ("replica_acks", "--replica-acks"),
    ("min_hold", "--min-hold"),
];

/// Prints `err` (human text, or a JSON `error` event) and returns its exit code.
fn fail(out: &Output, err: &Error, conflict: u8) -> u8 {
    fail_after(out, err, conflict, "")
}

/// As [`fail`], with `context` in front of the human message.
fn fail_after(out: &Output, err: &Error, conflict: u8, context: &str) -> u8 {
    let code = exit::for_kind(err.kind(), conflict);
    let err = &err.clone().respelled(&FLAG_WORDS);
    // `run -E 0`: held elsewhere is an expected outcome, not an error. As flock(1), skip
    // silently (cron mails whatever is printed); `-v` still says why.
    let skipped = err.kind() == ironlock::ErrorKind::Contended && code == 0;
    let message = format!("{context}{}", err.message());
    if skipped {
        out.info(&message);
    } else {
        out.error(&message);
    }
    if let Some(report) = err.report() {
        if err.kind() == ironlock::ErrorKind::Contended {
            out.info(&format!("{report}"));
        } else {
            // Why no quorum: each node that did not vote for, in one line each.
            for n in report
                .nodes
                .iter()
                .filter(|n| n.vote != ironlock::Vote::For)
            {
                let why = match (n.vote, &n.error) {
                    (ironlock::Vote::NotEligible, Some(e)) => {
                        format!("not eligible: {e} (see `ironlock check`)")
                    }
                    (ironlock::Vote::NotEligible, None) => {
                        "not eligible: restarted less than --max-ttl ago (see `ironlock check`)"
                            .to_owned()
                    }
                    (_, Some(e)) => format!("{}: {e}", n.vote.as_str()),
                    (v, None) => v.as_str().to_owned(),
                };
                out.error(&format!("  {}: {why}", n.url));
            }
        }
    }
    out.event("error", output::error_json(err, code));
    code
}
