//! `CLIENT PAUSE timeout [WRITE|ALL]` and `CLIENT UNPAUSE`: this node holds
//! its clients' commands (all of them, or those that write) until the pause
//! ends, as Redis does. A held command is not refused: it waits, and runs
//! once the pause is over.
//!
//! A pause is this node's, as in Redis it is one server's: clients of other
//! nodes go on, and so does the cluster's log (a follower's forwarded
//! writes, lease expiries), which a pause of one node must not stop.

use tokio::sync::watch;
use tokio::time::Instant;

/// Until when, and what, is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Paused {
    until: Instant,
    /// `ALL`: every command; else (`WRITE`) only those that write.
    all: bool,
}

/// The node's pause. Cheap to check when none is set.
pub struct Pause {
    state: watch::Sender<Option<Paused>>,
}

impl Default for Pause {
    fn default() -> Self {
        Pause { state: watch::Sender::new(None) }
    }
}

impl Pause {
    /// `CLIENT PAUSE`: holds commands (every one if `all`, else writes)
    /// until `until`. A pause still running is only ever extended and made
    /// stricter, never shortened or relaxed (Redis's rule); `CLIENT UNPAUSE`
    /// ends it.
    pub fn pause(&self, until: Instant, all: bool) {
        let now = Instant::now();
        self.state.send_modify(|state| {
            *state = Some(match *state {
                Some(p) if p.until > now => Paused { until: p.until.max(until), all: p.all || all },
                _ => Paused { until, all },
            })
        });
    }

    /// `CLIENT UNPAUSE`.
    pub fn unpause(&self) {
        self.state.send_replace(None);
    }

    /// Whether a command is held now: any command under `ALL`, one that
    /// writes (`writes`) under `WRITE`.
    pub fn holds(&self, writes: bool) -> bool {
        matches!(*self.state.borrow(), Some(p) if (p.all || writes) && p.until > Instant::now())
    }

    /// Waits until a command that writes (`writes`) or not is no longer
    /// held: the pause ran out, was ended, or was relaxed to `WRITE` for a
    /// command that does not write. Cancel-safe.
    pub async fn until_released(&self, writes: bool) {
        let mut changes = self.state.subscribe();
        loop {
            let current = *changes.borrow_and_update();
            match current {
                Some(p) if (p.all || writes) && p.until > Instant::now() => {
                    // A day at a time: tokio's timer takes no deadline
                    // years away, and a pause may be set that long.
                    let wake = p.until.min(Instant::now() + std::time::Duration::from_secs(24 * 3600));
                    tokio::select! {
                        _ = tokio::time::sleep_until(wake) => {}
                        _ = changes.changed() => {}
                    }
                }
                _ => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn writes_wait_out_a_write_pause_and_reads_do_not() {
        let pause = Pause::default();
        assert!(!pause.holds(true));
        pause.pause(Instant::now() + Duration::from_millis(100), false);
        assert!(pause.holds(true));
        assert!(!pause.holds(false));
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(30), pause.until_released(false)).await.expect("a read is not held");
        assert!(pause.holds(true), "the read waited out the pause");
        pause.until_released(true).await;
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(!pause.holds(true));
    }

    #[tokio::test]
    async fn a_running_pause_is_only_extended_and_made_stricter() {
        let pause = Pause::default();
        let t0 = Instant::now();
        pause.pause(t0 + Duration::from_secs(60), true);
        // Shorter and weaker: changes nothing.
        pause.pause(t0 + Duration::from_millis(100), false);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(pause.holds(false), "shortened or relaxed by a weaker pause");
        pause.unpause();
        assert!(!pause.holds(true));
        // One that has run out is replaced whole, not merged.
        pause.pause(Instant::now() + Duration::from_millis(50), true);
        pause.until_released(true).await;
        pause.pause(Instant::now() + Duration::from_secs(60), false);
        assert!(!pause.holds(false));
        assert!(pause.holds(true));
    }

    #[tokio::test]
    async fn unpause_releases_the_held() {
        let pause = std::sync::Arc::new(Pause::default());
        pause.pause(Instant::now() + Duration::from_secs(3600), true);
        let held = tokio::spawn({
            let pause = pause.clone();
            async move { pause.until_released(false).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!held.is_finished());
        pause.unpause();
        tokio::time::timeout(Duration::from_secs(1), held).await.expect("released by UNPAUSE").unwrap();
        assert!(!pause.holds(true));
    }

    #[tokio::test]
    async fn relaxing_to_write_releases_reads() {
        let pause = std::sync::Arc::new(Pause::default());
        pause.pause(Instant::now() + Duration::from_secs(60), true);
        let read = tokio::spawn({
            let pause = pause.clone();
            async move { pause.until_released(false).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        // UNPAUSE then a WRITE pause: reads go, writes stay held.
        pause.unpause();
        pause.pause(Instant::now() + Duration::from_secs(60), false);
        tokio::time::timeout(Duration::from_secs(1), read).await.expect("a read released").unwrap();
        assert!(pause.holds(true));
        assert!(!pause.holds(false));
    }
}
