//! The clock a call driver waits on. Tokio's timer counts whole milliseconds and its park
//! rounds up again, so a 1 ms quiet gap used to cost 2–3 ms per round (docs/benchmarks.md, M2).
//! [`FineClock`] times short waits on a timerfd instead: tokio's reactor watches it, and it wakes
//! the waiting task within tens of microseconds of the deadline. Longer waits (the settle window,
//! the request timeout) stay on tokio's timer, where a millisecond is noise.
//!
//! The driver's unit tests run on [`TokioClock`], which follows tokio's paused clock.

use std::future::Future;
use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::time::Instant;

/// Waits at most this long are timed on the timerfd.
const FINE_LIMIT: Duration = Duration::from_millis(20);

/// What the call driver sleeps on.
pub trait Clock: Default + Send {
    /// Returns at `deadline`. Cancel-safe: dropping the future leaves the clock ready for the
    /// next wait.
    fn sleep_until(&mut self, deadline: Instant) -> impl Future<Output = ()> + Send;
    /// The driver is not waiting for a while (its round is held): give back what the clock
    /// holds.
    fn release(&mut self);
}

/// Tokio's timer, which a test can pause.
#[cfg(test)]
#[derive(Debug, Default)]
pub(super) struct TokioClock;

#[cfg(test)]
impl Clock for TokioClock {
    async fn sleep_until(&mut self, deadline: Instant) {
        tokio::time::sleep_until(deadline).await;
    }

    fn release(&mut self) {}
}

/// Short waits on a timerfd, opened at the first one and kept until [`Clock::release`] or
/// until the clock is dropped.
#[derive(Debug, Default)]
pub struct FineClock {
    timer: Option<AsyncFd<OwnedFd>>,
}

impl Clock for FineClock {
    async fn sleep_until(&mut self, deadline: Instant) {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return;
        }
        if remaining <= FINE_LIMIT {
            match self.armed(remaining) {
                Ok(timer) => match expiry(timer).await {
                    Ok(()) => return,
                    Err(error) => tracing::debug!(%error, "waiting on the timerfd failed"),
                },
                // Out of descriptors, say: tokio's timer is late, not wrong.
                Err(error) => tracing::debug!(%error, "arming a timerfd failed"),
            }
            self.timer = None;
        }
        tokio::time::sleep_until(deadline).await;
    }

    fn release(&mut self) {
        self.timer = None;
    }
}

impl FineClock {
    /// Whether a timerfd is open (short waits ran on it, and it was not released since).
    #[cfg(test)]
    pub fn holds_timer(&self) -> bool {
        self.timer.is_some()
    }

    /// The timer, set to expire once `after` from now (which discards an earlier setting and
    /// any expiry not yet read).
    fn armed(&mut self, after: Duration) -> io::Result<&AsyncFd<OwnedFd>> {
        let timer = match self.timer.take() {
            Some(timer) => timer,
            None => {
                let fd = timerfd_create(
                    TimerfdClockId::Monotonic,
                    TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
                )?;
                // SAFETY: the `OwnedFd` is moved into the `AsyncFd`, so the descriptor stays
                // open and the same for the `AsyncFd`'s whole life, as registering requires.
                #[allow(unsafe_code)]
                let registered = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) };
                registered.map_err(|error| error.into_parts().1)?
            }
        };
        let setting = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec::try_from(after)
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
        };
        timerfd_settime(timer.get_ref(), TimerfdTimerFlags::empty(), &setting)?;
        Ok(self.timer.insert(timer))
    }
}

/// Returns once the timer has expired; a readiness left from an earlier setting is read as
/// `WouldBlock` and waited past.
async fn expiry(timer: &AsyncFd<OwnedFd>) -> io::Result<()> {
    let mut expirations = [0u8; 8];
    loop {
        let mut ready = timer.readable().await?;
        if let Ok(read) = ready.try_io(|fd| Ok(rustix::io::read(fd.get_ref(), &mut expirations)?)) {
            // Read: the timer is not readable until it is armed and expires again.
            ready.clear_ready();
            return read.map(drop);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_short_wait_is_timed_on_the_timerfd_and_ends_no_earlier_than_its_deadline() {
        let mut clock = FineClock::default();
        for _ in 0..5 {
            let start = Instant::now();
            clock.sleep_until(start + Duration::from_micros(200)).await;
            let took = start.elapsed();
            assert!(
                took >= Duration::from_micros(200),
                "returned early: {took:?}"
            );
        }
        assert!(clock.timer.is_some(), "the short waits ran on the timerfd");
        clock.release();
        assert!(clock.timer.is_none());
    }

    #[tokio::test]
    async fn a_wait_dropped_after_its_timer_fired_does_not_end_the_next_one_early() {
        let mut clock = FineClock::default();
        {
            let wait = clock.sleep_until(Instant::now() + Duration::from_micros(100));
            tokio::pin!(wait);
            assert!(futures_util::poll!(&mut wait).is_pending());
            // The timer expires and the reactor marks it readable, but the wait is dropped
            // (as when the backend's event wins the driver's select) before it reads.
            std::thread::sleep(Duration::from_millis(1));
            tokio::task::yield_now().await;
        }
        // The reactor saw the expiry: the readiness the next wait meets is stale.
        {
            let Some(timer) = clock.timer.as_ref() else {
                panic!("the wait was timed on the timerfd")
            };
            let readable = timer.readable();
            tokio::pin!(readable);
            assert!(futures_util::poll!(&mut readable).is_ready());
        }
        let start = Instant::now();
        clock.sleep_until(start + Duration::from_millis(2)).await;
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(2), "ended early: {took:?}");
    }

    #[tokio::test]
    async fn a_long_wait_goes_to_tokio_and_opens_no_timer() {
        let mut clock = FineClock::default();
        let start = Instant::now();
        clock
            .sleep_until(start + FINE_LIMIT + Duration::from_millis(5))
            .await;
        assert!(start.elapsed() >= FINE_LIMIT + Duration::from_millis(5));
        assert!(clock.timer.is_none());
    }
}
