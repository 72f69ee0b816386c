//! What the running turn is doing, for the status line: the activity ("thinking", "running
//! run_shell", …), since when, and the time spent waiting for the person's answer to a
//! question — which is the person's time, not the activity's, so the seconds shown leave it out.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// What the status line says while a question waits.
pub const WAITING_FOR_ANSWER: &str = "waiting for your answer";

/// The running turn.
pub struct Working {
    /// Its cancel token.
    pub token: CancellationToken,
    doing: String,
    /// When the current activity began.
    since: Instant,
    /// Time of the current activity spent waiting for answers that were given.
    waited: Duration,
    /// Since when a question waits, if one does.
    asked: Option<Instant>,
}

impl Working {
    /// A turn that starts at `now`, thinking.
    pub fn new(token: CancellationToken, now: Instant) -> Self {
        Self { token, doing: "thinking".into(), since: now, waited: Duration::ZERO, asked: None }
    }

    /// The turn does `what` from `now` on; a new activity's time starts at zero.
    pub fn set_doing(&mut self, what: &str, now: Instant) {
        if self.doing == what {
            return;
        }
        self.doing = what.to_string();
        self.since = now;
        self.waited = Duration::ZERO;
        if self.asked.is_some() {
            self.asked = Some(now);
        }
    }

    /// A question waits for the person from `now` on (or no longer does), so the activity's
    /// clock stops (or goes on).
    pub fn set_asking(&mut self, asking: bool, now: Instant) {
        match (asking, self.asked) {
            (true, None) => self.asked = Some(now),
            (false, Some(at)) => {
                self.waited += now.saturating_duration_since(at);
                self.asked = None;
            }
            _ => {}
        }
    }

    /// What the status line says: the activity and its time, or that the person is asked.
    pub fn status(&self, now: Instant) -> String {
        if self.asked.is_some() {
            return WAITING_FOR_ANSWER.to_string();
        }
        format!("{} {:.1}s", self.doing, self.elapsed(now).as_secs_f64())
    }

    /// Time spent on the current activity, waits for the person left out.
    pub fn elapsed(&self, now: Instant) -> Duration {
        let waiting = self.asked.map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        now.saturating_duration_since(self.since).saturating_sub(self.waited + waiting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_for_an_answer_is_not_counted_as_the_tools_time() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut w = Working::new(CancellationToken::new(), t0);
        assert_eq!(w.status(s(2)), "thinking 2.0s");
        w.set_doing("running run_shell", s(2));
        w.set_asking(true, s(3));
        assert_eq!(w.status(s(30)), WAITING_FOR_ANSWER);
        assert_eq!(w.elapsed(s(30)), Duration::from_secs(1));
        w.set_asking(false, s(40));
        // 1 s before the question, 2 s after the answer; the 37 s of waiting are not counted.
        assert_eq!(w.status(s(42)), "running run_shell 3.0s");
        w.set_doing("thinking", s(43));
        assert_eq!(w.status(s(44)), "thinking 1.0s");
    }

    #[test]
    fn the_same_activity_keeps_its_clock() {
        let t0 = Instant::now();
        let mut w = Working::new(CancellationToken::new(), t0);
        w.set_doing("answering", t0 + Duration::from_secs(1));
        w.set_doing("answering", t0 + Duration::from_secs(2));
        assert_eq!(w.status(t0 + Duration::from_secs(3)), "answering 2.0s");
    }
}
