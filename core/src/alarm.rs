//! One timer for the deadlines of a manager's rounds.
//!
//! Every round is bounded by `node_timeout` (`quorum::run`). A tokio timer per round costs more
//! than its bookkeeping: tokio's time driver wakes the runtime's driver (an eventfd write, and a
//! reactor that polls readable for nothing) whenever a timer is registered earlier than the one
//! it sleeps until, and between rounds that come one after another no timer is left, so that is
//! every round. Here a round registers its deadline with the manager's [`Alarm`]; one task sleeps
//! until the earliest deadline registered, wakes the rounds that are due and sleeps until the
//! next. A deadline later than the one the task sleeps until, which is what each new round of a
//! busy manager has, touches no tokio timer. The task ends when no deadline is left and is
//! spawned again by the next one.
//!
//! A deadline fires no later than a tokio timer of its own would: the task is woken (or spawned)
//! whenever a registration is earlier than what it sleeps until.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio::runtime::Handle;
use tokio::time::Instant;

/// The deadlines of one manager's rounds and the task that fires them.
pub(crate) struct Alarm {
    /// Where the task runs: the manager's runtime.
    rt: Handle,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Registered deadlines by slot; `None` is a free slot (listed in `free`).
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    /// What the task sleeps until; `None` when no task runs.
    armed: Option<Instant>,
    /// The task's waker, to move its sleep earlier.
    task: Option<Waker>,
}

struct Slot {
    at: Instant,
    /// Taken when the deadline fires.
    waker: Option<Waker>,
}

impl Alarm {
    /// An alarm whose task runs on `rt`.
    pub(crate) fn new(rt: Handle) -> Arc<Alarm> {
        Arc::new(Alarm {
            rt,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A deadline at `at`, registered when first polled.
    pub(crate) fn deadline(self: &Arc<Self>, at: Instant) -> Deadline {
        Deadline {
            alarm: Arc::clone(self),
            at,
            slot: None,
            waker: None,
        }
    }

    /// Runs `fut` until it completes (`Some`) or `at` passes (`None`).
    pub(crate) async fn timeout_at<F: Future>(
        self: &Arc<Self>,
        at: Instant,
        fut: F,
    ) -> Option<F::Output> {
        let mut fut = std::pin::pin!(fut);
        let mut deadline = self.deadline(at);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                return Poll::Ready(Some(v));
            }
            deadline.poll_elapsed(cx).map(|()| None)
        })
        .await
    }

    /// The task: fires due deadlines, sleeps until the earliest of the others, ends when none
    /// is left.
    async fn run(self: Arc<Self>) {
        let mut sleep = std::pin::pin!(tokio::time::sleep_until(Instant::now()));
        let mut due: Vec<Waker> = Vec::new();
        // The sleep has completed: it is registered again even for the same deadline (tokio
        // rounds a deadline up to its tick, so this is only a guard against spinning).
        let mut fired = false;
        std::future::poll_fn(|cx| {
            loop {
                let now = Instant::now();
                let mut st = self.lock();
                let mut next: Option<Instant> = None;
                for slot in st.slots.iter_mut().flatten() {
                    if slot.at <= now {
                        due.extend(slot.waker.take());
                    } else {
                        next = Some(next.map_or(slot.at, |n| n.min(slot.at)));
                    }
                }
                st.armed = next;
                let Some(at) = next else {
                    st.task = None;
                    drop(st);
                    due.drain(..).for_each(Waker::wake);
                    return Poll::Ready(());
                };
                if !st.task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    st.task = Some(cx.waker().clone());
                }
                drop(st);
                due.drain(..).for_each(Waker::wake);
                if fired || sleep.deadline() != at {
                    sleep.as_mut().reset(at);
                }
                if sleep.as_mut().poll(cx).is_pending() {
                    fired = false;
                    return Poll::Pending;
                }
                fired = true;
            }
        })
        .await;
    }
}

/// One registered deadline; dropping it unregisters it.
pub(crate) struct Deadline {
    alarm: Arc<Alarm>,
    at: Instant,
    slot: Option<usize>,
    /// The waker registered in the slot, to skip the lock when it has not changed (a round is
    /// polled once per reply, always by the same task).
    waker: Option<Waker>,
}

impl Deadline {
    /// When it fires.
    pub(crate) fn at(&self) -> Instant {
        self.at
    }

    /// Ready once the deadline has passed; until then, `cx` is woken when it does.
    pub(crate) fn poll_elapsed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.at {
            self.unregister();
            return Poll::Ready(());
        }
        if self.slot.is_some() && self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            return Poll::Pending;
        }
        self.waker = Some(cx.waker().clone());
        let mut st = self.alarm.lock();
        match self.slot {
            Some(i) => {
                if let Some(slot) = &mut st.slots[i]
                    && slot.waker.is_some()
                {
                    slot.waker = Some(cx.waker().clone());
                }
                return Poll::Pending;
            }
            None => {
                let slot = Some(Slot {
                    at: self.at,
                    waker: Some(cx.waker().clone()),
                });
                let i = match st.free.pop() {
                    Some(i) => {
                        st.slots[i] = slot;
                        i
                    }
                    None => {
                        st.slots.push(slot);
                        st.slots.len() - 1
                    }
                };
                self.slot = Some(i);
            }
        }
        match st.armed {
            // The task wakes up in time for this one.
            Some(armed) if armed <= self.at => {}
            Some(_) => {
                st.armed = Some(self.at);
                let task = st.task.take();
                drop(st);
                task.into_iter().for_each(Waker::wake);
            }
            None => {
                st.armed = Some(self.at);
                drop(st);
                drop(self.alarm.rt.spawn(Arc::clone(&self.alarm).run()));
            }
        }
        Poll::Pending
    }

    fn unregister(&mut self) {
        if let Some(i) = self.slot.take() {
            let mut st = self.alarm.lock();
            st.slots[i] = None;
            st.free.push(i);
        }
    }
}

impl Future for Deadline {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().poll_elapsed(cx)
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        self.unregister();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn poll_once<F: Future>(mut fut: Pin<&mut F>) -> Poll<F::Output> {
        std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await
    }

    #[tokio::test]
    async fn each_deadline_fires_at_its_time_whatever_the_order_of_registration() {
        let alarm = Alarm::new(Handle::current());
        let t0 = Instant::now();
        // A late one first, then an earlier one: the task must move its sleep earlier.
        let late = tokio::spawn({
            let d = alarm.deadline(t0 + Duration::from_millis(60));
            async move {
                d.await;
                Instant::now()
            }
        });
        tokio::task::yield_now().await;
        let early = alarm.deadline(t0 + Duration::from_millis(20));
        early.await;
        let early_at = Instant::now();
        let late_at = late.await.unwrap();
        assert!(
            early_at >= t0 + Duration::from_millis(20),
            "{:?}",
            early_at - t0
        );
        assert!(
            late_at >= t0 + Duration::from_millis(60),
            "{:?}",
            late_at - t0
        );
        assert!(early_at < late_at);
        // Nothing registered any more: the task has ended and every slot is free.
        tokio::task::yield_now().await;
        let st = alarm.lock();
        assert!(st.slots.iter().all(Option::is_none));
        assert_eq!(st.armed, None);
    }

    #[tokio::test]
    async fn a_later_deadline_does_not_move_the_alarm_and_a_dropped_one_frees_its_slot() {
        let alarm = Alarm::new(Handle::current());
        let t0 = Instant::now();
        let first = alarm.timeout_at(t0 + Duration::from_millis(30), std::future::pending::<()>());
        let mut first = std::pin::pin!(first);
        assert!(poll_once(first.as_mut()).await.is_pending());
        assert_eq!(alarm.lock().armed, Some(t0 + Duration::from_millis(30)));
        // Later: the alarm stays where it is.
        let mut later = alarm.deadline(t0 + Duration::from_millis(40));
        assert!(poll_once(Pin::new(&mut later)).await.is_pending());
        assert_eq!(alarm.lock().armed, Some(t0 + Duration::from_millis(30)));
        drop(later);
        assert_eq!(alarm.lock().free.len(), 1);
        // A completed future wins over its deadline.
        let done = alarm
            .timeout_at(t0 + Duration::from_millis(30), async { 7 })
            .await;
        assert_eq!(done, Some(7));
        assert_eq!(first.await, None);
        assert!(Instant::now() >= t0 + Duration::from_millis(30));
    }
}
