//! Read-write locks across the quorum against real nodes: readers share, a writer excludes
//! readers, writers and plain locks (and they exclude it), a waiting writer holds back new
//! readers and takes its mark away when it gives up or is cancelled, the lock key lives as long
//! as the last reader, fences grow across reads and writes, no key is left behind, bad input
//! names its argument, and a referee that sees no write valid at the same time as any other
//! read or write while a node is killed and restarted.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{SEC, cluster, config, ms, unique};
use ironlock::{Access, AcquireOptions, ErrorKind, LockManager};

/// The keys on node `i` (test names are unique, so only this test's keys match `pattern`).
fn keys(c: &common::Cluster, i: usize, pattern: &str) -> String {
    c.command(i, &["KEYS", pattern]).expect("KEYS")
}

fn pttl(c: &common::Cluster, i: usize, key: &str) -> i64 {
    let raw = c.command(i, &["PTTL", key]).expect("PTTL");
    raw.trim()
        .trim_start_matches(':')
        .parse()
        .expect("PTTL reply")
}

#[tokio::test]
async fn readers_share_a_writer_excludes_them_and_a_plain_lock_of_the_name_excludes_both() {
    let c = cluster(3);
    let m = LockManager::new(config(&c).retry_count(0)).await.unwrap();
    let name = unique("rw");
    let rw = m.rw_lock(name.clone());
    let r1 = rw.read(5 * SEC).await.unwrap();
    let r2 = rw.read(5 * SEC).await.expect("readers share");
    assert_eq!(
        (r1.access(), r2.access()),
        (Some(Access::Read), Some(Access::Read))
    );
    assert_eq!(r1.quorum(), 2);
    assert_ne!(r1.token(), r2.token());
    let e = rw.write(5 * SEC).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    assert!(
        e.message().contains(&format!(
            "could not acquire the write lock of [\"{name}\"]: readers, another writer or a plain lock of the same name hold it"
        )),
        "{e}"
    );
    let e = m.acquire(&[&name], 5 * SEC).await.unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::Contended,
        "a plain lock while readers hold: {e}"
    );
    // The refused writer gave up (a try-once) and took its mark away: readers still come in.
    let r3 = rw.read(5 * SEC).await.expect("no writer waits");
    assert!(r3.release().await.held);
    assert!(r1.release().await.held);
    assert!(r2.release().await.held);
    // With the readers gone, the key is gone too.
    m.flush().await; // the third node's delete may still be on its way
    for i in 0..3 {
        assert_eq!(keys(&c, i, &format!("{name}*")), "*0\r\n", "node {i}");
    }
    let w = rw.write(5 * SEC).await.expect("free once the readers left");
    assert_eq!(w.access(), Some(Access::Write));
    let e = rw.read(5 * SEC).await.unwrap_err();
    assert!(
        e.message()
            .contains("a writer (or a plain lock of the same name) holds it"),
        "{e}"
    );
    assert_eq!(
        rw.write(5 * SEC).await.unwrap_err().kind(),
        ErrorKind::Contended
    );
    assert_eq!(
        m.acquire(&[&name], 5 * SEC).await.unwrap_err().kind(),
        ErrorKind::Contended
    );
    // The writer's key is the lock's own key, holding its token.
    assert!(c.command(0, &["GET", &name]).unwrap().contains(w.token()));
    assert!(w.release().await.held);
    // A plain lock excludes both sides.
    let plain = m.acquire(&[&name], 5 * SEC).await.unwrap();
    assert_eq!(
        rw.read(5 * SEC).await.unwrap_err().kind(),
        ErrorKind::Contended
    );
    assert_eq!(
        rw.write(5 * SEC).await.unwrap_err().kind(),
        ErrorKind::Contended
    );
    assert!(plain.release().await.held);
    // Nothing is left behind: no key, no mark.
    let r = rw.read(5 * SEC).await.unwrap();
    assert!(r.release().await.held);
    m.flush().await; // the third node's delete may still be on its way
    for i in 0..3 {
        assert_eq!(keys(&c, i, &format!("{name}*")), "*0\r\n", "node {i}");
    }
}

#[tokio::test]
async fn the_lock_key_lives_as_long_as_the_last_reader() {
    let c = cluster(1);
    let m = LockManager::new(config(&c).retry_count(0)).await.unwrap();
    let name = unique("rw");
    let rw = m.rw_lock(name.clone());
    let short = rw.read(ms(1500)).await.unwrap();
    let long = rw.read(10 * SEC).await.unwrap();
    let t = pttl(&c, 0, &name);
    assert!(
        t > 9000 && t <= 10_000,
        "the key lives with the longest read: {t}"
    );
    assert!(long.release().await.held);
    let t = pttl(&c, 0, &name);
    assert!(t > 0 && t <= 1500, "then with the one left: {t}");
    // The short read expires, not released: the key goes with it and a writer gets in.
    tokio::time::sleep(ms(1600)).await;
    assert_eq!(pttl(&c, 0, &name), -2);
    let w = rw
        .write(SEC)
        .await
        .expect("the expired reader holds nothing");
    assert!(!short.release().await.held, "it had expired");
    assert!(w.release().await.held);
}

#[tokio::test]
async fn a_waiting_writer_holds_back_new_readers_and_a_release_wakes_it() {
    let c = cluster(3);
    // A 10 s retry delay: the mark's renewals pace the writer's rounds (half a queue timeout),
    // and a writer granted quickly after the last reader left was woken by its release.
    let m = LockManager::new(config(&c).retry_delay(10 * SEC).queue_timeout(Some(SEC)))
        .await
        .unwrap();
    let name = unique("rw");
    let rw = m.rw_lock(name.clone());
    let reader = rw.read(10 * SEC).await.unwrap();
    let writer = {
        let rw = rw.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let w = rw.write_with(5 * SEC, AcquireOptions::wait(8 * SEC)).await;
            (w, started.elapsed())
        })
    };
    tokio::time::sleep(ms(300)).await;
    // Readers keep being refused for longer than one queue timeout: the writer renews its mark.
    for _ in 0..3 {
        reader
            .extend(10 * SEC)
            .await
            .expect("a reader that holds renews past a waiting writer");
        let e = rw
            .read_with(5 * SEC, AcquireOptions::try_once())
            .await
            .unwrap_err();
        assert!(e.message().contains("a writer is waiting for it"), "{e}");
        tokio::time::sleep(ms(500)).await;
    }
    let released_at = Instant::now();
    assert!(reader.release().await.held);
    let (w, _) = writer.await.unwrap();
    let w = w.expect("the writer gets the lock once the reader left");
    let woke = released_at.elapsed();
    assert!(
        woke < 2 * SEC,
        "woken by the release, not a 10 s retry: {woke:?}"
    );
    // Granted, the writer keeps its mark (a failed round's rollback would otherwise leave a
    // node to a new reader); its release takes it away everywhere.
    let pattern = format!("{name}*:ironlock:writer");
    let marked = (0..3)
        .filter(|&i| keys(&c, i, &pattern) != "*0\r\n")
        .count();
    assert!(
        marked >= 2,
        "the mark stays with the granted writer: on {marked} nodes"
    );
    assert!(w.release().await.held);
    let until = Instant::now() + 2 * SEC;
    while (0..3).any(|i| keys(&c, i, &pattern) != "*0\r\n") {
        assert!(Instant::now() < until, "the release left a writer's mark");
        tokio::time::sleep(ms(10)).await;
    }
    rw.read(SEC)
        .await
        .expect("readers go once the writer released")
        .release()
        .await;
}

#[tokio::test]
async fn a_writer_that_gives_up_or_is_cancelled_takes_its_mark_away() {
    let c = cluster(3);
    let m = LockManager::new(config(&c).retry_delay(ms(50)).queue_timeout(Some(10 * SEC)))
        .await
        .unwrap();
    let name = unique("rw");
    let rw = m.rw_lock(name.clone());
    let reader = rw.read(10 * SEC).await.unwrap();
    // Gives up after its wait: a 10 s mark would otherwise hold readers back for 10 s.
    let e = rw
        .write_with(SEC, AcquireOptions::wait(ms(300)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Contended, "{e}");
    let r2 = rw.read(SEC).await.expect("the writer's mark left with it");
    assert!(r2.release().await.held);
    // Cancelled: the future dropped mid-wait.
    let cancelled =
        tokio::time::timeout(ms(300), rw.write_with(SEC, AcquireOptions::wait(5 * SEC))).await;
    assert!(cancelled.is_err(), "still waiting when dropped");
    let mut admitted = false;
    for _ in 0..40 {
        // The mark is taken away in the background, right after the drop.
        if let Ok(r) = rw.write_with(SEC, AcquireOptions::try_once()).await {
            r.release().await;
        }
        if let Ok(r) = rw.read_with(SEC, AcquireOptions::try_once()).await {
            admitted = true;
            r.release().await;
            break;
        }
        tokio::time::sleep(ms(25)).await;
    }
    assert!(
        admitted,
        "a cancelled writer's mark still holds readers back"
    );
    assert!(reader.release().await.held);
    m.flush().await; // the third node's delete may still be on its way
    for i in 0..3 {
        assert_eq!(keys(&c, i, &format!("{name}*")), "*0\r\n", "node {i}");
    }
}

#[tokio::test]
async fn fences_grow_across_reads_and_writes() {
    let c = cluster(3);
    let m = LockManager::new(config(&c).retry_count(0)).await.unwrap();
    let rw = m.rw_lock(unique("rw"));
    let fenced = AcquireOptions::try_once().fencing(true);
    let mut last = 0u64;
    for i in 0..6 {
        let l = if i % 2 == 0 {
            rw.read_with(SEC, fenced.clone()).await.unwrap()
        } else {
            rw.write_with(SEC, fenced.clone()).await.unwrap()
        };
        let f = l.fence().expect("fenced");
        assert!(f > last, "fence {f} after {last}");
        last = f;
        assert!(l.release().await.held);
    }
    // Two readers at once each get their own, larger fence.
    let a = rw.read_with(SEC, fenced.clone()).await.unwrap();
    let b = rw.read_with(SEC, fenced.clone()).await.unwrap();
    assert!(a.fence().unwrap() > last && b.fence().unwrap() > a.fence().unwrap());
    a.release().await;
    b.release().await;
}

#[tokio::test]
async fn bad_input_names_its_argument() {
    let c = cluster(1);
    let m = LockManager::new(config(&c).retry_count(0)).await.unwrap();
    let rw = m.rw_lock("r");
    // Fair is no bad input: a fair read waits in the lock key's line (rwlock_fair.rs).
    let r = rw
        .read_with(SEC, AcquireOptions::try_once().fair(true))
        .await
        .expect("a fair read");
    assert!(r.release().await.held);
    let e = rw
        .write_with(SEC, AcquireOptions::try_once().min_hold(ms(10)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(
        e.message()
            .starts_with("min_hold: applies to locks, not to read-write locks"),
        "{e}"
    );
    // The keys a read-write lock and an election keep beside a lock key are no one's resource.
    for suffix in [":ironlock:readers", ":ironlock:writer", ":ironlock:leader"] {
        let e = m
            .acquire(&[format!("r{{r}}{suffix}")], SEC)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(
            e.message()
                .contains("would share a key that ironlock keeps for \"r{r}\""),
            "{e}"
        );
    }
    let e = m.rw_lock("").read(SEC).await.unwrap_err();
    assert_eq!(e.message(), "resource: empty resource name", "{e}");
    let e = rw.write(Duration::ZERO).await.unwrap_err();
    assert!(e.message().starts_with("ttl: "), "{e}");
    // The readers' marker on the key is no token: releasing "by token" cannot delete it.
    let r = rw.read(5 * SEC).await.unwrap();
    let e = m
        .release_token(&["r"], "ironlock readers")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.message().starts_with("token: "), "{e}");
    assert_eq!(
        rw.write(SEC).await.unwrap_err().kind(),
        ErrorKind::Contended
    );
    assert!(r.release().await.held);
    assert_eq!(keys(&c, 0, "r*"), "*0\r\n");
}

/// The referee: readers and writers holding a still-valid grant; a write counted with any other
/// read or write is a violation.
#[derive(Default)]
struct Referee {
    held: std::sync::Mutex<(u32, u32)>,
    violations: AtomicU64,
    grants: [AtomicU64; 2],
}

impl Referee {
    fn enter(&self, write: bool) {
        let mut s = self.held.lock().unwrap();
        if write {
            s.1 += 1;
        } else {
            s.0 += 1;
        }
        if s.1 > 1 || (s.1 == 1 && s.0 > 0) {
            self.violations.fetch_add(1, Ordering::Relaxed);
        }
        self.grants[usize::from(write)].fetch_add(1, Ordering::Relaxed);
    }

    fn leave(&self, write: bool) {
        let mut s = self.held.lock().unwrap();
        if write {
            s.1 -= 1;
        } else {
            s.0 -= 1;
        }
    }

    fn counts(&self) -> (u64, u64, u64) {
        let g = |i: usize| self.grants[i].load(Ordering::Relaxed);
        (g(0), g(1), self.violations.load(Ordering::Relaxed))
    }
}

/// Eight tasks on two managers read (six) and write (two) one resource on 5 nodes while node 2
/// is killed and restarted empty twice (restart quarantine on); each holds its grant for part
/// of its validity. The referee sees no write valid at the same time as another read or write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_is_never_valid_with_another_read_or_write_while_a_node_restarts() {
    referee_while_a_node_restarts(false).await;
}

/// The same with fair waiters: the tasks of one manager wait in line, one of them a fair plain
/// lock of the same name (counted as a write), beside the plain readers and writers of the
/// other manager.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_fair_waiters_a_write_is_never_valid_with_another_read_or_write() {
    referee_while_a_node_restarts(true).await;
}

async fn referee_while_a_node_restarts(fair: bool) {
    let mut c = cluster(5);
    // max_ttl 2 s: the quarantine of a fresh node is 2 s + drift + 1 s; wait it out first.
    tokio::time::sleep(ms(3100)).await;
    let cfg = ironlock::Config::new(c.urls())
        .max_ttl(2 * SEC)
        .retry_delay(ms(20))
        .retry_jitter(ms(10))
        .node_timeout(ms(200))
        .connect_timeout(5 * SEC);
    let managers = [
        LockManager::new(cfg.clone()).await.unwrap(),
        LockManager::new(cfg).await.unwrap(),
    ];
    let name = unique("rw");
    let referee = Arc::new(Referee::default());
    let until = Instant::now() + 6 * SEC;
    let mut tasks = Vec::new();
    for t in 0..8usize {
        let m = managers[t % 2].clone();
        let rw = m.rw_lock(name.clone());
        let referee = referee.clone();
        // With `fair`, the tasks of the second manager wait in line; its task 7 takes a plain
        // lock of the name.
        let (in_line, plain) = (fair && t % 2 == 1, fair && t == 7);
        tasks.push(tokio::spawn(async move {
            let write = t % 4 == 0 || plain;
            while Instant::now() < until {
                let opts = AcquireOptions::wait(ms(500)).fair(in_line);
                let got = if plain {
                    m.acquire_with(&[rw.resource()], ms(800), opts).await
                } else if write {
                    rw.write_with(ms(800), opts).await
                } else {
                    rw.read_with(ms(800), opts).await
                };
                let Ok(l) = got else { continue };
                referee.enter(write);
                // Hold for part of the validity; leave the referee before it ends.
                let hold = l.validity().saturating_sub(ms(100)).min(ms(30));
                tokio::time::sleep(hold).await;
                referee.leave(write);
                l.release().await;
                if write {
                    // Writers keep coming, but not back to back: a waiting writer holds back
                    // new readers, so writers that never pause would starve them.
                    tokio::time::sleep(ms(60)).await;
                }
            }
        }));
    }
    for _ in 0..2 {
        tokio::time::sleep(ms(1200)).await;
        c.kill(2).unwrap();
        tokio::time::sleep(ms(800)).await;
        c.start_node(2).unwrap();
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (reads, writes, violations) = referee.counts();
    eprintln!("{reads} reads, {writes} writes, {violations} violations");
    assert_eq!(violations, 0, "{reads} reads, {writes} writes");
    assert!(
        reads > 20 && writes > 5,
        "both sides ran: {reads} reads, {writes} writes"
    );
}

/// The negative control of the referee above: the real read and write scripts, but a reader
/// counts itself admitted by 2 of the 5 nodes (a minority) while writers ask the other 3. The
/// referee then sees writes valid together with reads, so the test above can fail.
#[tokio::test]
async fn negative_control_readers_admitted_by_a_minority_overlap_writers() {
    let c = cluster(5);
    let name = unique("negrw");
    let (readers, mark) = (
        ironlock::scripts::readers_key(&name),
        ironlock::scripts::writer_mark_key(&name),
    );
    let mut conns = Vec::new();
    for url in c.urls() {
        let client = redis::Client::open(url.as_str()).unwrap();
        conns.push(client.get_multiplexed_async_connection().await.unwrap());
    }
    let read = redis::Script::new(ironlock::scripts::READ_ACQUIRE_SOURCE);
    let write = redis::Script::new(ironlock::scripts::WRITE_ACQUIRE_SOURCE);
    let referee = Referee::default();
    for round in 0..20 {
        let token = format!("reader-{round}");
        let mut yes = 0;
        for conn in &mut conns[..2] {
            let (ok, _): (i64, i64) = read
                .key(&name)
                .key(&readers)
                .key(&mark)
                .arg(&token)
                .arg(2000)
                .arg(0)
                .invoke_async(conn)
                .await
                .unwrap();
            yes += ok;
        }
        assert_eq!(yes, 2);
        referee.enter(false);
        let token = format!("writer-{round}");
        let mut yes = 0;
        for conn in &mut conns[2..] {
            let (ok, _): (i64, i64) = write
                .key(&name)
                .key(&mark)
                .arg(&token)
                .arg(2000)
                .arg(0)
                .arg(1000)
                .invoke_async(conn)
                .await
                .unwrap();
            yes += ok;
        }
        if yes >= 3 {
            referee.enter(true);
            referee.leave(true);
        }
        referee.leave(false);
        for conn in &mut conns {
            let _: () = redis::cmd("FLUSHALL").query_async(conn).await.unwrap();
        }
    }
    let (reads, writes, violations) = referee.counts();
    assert_eq!((reads, writes), (20, 20));
    assert_eq!(violations, 20, "every minority read overlapped a write");
}
