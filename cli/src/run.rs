//! `ironlock run`: acquire, run the command while the lock is kept extended, stop the command if
//! the lock is lost, release on every exit path, and exit with the command's status.

use std::time::{Duration, Instant};

use ironlock::{AcquireOptions, Config, Error, ErrorKind, Lock, LockManager, Vote};
use serde_json::json;
use tokio::process::{Child, Command};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::args::RunArgs;
use crate::exit;
use crate::output::{self, Output, millis, secs};

/// Each acquire call waits at most this long, so the progress line gets fresh votes and a
/// blocking wait is a bounded loop of bounded calls.
const CHUNK: Duration = Duration::from_secs(1);
/// A wait shorter than this draws no progress line.
const PROGRESS_AFTER: Duration = Duration::from_millis(500);
/// How often the progress line's elapsed time is redrawn.
const TICK: Duration = Duration::from_millis(200);
/// Time given to the core's background release of an acquire interrupted by a signal (release
/// waits at most one node timeout, 50 ms by default).
const CANCEL_GRACE: Duration = Duration::from_millis(200);

/// SIGINT, SIGTERM and SIGHUP, caught for the whole run: while waiting they end the wait, while
/// the command runs they are forwarded to it.
pub(crate) struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    pub(crate) fn new() -> std::io::Result<Self> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next caught signal's number.
    pub(crate) async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}

pub(crate) fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        libc::SIGKILL => "SIGKILL",
        _ => "signal",
    }
}

/// Why no lock was taken.
enum NotAcquired {
    /// The error of the last round, and how long we had waited.
    Failed(Error, Duration),
    Interrupted(i32),
}

/// `<host>:<pid>` of this process, as the lock's token names its holder: the host name cut to
/// what a token label may hold (printable ASCII, no space; `_` stands for anything else).
fn holder_label() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    let host: String = host
        .chars()
        .take(ironlock::HOLDER_MAX_LEN - 12)
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .collect();
    format!("{host}:{}", std::process::id())
}

/// `--min-hold` as a duration (the core checks it against the ttl and `--slots`).
fn min_hold(args: &RunArgs) -> Result<Option<Duration>, Error> {
    args.min_hold
        .map(|secs| ironlock::duration_from_secs_f64("--min-hold", secs))
        .transpose()
}

pub async fn run(args: RunArgs, config: Config, out: &Output) -> u8 {
    let conflict = args.conflict_exit_code;
    let fail = |e: &Error| crate::fail(out, e, conflict);
    let durations = (|| {
        Ok::<_, Error>((
            ironlock::duration_from_secs_f64("--ttl", args.ttl)?,
            args.wait
                .map(|w| ironlock::duration_from_secs_f64("--wait", w))
                .transpose()?,
            ironlock::duration_from_secs_f64("--kill-grace", args.kill_grace)?,
            min_hold(&args)?,
        ))
    })();
    let (ttl, wait, grace, min_hold) = match durations {
        Ok(d) => d,
        Err(e) => return fail(&e),
    };
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            return fail(&Error::new(
                ErrorKind::Internal,
                format!("cannot install signal handlers: {e}"),
            ));
        }
    };
    let manager = match LockManager::new(config).await {
        Ok(m) => m,
        Err(e) => return fail(&e),
    };
    let started = Instant::now();
    let lock = match acquire(&manager, &args, (ttl, min_hold), wait, &mut signals, out).await {
        Ok(lock) => lock,
        Err(NotAcquired::Failed(e, waited)) => {
            let context = if args.nonblock || waited < Duration::from_millis(100) {
                String::new()
            } else {
                format!("gave up after {}: ", secs(waited))
            };
            return crate::fail_after(out, &e, conflict, &context);
        }
        Err(NotAcquired::Interrupted(sig)) => {
            out.error(&format!(
                "{} while waiting for {:?}; nothing was run",
                signal_name(sig),
                args.resource
            ));
            out.event("interrupted", json!({"signal": signal_name(sig)}));
            return (128 + sig) as u8;
        }
    };
    let report = lock.report();
    if let (Some(value), Some(term)) = (&args.elect, lock.fence()) {
        out.info(&format!(
            "leading {:?} as {value:?} after {}: term {term}, token {}, validity {}",
            args.resource,
            secs(started.elapsed()),
            lock.token(),
            secs(lock.validity()),
        ));
    }
    out.info(&format!(
        "acquired {:?} in {} round(s) after {}: token {}, validity {}{} [{report}]",
        args.resource,
        report.rounds,
        secs(started.elapsed()),
        lock.token(),
        secs(lock.validity()),
        lock.fence()
            .map(|f| format!(", fence {f}"))
            .unwrap_or_default(),
    ));
    out.event(
        "acquired",
        json!({
            "resource": args.resource,
            "token": lock.token(),
            "fence": lock.fence(),
            "validity_ms": millis(lock.validity()),
            "expiration_unix_ms": lock.expiration_unix_ms(),
            "waited_ms": millis(started.elapsed()),
            "report": output::report_json(&report),
        }),
    );

    let code = supervise(&args, &lock, grace, &mut signals, out).await;

    let released = lock.release().await;
    // The release returned at a quorum; let the last deletes reach every node before exiting.
    manager.flush().await;
    out.event(
        "released",
        json!({
            "held": released.held,
            "deleted_on": released.deleted_on,
            "report": output::report_json(&released.report),
        }),
    );
    if released.held {
        out.info(&format!(
            "released {:?} on {} of {} nodes",
            args.resource,
            released.deleted_on,
            released.report.nodes.len()
        ));
    } else if code != exit::LOST {
        out.error(&format!(
            "warning: {:?} was no longer held by a quorum at release ({} of {} nodes still had our token) [{}]",
            args.resource,
            released.deleted_on,
            released.report.nodes.len(),
            released.report
        ));
    }
    code
}

/// Acquires in bounded chunks until granted, the wait runs out, or a signal arrives.
async fn acquire(
    manager: &LockManager,
    args: &RunArgs,
    (ttl, min_hold): (Duration, Option<Duration>),
    wait: Option<Duration>,
    signals: &mut Signals,
    out: &Output,
) -> Result<Lock, NotAcquired> {
    let resources = [args.resource.as_str()];
    // --slots K: a permit of the semaphore RESOURCE instead of the lock.
    let semaphore = args
        .slots
        .map(|k| manager.semaphore(args.resource.as_str(), k));
    // --read / --write: a side of the read-write lock RESOURCE.
    let rw = (args.read || args.write).then(|| manager.rw_lock(args.resource.as_str()));
    // `ironlock elect`: a campaign in the election RESOURCE.
    let election = args
        .elect
        .as_ref()
        .map(|value| (manager.election(args.resource.as_str()), value.as_str()));
    let started = Instant::now();
    // A wait too long to represent is a wait without a deadline.
    let deadline = wait.and_then(|w| started.checked_add(w));
    let mut last_votes: Option<String> = None;
    let mut ticker = tokio::time::interval(TICK);
    let mut first = true;
    // Said once, even off a terminal: a wait for nodes in quarantine can last a minute, and a
    // cron job's log should say why it waited.
    let mut told_quarantine = false;
    loop {
        // Without --wait the first attempt is one round, so that a node list where no node
        // answers at all (a wrong --node) is reported at once, not after a chunk of retries.
        let single = args.nonblock || (first && deadline.is_none());
        first = false;
        let mut options = if single {
            AcquireOptions::try_once()
        } else {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            // A fair waiter keeps its place in line for the whole wait, and a writer its mark
            // (which holds back new readers): one attempt, not chunks.
            let chunk = if args.fair || args.write {
                Duration::MAX
            } else {
                CHUNK
            };
            AcquireOptions::wait(left.map_or(chunk, |l| l.min(chunk)))
        }
        .fencing(args.fencing);
        if args.fair {
            options = options.fair(true);
        }
        if !args.no_holder {
            options.holder = Some(holder_label());
        }
        options.min_hold = min_hold;
        // Boxed so that it can be dropped (cancelled) before the pause below.
        let mut attempt = match (&semaphore, &rw) {
            _ if election.is_some() => {
                let (election, value) = election.as_ref().expect("an election");
                let wait = options.wait;
                Box::pin(async move {
                    // The supervision below keeps the leadership's lock alive (the lock ends a
                    // margin before its validity, as a leadership does): the campaign's own
                    // extension stops when the leadership is dropped.
                    let leadership = election.campaign_with(value, ttl, wait).await?;
                    Ok(leadership.lock().clone())
                })
                    as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send + '_>>
            }
            (Some(sem), _) => Box::pin(sem.acquire_with(ttl, options))
                as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send + '_>>,
            (None, Some(rw)) if args.write => Box::pin(rw.write_with(ttl, options)),
            (None, Some(rw)) => Box::pin(rw.read_with(ttl, options)),
            (None, None) => Box::pin(manager.acquire_with(&resources, ttl, options)),
        };
        let result = loop {
            tokio::select! {
                r = &mut attempt => break r,
                _ = ticker.tick() => {
                    let waited = started.elapsed();
                    if waited >= PROGRESS_AFTER {
                        let votes = last_votes.as_deref().map_or(String::new(), |v| {
                            let quorum = semaphore
                                .as_ref()
                                .map_or(manager.quorum(), |s| s.quorum());
                            format!(" (last round: {v}; quorum {quorum})")
                        });
                        out.progress(&format!(
                            "ironlock: waiting for {:?}: {}{votes}",
                            args.resource,
                            secs(waited),
                        ));
                    }
                }
                sig = signals.recv() => {
                    // Dropping the attempt makes the core release whatever it set, in the
                    // background; give that a moment before the process exits.
                    drop(attempt);
                    tokio::time::sleep(CANCEL_GRACE).await;
                    out.clear_progress();
                    return Err(NotAcquired::Interrupted(sig));
                }
            }
        };
        let err = match result {
            Ok(lock) => {
                out.clear_progress();
                return Ok(lock);
            }
            Err(e) => e,
        };
        let retryable = matches!(err.kind(), ErrorKind::Contended | ErrorKind::Unavailable);
        let timed_out = args.nonblock || deadline.is_some_and(|d| Instant::now() >= d);
        // Waiting without a deadline is for a busy lock or a quorum that is coming back; when not
        // one node answers at all, waiting forever in silence would only hide a wrong --node.
        let nobody_answered = err.report().is_some_and(|r| {
            r.nodes
                .iter()
                .all(|n| matches!(n.vote, Vote::Error | Vote::Timeout))
        });
        let hopeless =
            deadline.is_none() && err.kind() == ErrorKind::Unavailable && nobody_answered;
        if !retryable || timed_out || hopeless {
            out.clear_progress();
            return Err(NotAcquired::Failed(err, started.elapsed()));
        }
        let votes = err
            .report()
            .map(output::votes_summary)
            .unwrap_or_else(|| "no votes".to_owned());
        if last_votes.is_none() {
            out.info(&format!("{:?} is busy ({votes}); waiting", args.resource));
        }
        let quarantined = err
            .report()
            .is_some_and(|r| r.nodes.iter().any(|n| n.vote == Vote::NotEligible));
        if quarantined && !told_quarantine {
            told_quarantine = true;
            let err = err.clone().respelled(&crate::FLAG_WORDS);
            out.error(&format!(
                "waiting for {:?}: no quorum counts yet: {}",
                args.resource,
                err.message()
            ));
        }
        out.event(
            "waiting",
            json!({
                "resource": args.resource,
                "elapsed_ms": millis(started.elapsed()),
                "kind": err.kind().code(),
                "report": err.report().map(output::report_json),
            }),
        );
        last_votes = Some(votes);
    }
}

/// Runs the command while the lock is kept alive; returns the exit code of `ironlock run`.
async fn supervise(
    args: &RunArgs,
    lock: &Lock,
    grace: Duration,
    signals: &mut Signals,
    out: &Output,
) -> u8 {
    // Extended from the grant on, so a slow start cannot eat the validity.
    let keeper = lock.keep_alive();
    let mut child = match spawn(args, lock) {
        Ok(c) => c,
        Err((code, message)) => {
            out.error(&message);
            out.event(
                "error",
                json!({"kind": "SPAWN", "message": message, "exit_code": code}),
            );
            return code;
        }
    };
    let pid = child.id().map(|p| p as i32);
    out.event("started", json!({"pid": pid}));
    let mut lost = false;
    let mut kill_at: Option<tokio::time::Instant> = None;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = lock.lost(), if !lost => {
                lost = true;
                out.error(&format!(
                    "lost the lock on {:?} while the command ran; sending SIGTERM{}",
                    args.resource,
                    if grace.is_zero() { String::new() } else {
                        format!(", SIGKILL in {}", secs(grace))
                    },
                ));
                out.event("lost", json!({
                    "resource": args.resource,
                    "report": output::report_json(&lock.report()),
                }));
                send(pid, libc::SIGTERM);
                // A grace too long to represent never escalates to SIGKILL.
                kill_at = tokio::time::Instant::now().checked_add(grace);
            }
            _ = sleep_until(kill_at) => {
                kill_at = None;
                out.event("killed", json!({"signal": "SIGKILL"}));
                let _ = child.start_kill();
            }
            sig = signals.recv() => {
                let forward = !(sig == libc::SIGINT && terminal_foreground());
                out.info(&format!(
                    "{} {}",
                    signal_name(sig),
                    if forward { "forwarded to the command" } else { "from the terminal" },
                ));
                out.event("signal", json!({
                    "signal": signal_name(sig),
                    "forwarded_to": if forward { pid } else { None },
                }));
                if forward {
                    send(pid, sig);
                }
            }
        }
    };
    keeper.stop();
    let (code, exit_code, signal) = match status {
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            (exit::for_child(s.code(), s.signal()), s.code(), s.signal())
        }
        Err(e) => {
            out.error(&format!("cannot wait for the command: {e}"));
            (exit::INTERNAL, None, None)
        }
    };
    let code = if lost { exit::LOST } else { code };
    out.event(
        "exited",
        json!({"code": exit_code, "signal": signal, "lost": lost, "exit_code": code}),
    );
    code
}

/// Resolves at `at`, or never when there is nothing scheduled.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// True when this process's group is the foreground group of the terminal on stdin or stderr.
/// A SIGINT then came from Ctrl-C, which the terminal sent to the whole group, the command
/// included: forwarding it again would deliver it twice (a second SIGINT cuts short the
/// clean-up of programs such as Python's).
fn terminal_foreground() -> bool {
    // SAFETY: getpgrp and tcgetpgrp only read process state; invalid fds return -1.
    unsafe {
        let group = libc::getpgrp();
        [libc::STDIN_FILENO, libc::STDERR_FILENO]
            .iter()
            .any(|&fd| libc::tcgetpgrp(fd) == group)
    }
}

/// Sends `sig` to the child (still unreaped, so its pid cannot have been reused).
fn send(pid: Option<i32>, sig: i32) {
    if let Some(pid) = pid {
        // SAFETY: kill(2) has no memory effects; the pid is our own unreaped child.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Starts the command with the lock's details in its environment.
fn spawn(args: &RunArgs, lock: &Lock) -> Result<Child, (u8, String)> {
    let (mut cmd, shown) = match &args.shell {
        Some(script) => {
            let mut c = Command::new("/bin/sh");
            c.arg("-c").arg(script);
            (c, "/bin/sh".to_owned())
        }
        None => {
            let (program, rest) = args
                .command
                .split_first()
                .ok_or((exit::USAGE, "no command given".to_owned()))?;
            let mut c = Command::new(program);
            c.args(rest);
            (c, program.to_string_lossy().into_owned())
        }
    };
    cmd.env("IRONLOCK_RESOURCE", &args.resource)
        .env("IRONLOCK_TOKEN", lock.token())
        .env(
            "IRONLOCK_VALIDITY_MS",
            lock.validity().as_millis().to_string(),
        );
    match lock.fence() {
        Some(f) => cmd.env("IRONLOCK_FENCE", f.to_string()),
        // Not inherited from an outer `ironlock run`: it would name someone else's lock.
        None => cmd.env_remove("IRONLOCK_FENCE"),
    };
    // A leader's term is its fence.
    match (&args.elect, lock.fence()) {
        (Some(_), Some(term)) => cmd.env("IRONLOCK_TERM", term.to_string()),
        _ => cmd.env_remove("IRONLOCK_TERM"),
    };
    die_with_supervisor(cmd.as_std_mut());
    cmd.spawn().map_err(|e| {
        let code = match e.kind() {
            std::io::ErrorKind::NotFound => exit::NOT_FOUND,
            _ => exit::NOT_EXECUTABLE,
        };
        (code, format!("cannot run {shown:?}: {e}"))
    })
}

/// Makes the command die (SIGKILL) when this process dies, by any signal, SIGKILL and the OOM
/// killer included: a command left running after its supervisor died would run without the lock
/// (nobody extends it), and a second `ironlock run` would start a second instance beside it.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child ends; the command is spawned
/// from the thread that runs `block_on` (the main thread), which lives as long as the process.
/// The race where this process died between `fork` and `prctl` is closed by comparing the
/// parent pid afterwards: the child was then re-parented, and kills itself before `exec`.
fn die_with_supervisor(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let supervisor = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and calls only async-signal-safe
    // functions (prctl, getppid, kill, getpid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != supervisor {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            Ok(())
        });
    }
}
