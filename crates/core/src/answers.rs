//! Questions a run puts to whoever drives it from outside — a served run's permission asks,
//! answered by its client over HTTP. A question is opened on an [`AnswerBoard`] under a fresh id
//! (announced in an `ask` event), answered once by that id, and closed when its asker stops
//! waiting (a timeout, a cancelled run), so a late answer finds nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// The client's answer to one question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAnswer {
    /// Whether the call may run.
    pub allow: bool,
    /// What the client says (shown to the model on a denial).
    pub reason: Option<String>,
}

/// The open questions of a server's runs, by id.
#[derive(Debug, Default)]
pub struct AnswerBoard {
    open: Mutex<HashMap<String, oneshot::Sender<ClientAnswer>>>,
}

/// An open question: receives its answer; closes it when dropped.
#[derive(Debug)]
pub struct Question {
    /// The id the answer names.
    pub id: String,
    board: Arc<AnswerBoard>,
    answer: Option<oneshot::Receiver<ClientAnswer>>,
}

impl AnswerBoard {
    /// Opens a question.
    pub fn open(self: &Arc<Self>) -> Question {
        let id = format!("ask_{}", uuid::Uuid::new_v4().simple());
        let (tx, rx) = oneshot::channel();
        self.lock().insert(id.clone(), tx);
        Question { id, board: self.clone(), answer: Some(rx) }
    }

    /// Answers the open question `id`; `false` when there is none (answered, expired, unknown).
    pub fn answer(&self, id: &str, answer: ClientAnswer) -> bool {
        self.lock().remove(id).is_some_and(|tx| tx.send(answer).is_ok())
    }

    /// How many questions are open.
    pub fn open_count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<ClientAnswer>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Question {
    /// Waits for the answer, at most `limit`; `None` when none came.
    pub async fn wait(mut self, limit: std::time::Duration) -> Option<ClientAnswer> {
        let answer = self.answer.take()?;
        tokio::time::timeout(limit, answer).await.ok()?.ok()
    }
}

impl Drop for Question {
    fn drop(&mut self) {
        self.board.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_question_is_answered_once_and_closed_when_its_asker_stops_waiting() {
        let board = Arc::new(AnswerBoard::default());
        let question = board.open();
        let id = question.id.clone();
        let waiting = tokio::spawn(question.wait(Duration::from_secs(5)));
        let yes = ClientAnswer { allow: true, reason: None };
        assert!(board.answer(&id, yes.clone()));
        assert_eq!(waiting.await.unwrap(), Some(yes.clone()));
        assert!(!board.answer(&id, yes.clone()), "answered once");

        let late = board.open();
        let late_id = late.id.clone();
        assert_eq!(late.wait(Duration::from_millis(10)).await, None);
        assert!(!board.answer(&late_id, yes), "closed after the timeout");
        assert_eq!(board.open_count(), 0);
    }
}
