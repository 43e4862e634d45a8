//! The command line, as clap parses it. Options shared by every subcommand are `global`, so they
//! may come before or after the subcommand name.

use std::ffi::OsString;

use clap::builder::TypedValueParser;
use clap::{Args, Parser, Subcommand};

/// A distributed flock(1): run a command while holding a Redlock lock on N Redis masters.
#[derive(Debug, Parser)]
#[command(name = "ironlock", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(flatten, next_help_heading = "Options for every command")]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand understands.
#[derive(Debug, Args)]
pub struct Global {
    /// A Redis node URL; repeat for every node (default: $IRONLOCK_NODES, a comma-separated
    /// list, else $REDIS_URL, else redis://127.0.0.1:6379)
    #[arg(long = "node", value_name = "URL", global = true, value_parser = Text)]
    pub nodes: Vec<String>,

    /// Read node URLs from FILE, one per line (blank lines and # comments skipped); keeps
    /// passwords out of the process list. Refused when other users may read it (chmod 600)
    #[arg(long, value_name = "FILE", global = true)]
    pub node_file: Option<std::path::PathBuf>,

    /// Trusted CA certificate (PEM file) for rediss:// nodes, instead of the system's store
    #[arg(long, value_name = "FILE", global = true, env = "IRONLOCK_CACERT")]
    pub cacert: Option<std::path::PathBuf>,

    /// Client certificate (PEM file) for mutual TLS (servers with tls-auth-clients yes)
    #[arg(long, value_name = "FILE", global = true, env = "IRONLOCK_CERT")]
    pub cert: Option<std::path::PathBuf>,

    /// Private key (PEM file) of --cert
    #[arg(long, value_name = "FILE", global = true, env = "IRONLOCK_KEY")]
    pub key: Option<std::path::PathBuf>,

    /// The name the nodes' certificates must hold when the node URLs name them otherwise (an IP
    /// address); also sent as the TLS server name. Verification stays on
    #[arg(long, value_name = "NAME", global = true, env = "IRONLOCK_SNI", value_parser = Text)]
    pub sni: Option<String>,

    /// Prefix prepended to the resource name to form the Redis key
    #[arg(long, value_name = "PREFIX", global = true, default_value = "", value_parser = Text)]
    pub key_prefix: String,

    /// Longest ttl allowed, and how long a restarted node stays out of the quorum
    #[arg(long, value_name = "SECS", global = true, default_value_t = 60.0)]
    pub max_ttl: f64,

    /// How long to wait for each node's reply in a round (raise it for nodes across a slow
    /// network; it must stay far below the ttl)
    #[arg(long, value_name = "SECS", global = true, default_value_t = 0.05)]
    pub node_timeout: f64,

    /// How long to wait for a node to accept a connection; start-up goes on as soon as a quorum
    /// of nodes is connected, and the others keep connecting in the background
    #[arg(long, value_name = "SECS", global = true, default_value_t = 1.0)]
    pub connect_timeout: f64,

    /// Count "yes" votes of nodes that restarted less than max-ttl ago (only for nodes that
    /// persist every write, e.g. `appendfsync always`, and for throw-away test nodes)
    #[arg(long, global = true)]
    pub no_restart_quarantine: bool,

    /// Count a node's "yes" only once N of its master's replicas acknowledged the write (WAIT);
    /// a node whose master changed then counts at once instead of sitting out the failover
    /// quarantine. Only when every client of these nodes sets it, to each master's number of
    /// replicas; not with redis-cluster:// nodes
    #[arg(long, value_name = "N", global = true, default_value_t = 0)]
    pub replica_acks: u32,

    /// Do not write a held lock's keys back on a node that restarted and lost them (by default
    /// an extension re-seats them, so `run` keeps its lock through a rolling restart of the nodes)
    #[arg(long, global = true)]
    pub no_reseat: bool,

    /// Print nothing but what the command itself prints
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Also report the acquisition (token, validity, per-node votes), signals and the release
    #[arg(short, long, global = true)]
    pub verbose: bool,

    /// Machine-readable output: one JSON object per line (see the guide's command-line reference)
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Acquire RESOURCE, run a command while keeping the lock extended, then release it
    Run(RunArgs),
    /// Show who holds RESOURCE on each node and for how long
    Status {
        /// The resource name
        #[arg(value_parser = Text)]
        resource: String,
        /// Print Prometheus text instead: the resource's holder, every node's state and the
        /// counters of this check (for node_exporter's textfile collector or a scrape script)
        #[arg(long)]
        prometheus: bool,
    },
    /// Release RESOURCE where it still holds TOKEN (e.g. a lock left by a killed process)
    Release {
        /// The resource name
        #[arg(value_parser = Text)]
        resource: String,
        /// The lock's token (the IRONLOCK_TOKEN its command saw)
        #[arg(long, value_name = "T", value_parser = Text)]
        token: String,
    },
    /// Connect to every node and show version, uptime, quorum eligibility and latency
    Check,
    /// Campaign in the leader election NAME and run a command while leading (standby until then)
    Elect(ElectArgs),
    /// Show who leads the election NAME (its value, term and remaining validity)
    Leader {
        /// The election's name
        #[arg(value_parser = Text)]
        name: String,
        /// Keep printing each change of leader, in order, until interrupted
        #[arg(long)]
        watch: bool,
    },
}

#[derive(Debug, Args)]
#[command(
    override_usage = "ironlock elect [OPTIONS] NAME [--] COMMAND [ARGS]...\n       ironlock elect [OPTIONS] NAME -c 'SHELL COMMAND'"
)]
pub struct ElectArgs {
    /// The value this candidate advertises while leading (its address, say); `ironlock leader`
    /// shows it
    #[arg(long, value_name = "V", default_value = "", value_parser = Text)]
    pub value: String,

    /// Leadership time to live in seconds; it is extended while the command runs, and the
    /// command is stopped a tenth of it (at most a second) before it would run out unextended
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub ttl: f64,

    /// Give up after waiting this many seconds as standby (default: wait until leading)
    #[arg(short, long, value_name = "SECS")]
    pub wait: Option<f64>,

    /// Seconds between SIGTERM and SIGKILL when the leadership is lost
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub kill_grace: f64,

    /// Run this command with /bin/sh -c
    #[arg(short = 'c', value_name = "SHELL COMMAND", conflicts_with = "command", value_parser = Text)]
    pub shell: Option<String>,

    /// The election's name
    #[arg(value_parser = Text)]
    pub name: String,

    /// The command and its arguments
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required_unless_present = "shell",
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,
}

impl From<ElectArgs> for RunArgs {
    /// An election is run as a fair, fenced `run` of the election's key whose grant is a
    /// leadership (`elect`): the same waiting, supervision and release.
    fn from(e: ElectArgs) -> RunArgs {
        RunArgs {
            ttl: e.ttl,
            wait: e.wait,
            nonblock: false,
            conflict_exit_code: 1,
            fencing: true,
            no_holder: true,
            fair: true,
            slots: None,
            read: false,
            write: false,
            min_hold: None,
            kill_grace: e.kill_grace,
            shell: e.shell,
            resource: e.name,
            command: e.command,
            elect: Some(e.value),
        }
    }
}

#[derive(Debug, Args)]
#[command(
    override_usage = "ironlock run [OPTIONS] RESOURCE [--] COMMAND [ARGS]...\n       ironlock run [OPTIONS] RESOURCE -c 'SHELL COMMAND'"
)]
pub struct RunArgs {
    /// Lock time to live in seconds; the lock is extended while the command runs
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub ttl: f64,

    /// Give up after waiting this many seconds (default: wait until acquired); flock's
    /// --timeout is accepted too
    #[arg(
        short,
        long,
        visible_alias = "timeout",
        value_name = "SECS",
        conflicts_with = "nonblock"
    )]
    pub wait: Option<f64>,

    /// Try once; fail at once if the lock is held (flock's --nb is accepted too)
    #[arg(short, long, visible_alias = "nb")]
    pub nonblock: bool,

    /// Exit code when the lock is held elsewhere (at once with -n, or when --wait runs out)
    #[arg(
        short = 'E',
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u8)
    )]
    pub conflict_exit_code: u8,

    /// Acquire a fencing token and pass it as IRONLOCK_FENCE
    #[arg(long)]
    pub fencing: bool,

    /// Do not name this host and ironlock's pid in the lock's token (by default the token is
    /// `<random>.<host>:<pid>`, so that `ironlock status` shows who holds the lock)
    #[arg(long)]
    pub no_holder: bool,

    /// Wait in line: the command runs in the order its waiters queued (FIFO across the quorum);
    /// a waiter that dies drops out of line within twice the retry delay
    #[arg(long)]
    pub fair: bool,

    /// Take one of K slots of a counting semaphore named RESOURCE instead of the lock (at most
    /// K commands run at once; like `consul lock -n`). It needs floor(K·N/(K+1))+1 nodes
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub slots: Option<u32>,

    /// Take the read (shared) side of the read-write lock RESOURCE: any number of --read
    /// commands run at once, never with a --write command or a plain lock of the name; a
    /// waiting --write holds back new readers; with --fair, readers and writers run in the order
    /// they queued
    #[arg(long, conflicts_with_all = ["write", "slots"])]
    pub read: bool,

    /// Take the write (exclusive) side of the read-write lock RESOURCE: it runs alone, with no
    /// --read command and no plain lock of the name; while it waits, new readers wait too
    #[arg(long, conflicts_with = "slots")]
    pub write: bool,

    /// Keep the lock taken at least this many seconds after it was granted, even when the
    /// command ends sooner (so that a job run from cron on several machines whose clocks or
    /// schedules differ a little runs once per period, not once per machine). At most --ttl;
    /// not with --slots, --read or --write
    #[arg(long, value_name = "SECS")]
    pub min_hold: Option<f64>,

    /// Seconds between SIGTERM and SIGKILL when the lock is lost
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub kill_grace: f64,

    /// Run this command with /bin/sh -c
    #[arg(short = 'c', value_name = "SHELL COMMAND", conflicts_with = "command", value_parser = Text)]
    pub shell: Option<String>,

    /// The resource to lock
    #[arg(value_parser = Text)]
    pub resource: String,

    /// Set by `ironlock elect`: campaign with this value instead of locking.
    #[arg(skip)]
    pub elect: Option<String>,

    /// The command and its arguments (as with flock, `--` before them is optional; everything
    /// after the command's name is passed to it unchanged)
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND",
        required_unless_present = "shell"
    )]
    pub command: Vec<OsString>,
}

/// The parser of every text argument (resource names, tokens, the key prefix, node URLs, the
/// TLS name, a shell command): a value that is not UTF-8 is refused with the argument's name
/// ("'<RESOURCE>' is not valid UTF-8") instead of clap's "invalid UTF-8 was detected in one or
/// more arguments", which names none. The value itself is not shown: a node URL holds its
/// password.
#[derive(Clone)]
struct Text;

impl TypedValueParser for Text {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        value.to_str().map(str::to_owned).ok_or_else(|| {
            let name = arg.map_or_else(|| "an argument".to_owned(), |a| format!("'{a}'"));
            clap::Error::raw(
                clap::error::ErrorKind::InvalidUtf8,
                format!(
                    "{name} is not valid UTF-8 (the value is not shown: it may hold a password)\n"
                ),
            )
            .with_cmd(cmd)
        })
    }
}

/// The node URLs of a `--node-file`: one per line, blank lines and `#` comments skipped. Refused
/// when every user may write it, or when it holds a password and the group or other users may
/// read it (as ssh refuses a private key).
pub fn read_node_file(path: &std::path::Path) -> Result<Vec<String>, String> {
    use std::os::unix::fs::PermissionsExt;
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("--node-file {shown}: {e}"))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o002 != 0 {
        // Anyone could point this command at a server of theirs.
        return Err(format!(
            "--node-file {shown}: writable by every user (mode {mode:03o}): chmod o-w {shown}"
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("--node-file {shown}: {e}"))?;
    let nodes: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    if nodes.is_empty() {
        return Err(format!("--node-file {shown}: no node URL in it"));
    }
    // A file without passwords may be shared (mode 644, as /etc files are); one with a password
    // must be readable by its owner only.
    let secret = nodes.iter().any(|u| ironlock::redact_url(u) != *u);
    if secret && mode & 0o077 != 0 {
        return Err(format!(
            "--node-file {shown}: holds a password and is readable by other users (mode \
             {mode:03o}): chmod 600 {shown}"
        ));
    }
    Ok(nodes)
}

/// Where the node list comes from when no --node is given.
pub fn default_nodes(
    ironlock_nodes: Option<String>,
    redis_url: Option<String>,
) -> Result<Vec<String>, String> {
    for (var, value) in [("IRONLOCK_NODES", ironlock_nodes), ("REDIS_URL", redis_url)] {
        if let Some(list) = value.filter(|s| !s.trim().is_empty()) {
            return ironlock::split_node_list(var, &list).map_err(|e| e.message().to_owned());
        }
    }
    Ok(vec!["redis://127.0.0.1:6379".to_owned()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn node_list_precedence() {
        let s = |v: &str| Some(v.to_owned());
        assert_eq!(
            default_nodes(s("redis://a:1, redis://b:2"), s("redis://c:3")).unwrap(),
            ["redis://a:1", "redis://b:2"]
        );
        assert_eq!(
            default_nodes(None, s("redis://c:3")).unwrap(),
            ["redis://c:3"]
        );
        assert_eq!(
            default_nodes(s(" "), None).unwrap(),
            ["redis://127.0.0.1:6379"]
        );
        assert!(default_nodes(s("redis://a:1,,redis://b:2"), None).is_err());
    }

    #[test]
    fn run_takes_command_after_double_dash_or_shell() {
        let cli =
            Cli::try_parse_from(["ironlock", "run", "-n", "r", "--", "echo", "-n", "x"]).unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert!(run.nonblock);
        assert_eq!(run.command, ["echo", "-n", "x"]);
        assert!(Cli::try_parse_from(["ironlock", "run", "r"]).is_err());
        assert!(Cli::try_parse_from(["ironlock", "run", "r", "-c", "x", "--", "y"]).is_err());
        assert!(Cli::try_parse_from(["ironlock", "run", "-n", "-w", "1", "r", "-c", "x"]).is_err());
        let cli =
            Cli::try_parse_from(["ironlock", "status", "r", "--node", "redis://h:1"]).unwrap();
        assert_eq!(cli.global.nodes, ["redis://h:1"]);
    }
}
