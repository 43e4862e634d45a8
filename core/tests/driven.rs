//! `ironlock::driven` as an event loop uses it (the Node addon, from libuv), against real
//! redis-server nodes: the reactor's descriptor polls readable when the replies arrive, and
//! `drive_now` on the loop's thread runs the acquire to its end there, without waiting and
//! without the driver thread.
#![cfg(target_os = "linux")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ironlock::driven::DrivenRuntime;

fn readable(fd: i32, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) > 0 }
}

#[test]
fn an_event_loop_drives_a_lock_round_and_its_replies_on_its_own_thread() {
    let c = common::cluster(3);
    let rt = DrivenRuntime::for_event_loop("driven-test", 1).unwrap();
    let fd = rt
        .reactor_fd()
        .expect("the reactor's epoll descriptor is found on Linux");
    let manager = rt.block_on(common::manager(&c));
    let key = common::unique("driven");

    // This thread stands for the JS thread: it starts an acquire, which returns once its
    // requests are written, then drives whenever the reactor's descriptor says the replies
    // are in (as libuv does). It drives at least every millisecond, so the driver thread (which
    // takes over 2 ms after the last drive) has no reason to.
    let loop_thread = std::thread::current().id();
    type Outcome = (std::thread::ThreadId, ironlock::Result<ironlock::Lock>);
    let outcome: Arc<Mutex<Option<Outcome>>> = Arc::default();
    let started = Instant::now();
    rt.drive_now(|| {
        let (m, key, outcome) = (manager.clone(), key.clone(), outcome.clone());
        rt.handle().spawn(async move {
            let r = m.acquire(&[key], Duration::from_secs(10)).await;
            *outcome.lock().unwrap() = Some((std::thread::current().id(), r));
        })
    });
    // (The replies may already be in by the end of that first drive; usually they are not.)
    let waited = outcome.lock().unwrap().is_none();
    let mut woke = false;
    let deadline = Instant::now() + Duration::from_secs(10);
    while outcome.lock().unwrap().is_none() && Instant::now() < deadline {
        woke |= readable(fd, Duration::from_millis(1));
        rt.drive_now(|| ());
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the acquire finished"
    );
    assert!(
        woke || !waited,
        "the replies made the reactor's descriptor readable"
    );
    let (finished_on, lock) = outcome.lock().unwrap().take().unwrap();
    assert_eq!(
        finished_on, loop_thread,
        "the round finished on the loop's thread"
    );
    let lock = lock.expect("granted");
    for i in 0..c.len() {
        let value = c.command(i, &["GET", &key]).unwrap();
        assert!(
            value.contains(lock.token()),
            "node {i} holds the token: {value}"
        );
    }

    // Nothing left to do: the descriptor does not stay readable (a loop watching it would spin).
    rt.drive_now(|| ());
    assert!(!readable(fd, Duration::from_millis(50)));
    assert!(rt.block_on(lock.release()).held);
    for i in 0..c.len() {
        assert!(c.command(i, &["EXISTS", &key]).unwrap().starts_with(":0"));
    }
}

#[test]
fn background_work_runs_while_the_event_loop_is_busy() {
    // The loop's thread is busy (a JS thread in a long computation): a timer started by a task
    // still fires, on the driver thread.
    let rt = DrivenRuntime::for_event_loop("driven-test", 1).unwrap();
    let fired = Arc::new(AtomicBool::new(false));
    let f = fired.clone();
    rt.drive_now(|| {
        rt.handle().spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            f.store(true, Ordering::SeqCst);
        })
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while !fired.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        fired.load(Ordering::SeqCst),
        "the driver thread ran the timer"
    );
}

/// Has node 0 hold back every write for `ms` milliseconds, so that a call is still in flight
/// after the drive that sends it.
fn hold_writes(c: &common::Cluster, ms: u64) {
    let reply = c
        .command(0, &["CLIENT", "PAUSE", &ms.to_string(), "WRITE"])
        .unwrap();
    assert!(reply.starts_with("+OK"), "{reply}");
}

#[test]
fn settle_runs_a_call_to_its_end_here_or_stops_for_the_loops_own_descriptor_or_the_timeout() {
    use ironlock::driven::{Woken, settled};
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    let c = common::cluster(1);
    let rt = DrivenRuntime::for_event_loop("driven-settle", 1).unwrap();
    let manager = rt.block_on(common::manager(&c));
    let (theirs, ours) = std::os::unix::net::UnixStream::pair().unwrap();
    let other = ours.as_raw_fd();

    // Outside a settle, `settled` does nothing.
    settled();

    // Nothing pending anywhere: the wait runs out.
    rt.drive_now(|| ());
    let started = Instant::now();
    assert_eq!(
        rt.settle(|| (), other, Duration::from_millis(30)),
        Woken::Elapsed
    );
    assert!(started.elapsed() >= Duration::from_millis(25));

    // The loop's own descriptor turns readable first: it ends the wait.
    (&theirs).write_all(b"x").unwrap();
    let started = Instant::now();
    assert_eq!(
        rt.settle(|| (), other, Duration::from_secs(5)),
        Woken::Other
    );
    assert!(started.elapsed() < Duration::from_secs(4));
    let mut byte = [0u8; 1];
    (&ours).read_exact(&mut byte).unwrap();

    // A call started by the settle, whose node holds writes back for 100 ms: the settle waits
    // for its replies and runs it to its end on this thread, then returns when it says so.
    hold_writes(&c, 100);
    let here = std::thread::current().id();
    let ran_on: Arc<Mutex<Option<std::thread::ThreadId>>> = Arc::default();
    let key = common::unique("settle");
    let started = Instant::now();
    let woken = rt.settle(
        || {
            let (m, key, ran_on) = (manager.clone(), key.clone(), ran_on.clone());
            rt.handle().spawn(async move {
                let lock = m.acquire(&[key], Duration::from_secs(10)).await.unwrap();
                assert!(lock.release().await.held);
                *ran_on.lock().unwrap() = Some(std::thread::current().id());
                settled();
            });
        },
        other,
        Duration::from_secs(5),
    );
    assert_eq!(woken, Woken::Settled);
    assert!(started.elapsed() >= Duration::from_millis(90));
    assert_eq!(
        *ran_on.lock().unwrap(),
        Some(here),
        "finished on this thread"
    );

    // A call that does not finish in time: the settle returns at its timeout, and the call goes
    // on when the runtime is driven again.
    hold_writes(&c, 200);
    let done: Arc<AtomicBool> = Arc::default();
    let key = common::unique("settle-late");
    let woken = rt.settle(
        || {
            let (m, key, done) = (manager.clone(), key.clone(), done.clone());
            rt.handle().spawn(async move {
                let lock = m.acquire(&[key], Duration::from_secs(10)).await.unwrap();
                assert!(lock.release().await.held);
                done.store(true, Ordering::Release);
            });
        },
        other,
        Duration::from_millis(20),
    );
    assert_eq!(woken, Woken::Elapsed);
    assert!(!done.load(Ordering::Acquire));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done.load(Ordering::Acquire) && Instant::now() < deadline {
        if readable(rt.reactor_fd().unwrap(), Duration::from_millis(50)) {
            rt.drive_now(|| ());
        }
    }
    assert!(done.load(Ordering::Acquire), "the call finished afterwards");
    drop(theirs);
}
