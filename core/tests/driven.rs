//! `ironlock::driven` as an event loop uses it (the Node addon, from libuv): the reactor's
//! descriptor polls readable when a reply arrives, and `drive_now` on the loop's thread runs the
//! waiting task to its end there, without waiting and without the driver thread.
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
fn an_event_loop_drives_a_request_and_its_reply_on_its_own_thread() {
    let rt = DrivenRuntime::for_event_loop("driven-test", 1).unwrap();
    let fd = rt
        .reactor_fd()
        .expect("the reactor's epoll descriptor is found on Linux");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();

    // Connect (driven by whoever: not what this test is about).
    let client = rt.block_on(tokio::net::TcpStream::connect(addr)).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    server
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();

    // This thread stands for the JS thread: it starts a task that writes a request and waits
    // for the reply. `drive_now` returns once the task waits, the request already written.
    let loop_thread = std::thread::current().id();
    let finished_on = Arc::new(std::sync::Mutex::new(None));
    let done = Arc::new(AtomicBool::new(false));
    let task = {
        let (finished_on, done) = (finished_on.clone(), done.clone());
        async move {
            // (tokio's readiness API: the core builds tokio without its io-util helpers)
            client.writable().await.unwrap();
            assert_eq!(client.try_write(b"PING\n").unwrap(), 5);
            let mut reply = [0u8; 5];
            let mut got = 0;
            while got < reply.len() {
                client.readable().await.unwrap();
                match client.try_read(&mut reply[got..]) {
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
            }
            *finished_on.lock().unwrap() = Some(std::thread::current().id());
            done.store(true, Ordering::SeqCst);
            reply
        }
    };
    let started = Instant::now();
    let handle = rt.drive_now(|| rt.handle().spawn(task));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "drive_now does not wait for the reply"
    );
    let mut request = [0u8; 5];
    server.read_exact(&mut request).unwrap();
    assert_eq!(&request, b"PING\n", "the request was written by drive_now");
    assert!(!done.load(Ordering::SeqCst));

    // The reply makes the reactor's descriptor readable; one drive on this thread finishes the
    // task here. The driver thread takes over only 2 ms after the last drive, so drive as soon
    // as the descriptor says so (as libuv does) and expect this thread to have finished it.
    server.write_all(b"PONG\n").unwrap();
    let mut drives = 0;
    while !done.load(Ordering::SeqCst) && drives < 50 {
        assert!(
            readable(fd, Duration::from_secs(5)),
            "the reply wakes the loop"
        );
        rt.drive_now(|| ());
        drives += 1;
    }
    assert!(done.load(Ordering::SeqCst), "the task finished");
    assert_eq!(*finished_on.lock().unwrap(), Some(loop_thread));
    assert_eq!(rt.block_on(handle).unwrap(), *b"PONG\n");

    // Nothing left to do: the descriptor does not stay readable (a loop watching it would spin).
    rt.drive_now(|| ());
    assert!(!readable(fd, Duration::from_millis(50)));
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
