//! SIGPIPE never ends a process that drives the runtime (`ironlock::driven`): a C program keeps
//! the default action (terminate), and the sockets are written with `writev(2)`, which has no
//! `MSG_NOSIGNAL`. This file is its own process: it sets the default action, as a C program has
//! it, and a failure here is the test process killed by SIGPIPE.
#![cfg(unix)]

use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::time::Duration;

use ironlock::driven::DrivenRuntime;

fn sigpipe_pending() -> bool {
    // SAFETY: sigpending fills an initialised set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigpending(&mut set);
        libc::sigismember(&set, libc::SIGPIPE) == 1
    }
}

fn sigpipe_blocked() -> bool {
    // SAFETY: reads this thread's mask into an initialised set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set);
        libc::sigismember(&set, libc::SIGPIPE) == 1
    }
}

/// Writes from `rt`, on the calling thread, to a socket whose peer reset the connection: the
/// writes fail with EPIPE (after ECONNRESET) and raise SIGPIPE on this thread. The errors met.
fn write_to_a_reset_socket(rt: &DrivenRuntime) -> Vec<std::io::ErrorKind> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    rt.block_on(async move {
        let client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().unwrap();
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: a valid socket and a linger struct of the size given.
        let set = unsafe {
            libc::setsockopt(
                server.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                std::ptr::from_ref(&linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        assert_eq!(set, 0);
        drop(server); // RST
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut errors = Vec::new();
        for _ in 0..3 {
            let bufs = [IoSlice::new(b"PING\r\n"), IoSlice::new(b"PING\r\n")];
            // Writable at once: a reset socket reports its error as readiness.
            let _ = client.writable().await;
            if let Err(e) = client.try_write_vectored(&bufs) {
                errors.push(e.kind());
            }
        }
        errors
    })
}

#[test]
fn a_write_to_a_reset_connection_does_not_kill_a_c_host() {
    let rt = DrivenRuntime::new("sigpipe-test", 1).unwrap();
    // First as a Python program that restores the default action after some calls (a script
    // piping its output): calls made while SIGPIPE is ignored leave the thread alone and must
    // not make the later ones skip their guard.
    // SAFETY: sets the process's disposition of SIGPIPE.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    for _ in 0..3 {
        rt.block_on(async { assert!(!sigpipe_blocked(), "ignored: the mask is left alone") });
    }
    // Then as in a C program (Rust's own start-up ignores SIGPIPE).
    // SAFETY: sets the process's disposition of SIGPIPE to its default.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    rt.block_on(async { assert!(sigpipe_blocked(), "blocked while a call drives") });

    // The runtime's own threads block it for good: a blocking-pool thread started from this
    // thread outside any call (it would inherit this thread's mask, which lets SIGPIPE through).
    let pool = rt.handle().spawn_blocking(|| {
        // SAFETY: raises SIGPIPE at this thread.
        unsafe { libc::raise(libc::SIGPIPE) };
        sigpipe_blocked()
    });
    assert!(
        rt.block_on(pool).unwrap(),
        "blocked on the runtime's blocking threads"
    );

    // The caller's thread drives a socket whose peer reset the connection.
    let errors = write_to_a_reset_socket(&rt);
    assert!(
        errors.contains(&std::io::ErrorKind::BrokenPipe),
        "the writes should have met EPIPE (and raised SIGPIPE): {errors:?}"
    );
    assert!(!sigpipe_pending(), "the SIGPIPE was taken off the thread");
    assert!(!sigpipe_blocked(), "the caller's signal mask is restored");

    // A SIGPIPE pending before the call is not the call's to take.
    // SAFETY: blocks SIGPIPE on this thread and raises one at it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::raise(libc::SIGPIPE);
    }
    rt.block_on(async {});
    assert!(
        sigpipe_pending(),
        "a SIGPIPE of the caller's own is left alone"
    );
    assert!(
        sigpipe_blocked(),
        "a mask that blocked it already is left alone"
    );

    // SAFETY: unblocks SIGPIPE on this thread and takes the pending one off it (the default
    // action would end the process once it is unblocked: ignore it meanwhile).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    assert!(!sigpipe_pending() && !sigpipe_blocked());

    // A runtime told that its host ignores SIGPIPE for good, made while the default action is
    // in force (a program embedding Node may not ignore it): its calls still guard the thread.
    let trusting = DrivenRuntime::new("sigpipe-host", 1)
        .unwrap()
        .host_ignores_sigpipe();
    let errors = write_to_a_reset_socket(&trusting);
    assert!(
        errors.contains(&std::io::ErrorKind::BrokenPipe),
        "{errors:?}"
    );
    assert!(!sigpipe_pending() && !sigpipe_blocked());
}
