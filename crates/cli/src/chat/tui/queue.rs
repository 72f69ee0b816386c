//! Type-ahead: what the person sent while a turn was running, in order. Messages wait here and
//! are sent one turn each when the running turn ends; commands that touch the conversation
//! (`/compact`, `/undo`, `/rewind N`) wait here too and run then. `↑` on an empty box takes the last one
//! back to edit (clearing it removes it); the steering key takes the waiting messages out to
//! deliver them into the running turn instead.
//!
//! Pure: the UI decides when to send; [`Queue`] only keeps the order.

use std::collections::VecDeque;

use crate::chat::{Input, parse};

/// Texts waiting for the running turn to end, oldest first.
#[derive(Debug, Default)]
pub struct Queue {
    waiting: VecDeque<String>,
}

impl Queue {
    /// Adds a text at the end.
    pub fn push(&mut self, text: String) {
        self.waiting.push_back(text);
    }

    /// Puts texts back at the front, in their order (messages a turn ended without taking).
    pub fn put_back(&mut self, texts: Vec<String>) {
        for text in texts.into_iter().rev() {
            self.waiting.push_front(text);
        }
    }

    /// The oldest text, to send now.
    pub fn next(&mut self) -> Option<String> {
        self.waiting.pop_front()
    }

    /// The newest text, taken back to edit.
    pub fn take_last(&mut self) -> Option<String> {
        self.waiting.pop_back()
    }

    /// The waiting messages (not the commands), taken out in order to steer the running turn.
    pub fn take_messages(&mut self) -> Vec<String> {
        let (messages, commands): (VecDeque<String>, VecDeque<String>) =
            self.waiting.drain(..).partition(|t| matches!(parse(t), Some(Input::Message(_))));
        self.waiting = commands;
        messages.into()
    }

    /// The waiting texts, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &String> {
        self.waiting.iter()
    }

    /// How many wait.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

/// Whether `input`, sent while a turn runs, waits for the turn to end: messages do, and the
/// commands that change the conversation the turn is using; the others run at once.
pub fn waits_for_the_turn(input: &Input) -> bool {
    matches!(input, Input::Message(_) | Input::Compact | Input::Undo | Input::Approve | Input::Rewind(Some(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(texts: &[&str]) -> Queue {
        let mut q = Queue::default();
        for t in texts {
            q.push(t.to_string());
        }
        q
    }

    #[test]
    fn texts_come_out_in_the_order_they_were_sent() {
        let mut q = queue(&["first", "second"]);
        assert_eq!(q.next().as_deref(), Some("first"));
        assert_eq!(q.next().as_deref(), Some("second"));
        assert_eq!(q.next(), None);
    }

    #[test]
    fn the_last_text_is_taken_back_to_edit_and_the_rest_keep_their_order() {
        let mut q = queue(&["first", "second", "third"]);
        assert_eq!(q.take_last().as_deref(), Some("third"));
        let left: Vec<&String> = q.iter().collect();
        assert_eq!(left, ["first", "second"]);
    }

    #[test]
    fn steering_takes_the_messages_in_order_and_leaves_the_commands() {
        let mut q = queue(&["use tabs", "/compact", "and be brief"]);
        assert_eq!(q.take_messages(), ["use tabs", "and be brief"]);
        let left: Vec<&String> = q.iter().collect();
        assert_eq!(left, ["/compact"]);
    }

    #[test]
    fn texts_put_back_go_first_in_their_order() {
        let mut q = queue(&["later"]);
        q.put_back(vec!["a".into(), "b".into()]);
        assert_eq!(q.len(), 3);
        assert_eq!([q.next(), q.next(), q.next()], [Some("a".into()), Some("b".into()), Some("later".into())]);
    }

    #[test]
    fn messages_and_conversation_commands_wait_other_commands_run_at_once() {
        for text in ["hello", "/compact", "/undo", "/etc/passwd is a path\nsecond line"] {
            assert!(waits_for_the_turn(&parse(text).unwrap()), "{text}");
        }
        for text in ["/help", "/cost", "/session", "/tree", "/model", "/model gpt-4o", "/exit", "/nope"] {
            assert!(!waits_for_the_turn(&parse(text).unwrap()), "{text}");
        }
    }
}
