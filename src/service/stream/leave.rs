//! Leaving the group together: at a stop, no stream thread leaves the group until every
//! stream thread of the instance has made its final commit. A member leaving rebalances
//! the group, and the broker then refuses the other members' offsets still in flight
//! (`ILLEGAL_GENERATION`): their final batch would be aborted and the instance exit 1.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The stream threads still to finish their final commit.
pub struct LeaveTogether {
    pending: Mutex<usize>,
    all_done: Condvar,
}

impl LeaveTogether {
    pub fn new(threads: usize) -> Self {
        LeaveTogether {
            pending: Mutex::new(threads),
            all_done: Condvar::new(),
        }
    }

    /// A thread's place in the count: it finishes when `finished` is called or when it is
    /// dropped (an error or a panic counts as finished, so no one waits for it).
    pub fn join(&self) -> Member<'_> {
        Member {
            group: self,
            finished: false,
        }
    }

    fn finish(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        *pending = pending.saturating_sub(1);
        if *pending == 0 {
            self.all_done.notify_all();
        }
    }

    /// Waits until no thread is still committing, at most `max`; true when none is.
    fn wait(&self, max: Duration) -> bool {
        let deadline = Instant::now() + max;
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        while *pending > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            pending = self
                .all_done
                .wait_timeout(pending, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }
}

/// One stream thread's place in a `LeaveTogether`.
pub struct Member<'a> {
    group: &'a LeaveTogether,
    finished: bool,
}

impl Member<'_> {
    /// This thread's final commit is done (or failed): waits, at most `max`, for the
    /// others' before it may leave the group. False when some were still committing.
    pub fn finished(&mut self, max: Duration) -> bool {
        if !self.finished {
            self.finished = true;
            self.group.finish();
        }
        self.group.wait(max)
    }
}

impl Drop for Member<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.group.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(10);

    #[test]
    fn the_last_to_finish_releases_everyone() {
        let group = LeaveTogether::new(3);
        std::thread::scope(|s| {
            let waiting: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let mut m = group.join();
                        m.finished(LONG)
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(50));
            assert!(waiting.iter().all(|h| !h.is_finished()), "they wait");
            let mut last = group.join();
            assert!(last.finished(LONG));
            for h in waiting {
                assert!(h.join().unwrap());
            }
        });
    }

    #[test]
    fn a_thread_that_fails_counts_as_finished() {
        let group = LeaveTogether::new(2);
        drop(group.join());
        assert!(group.join().finished(LONG));
    }

    #[test]
    fn the_wait_is_bounded() {
        let group = LeaveTogether::new(2);
        let mut m = group.join();
        let started = Instant::now();
        assert!(!m.finished(Duration::from_millis(30)));
        assert!(started.elapsed() >= Duration::from_millis(30));
    }
}
