//! Behaviour that only shows on a terminal: the progress line while waiting, and Ctrl-C that
//! reaches the command once (the terminal signals the whole foreground group; ironlock does not
//! forward it a second time). The binary runs on a pseudo-terminal from `forkpty`.

mod common;

use std::ffi::CString;
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(30);

/// A process on a pseudo-terminal: its pid and the master side.
struct OnPty {
    pid: libc::pid_t,
    master: libc::c_int,
    output: Vec<u8>,
}

impl OnPty {
    fn spawn(args: &[String]) -> OnPty {
        let program = CString::new(env!("CARGO_BIN_EXE_ironlock")).unwrap();
        let argv: Vec<CString> = std::iter::once("ironlock".to_owned())
            .chain(args.iter().cloned())
            .map(|a| CString::new(a).unwrap())
            .collect();
        let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let mut master: libc::c_int = -1;
        // SAFETY: the child only calls execv and _exit (async-signal-safe) on memory prepared
        // before the fork.
        let pid = unsafe {
            libc::forkpty(
                &mut master,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert!(pid >= 0, "forkpty failed");
        if pid == 0 {
            unsafe {
                libc::execv(program.as_ptr(), ptrs.as_ptr());
                libc::_exit(127);
            }
        }
        // SAFETY: fcntl on our own descriptor.
        unsafe {
            let flags = libc::fcntl(master, libc::F_GETFL);
            libc::fcntl(master, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        OnPty {
            pid,
            master,
            output: Vec::new(),
        }
    }

    /// Reads what is available; false once the terminal is closed.
    fn pump(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        // SAFETY: reading into a local buffer of the given length.
        let n = unsafe { libc::read(self.master, buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            self.output.extend_from_slice(&buf[..n as usize]);
            return true;
        }
        n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.output).into_owned()
    }

    /// Reads until the output contains `what`.
    fn expect(&mut self, what: &str) {
        let deadline = Instant::now() + LIMIT;
        while !self.text().contains(what) {
            assert!(
                self.pump() || self.text().contains(what),
                "closed: {}",
                self.text()
            );
            assert!(
                Instant::now() < deadline,
                "no {what:?} in {:?}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn write(&self, bytes: &[u8]) {
        // SAFETY: writing a local buffer to our own descriptor.
        let n = unsafe { libc::write(self.master, bytes.as_ptr().cast(), bytes.len()) };
        assert_eq!(n, bytes.len() as isize);
    }

    /// Reads until the terminal closes, then reaps the process; returns its exit code.
    fn finish(&mut self) -> i32 {
        let deadline = Instant::now() + LIMIT;
        while self.pump() {
            assert!(Instant::now() < deadline, "still running: {}", self.text());
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let rc = unsafe { libc::waitpid(self.pid, &mut status, 0) };
        assert_eq!(rc, self.pid);
        assert!(libc::WIFEXITED(status), "status {status}");
        libc::WEXITSTATUS(status)
    }
}

impl Drop for OnPty {
    fn drop(&mut self) {
        // SAFETY: our own child and descriptor; harmless if already gone.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), libc::WNOHANG);
            libc::close(self.master);
        }
    }
}

#[test]
fn progress_line_and_ctrl_c_on_a_terminal() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    let key = unique("tty");
    let holder = hold(&urls, &[], &key, "sleep 3").child;

    let script = "n=0; trap 'n=$((n+1))' INT; echo started; i=0; \
                  while [ $i -lt 20 ]; do sleep 0.05; i=$((i+1)); done; echo \"INT x$n\"";
    let mut args: Vec<String> = Vec::new();
    for u in &urls {
        args.extend(["--node".to_owned(), u.clone()]);
    }
    args.extend(
        ["--no-restart-quarantine", "-v", "run", &key, "-c", script]
            .iter()
            .map(|s| s.to_string()),
    );
    let mut tty = OnPty::spawn(&args);
    tty.expect("started");
    let waited = tty.text();
    assert!(
        waited.contains(&format!("\r\x1b[2Kironlock: waiting for {key:?}: ")),
        "no progress line: {waited:?}"
    );
    assert!(waited.contains("against"), "no votes in {waited:?}");
    assert_eq!(code(&finish(holder, LIMIT)), 0);

    tty.write(b"\x03");
    let code = tty.finish();
    let text = tty.text();
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("INT x1"),
        "Ctrl-C must reach the command: {text:?}"
    );
    // Signals do not queue, so the count cannot prove there was no second one; ironlock's own
    // account can.
    assert!(
        text.contains("ironlock: SIGINT from the terminal"),
        "ironlock forwarded the terminal's SIGINT again: {text:?}"
    );
}
