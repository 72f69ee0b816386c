//! Which keys answer a shown question. A question often appears while the person is typing (it
//! arrives while the model streams), so typed text must never answer it: a letter answers only
//! after a quiet moment — no key for [`QUIET`] since the question appeared and since the key
//! before it. Any other key is typing and goes to the message box. "Always" is never one key:
//! `a` highlights it and Enter confirms. Tab and Shift-Tab move a highlight over the choices at
//! any time, and Enter answers with the highlighted one; a typed key drops the highlight.
//!
//! Pure: fed keys with the time they arrived, [`QuestionKeys`] says what each one does; the UI
//! acts on it.

use std::time::{Duration, Instant};

use crossterm::event::KeyCode;

/// How long typing must pause before a letter answers a question.
pub const QUIET: Duration = Duration::from_millis(800);

/// An answer to a question, in the order the question lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Run the call.
    Yes,
    /// Decline it.
    No,
    /// Decline it, with a reason the model reads.
    Reason,
    /// Run it, and every later call of this tool under this rule, for the session.
    Always,
}

impl Choice {
    /// The choices, in the order shown (and walked by Tab).
    pub const ALL: [Choice; 4] = [Choice::Yes, Choice::No, Choice::Reason, Choice::Always];

    /// How the question lists the choice.
    pub fn label(self) -> &'static str {
        match self {
            Choice::Yes => "[y] yes",
            Choice::No => "[n] no",
            Choice::Reason => "[r] no, with a reason",
            Choice::Always => "[a] then Enter: always (this tool, this rule, this session)",
        }
    }

    /// The choice `steps` places after this one (negative: before), going round.
    fn step(self, steps: isize) -> Choice {
        let at = Choice::ALL.iter().position(|c| *c == self).unwrap_or(0) as isize;
        let len = Choice::ALL.len() as isize;
        Choice::ALL[(at + steps).rem_euclid(len) as usize]
    }
}

/// What a key pressed while a question is shown does.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not the question's: the key does what it does without a question (typing goes to the
    /// message box).
    Pass,
    /// The question is answered.
    Answer(Choice),
    /// The key moved or dropped the highlight; nothing else.
    Highlighted,
}

/// The state of a shown question's keys: when it appeared, when the last key came, what is
/// highlighted.
#[derive(Debug)]
pub struct QuestionKeys {
    quiet: Duration,
    shown: Option<Instant>,
    last_key: Option<Instant>,
    highlight: Option<Choice>,
}

impl QuestionKeys {
    /// No question shown; letters answer after `quiet` without keys.
    pub fn new(quiet: Duration) -> Self {
        Self { quiet, shown: None, last_key: None, highlight: None }
    }

    /// A question appeared at `at` (nothing highlighted).
    pub fn show(&mut self, at: Instant) {
        self.shown = Some(at);
        self.highlight = None;
    }

    /// No question is shown any more.
    pub fn hide(&mut self) {
        self.shown = None;
        self.highlight = None;
    }

    /// The highlighted choice.
    pub fn highlight(&self) -> Option<Choice> {
        self.highlight
    }

    /// Whether a letter pressed at `at` would answer: a question is shown and neither it nor a
    /// key came within the quiet moment before.
    pub fn armed(&self, at: Instant) -> bool {
        let Some(shown) = self.shown else { return false };
        let since = self.last_key.map_or(shown, |key| key.max(shown));
        at.saturating_duration_since(since) >= self.quiet
    }

    /// Typing that is not a key of its own (a paste, a key with Ctrl or Alt): it restarts the
    /// quiet moment and drops the highlight.
    pub fn typed(&mut self, at: Instant) {
        self.note_key(at);
        self.highlight = None;
    }

    /// What a key (without Ctrl or Alt) pressed at `at` does.
    pub fn key(&mut self, code: KeyCode, at: Instant) -> Verdict {
        let armed = self.armed(at);
        self.note_key(at);
        if self.shown.is_none() {
            return Verdict::Pass;
        }
        match (code, self.highlight) {
            (KeyCode::Tab, now) => self.set_highlight(now.map_or(Choice::Yes, |c| c.step(1))),
            (KeyCode::BackTab, now) => self.set_highlight(now.map_or(Choice::Always, |c| c.step(-1))),
            (KeyCode::Enter, Some(choice)) => {
                self.highlight = None;
                Verdict::Answer(choice)
            }
            (KeyCode::Esc, Some(_)) => {
                self.highlight = None;
                Verdict::Highlighted
            }
            (KeyCode::Char(c), _) if armed => self.letter(c),
            _ => {
                self.highlight = None;
                Verdict::Pass
            }
        }
    }

    /// A letter after a quiet moment.
    fn letter(&mut self, c: char) -> Verdict {
        match c.to_ascii_lowercase() {
            'y' => Verdict::Answer(Choice::Yes),
            'n' => Verdict::Answer(Choice::No),
            'r' => Verdict::Answer(Choice::Reason),
            'a' => self.set_highlight(Choice::Always),
            _ => {
                self.highlight = None;
                Verdict::Pass
            }
        }
    }

    fn set_highlight(&mut self, choice: Choice) -> Verdict {
        self.highlight = Some(choice);
        Verdict::Highlighted
    }

    fn note_key(&mut self, at: Instant) {
        self.last_key = Some(self.last_key.map_or(at, |last| last.max(at)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Feeds `text` one letter every `gap` from `start`; the verdicts and the time after.
    fn type_text(keys: &mut QuestionKeys, text: &str, start: Instant, gap: Duration) -> (Vec<Verdict>, Instant) {
        let mut at = start;
        let verdicts = text
            .chars()
            .map(|c| {
                at += gap;
                keys.key(KeyCode::Char(c), at)
            })
            .collect();
        (verdicts, at)
    }

    #[test]
    fn a_sentence_typed_while_the_question_appears_never_answers_it() {
        let t0 = Instant::now();
        let mut keys = QuestionKeys::new(QUIET);
        let (_, at) = type_text(&mut keys, "so tell me, ", t0, ms(120));
        keys.show(at + ms(30));
        let (verdicts, _) = type_text(&mut keys, "what is this? yes, any rain? no. Always.", at, ms(120));
        assert!(verdicts.iter().all(|v| *v == Verdict::Pass), "{verdicts:?}");
        assert_eq!(keys.highlight(), None);
    }

    #[test]
    fn a_letter_after_a_quiet_moment_answers() {
        let t0 = Instant::now();
        for (letter, choice) in [('y', Choice::Yes), ('n', Choice::No), ('r', Choice::Reason)] {
            let mut keys = QuestionKeys::new(QUIET);
            keys.show(t0);
            assert_eq!(keys.key(KeyCode::Char(letter), t0 + QUIET), Verdict::Answer(choice));
        }
    }

    #[test]
    fn the_quiet_moment_starts_when_the_question_appears() {
        let t0 = Instant::now();
        let mut keys = QuestionKeys::new(QUIET);
        // Long quiet before the question: a letter right after it is still typing.
        keys.key(KeyCode::Char('x'), t0);
        keys.show(t0 + ms(5_000));
        assert!(!keys.armed(t0 + ms(5_100)));
        assert_eq!(keys.key(KeyCode::Char('y'), t0 + ms(5_100)), Verdict::Pass);
    }

    #[test]
    fn every_key_restarts_the_quiet_moment() {
        let t0 = Instant::now();
        let mut keys = QuestionKeys::new(QUIET);
        keys.show(t0);
        assert_eq!(keys.key(KeyCode::Char('w'), t0 + ms(700)), Verdict::Pass);
        // 900 ms after the question, but only 200 ms after the last key.
        assert_eq!(keys.key(KeyCode::Char('y'), t0 + ms(900)), Verdict::Pass);
        assert!(!keys.armed(t0 + ms(1_600)));
        assert!(keys.armed(t0 + ms(1_700)));
        assert_eq!(keys.key(KeyCode::Char('y'), t0 + ms(1_700)), Verdict::Answer(Choice::Yes));
    }

    #[test]
    fn a_paste_or_a_ctrl_key_restarts_the_quiet_moment() {
        let t0 = Instant::now();
        let mut keys = QuestionKeys::new(QUIET);
        keys.show(t0);
        keys.typed(t0 + ms(1_000));
        assert_eq!(keys.key(KeyCode::Char('y'), t0 + ms(1_300)), Verdict::Pass);
    }

    #[test]
    fn always_is_highlighted_by_a_and_confirmed_by_enter() {
        let t0 = Instant::now();
        let mut keys = QuestionKeys::new(QUIET);
        keys.show(t0);
        assert_eq!(keys.key(KeyCode::Char('a'), t0 + QUIET), Verdict::Highlighted);
        assert_eq!(keys.highlight(), Some(Choice::Always));
        assert_eq!(keys.key(KeyCode::Enter, t0 + QUIET + ms(300)), Verdict::Answer(Choice::Always));
        assert_eq!(keys.highlight(), None);
    }

    #[test]
    fn typing_after_a_drops_always_and_enter_then_answers_nothing() {
        let t0 = Instant::now();
        let mut keys = QuestionKeys::new(QUIET);
        keys.show(t0);
        assert_eq!(keys.key(KeyCode::Char('A'), t0 + QUIET), Verdict::Highlighted);
        let (verdicts, at) = type_text(&mut keys, "nd then", t0 + QUIET, ms(100));
        assert!(verdicts.iter().all(|v| *v == Verdict::Pass), "{verdicts:?}");
        assert_eq!(keys.highlight(), None);
        assert_eq!(keys.key(KeyCode::Enter, at + ms(100)), Verdict::Pass);
    }

    #[test]
    fn esc_drops_the_highlight_and_otherwise_passes() {
        let t0 = Instant::now();
        let mut keys = QuestionKeys::new(QUIET);
        keys.show(t0);
        keys.key(KeyCode::Char('a'), t0 + QUIET);
        assert_eq!(keys.key(KeyCode::Esc, t0 + QUIET + ms(10)), Verdict::Highlighted);
        assert_eq!(keys.highlight(), None);
        assert_eq!(keys.key(KeyCode::Esc, t0 + QUIET + ms(20)), Verdict::Pass);
    }

    #[test]
    fn tab_walks_the_choices_and_enter_answers_with_the_highlighted_one() {
        let t0 = Instant::now();
        let mut keys = QuestionKeys::new(QUIET);
        keys.show(t0);
        // Tab works at once: no one types a Tab into a sentence.
        let walked: Vec<_> = (1..=5)
            .map(|i| {
                keys.key(KeyCode::Tab, t0 + ms(i));
                keys.highlight()
            })
            .collect();
        let expected = [Choice::Yes, Choice::No, Choice::Reason, Choice::Always, Choice::Yes].map(Some);
        assert_eq!(walked, expected);
        keys.key(KeyCode::BackTab, t0 + ms(6));
        assert_eq!(keys.highlight(), Some(Choice::Always));
        keys.key(KeyCode::BackTab, t0 + ms(7));
        assert_eq!(keys.key(KeyCode::Enter, t0 + ms(8)), Verdict::Answer(Choice::Reason));
    }

    #[test]
    fn enter_without_a_highlight_is_the_message_boxs() {
        let t0 = Instant::now();
        let mut keys = QuestionKeys::new(QUIET);
        keys.show(t0);
        assert_eq!(keys.key(KeyCode::Enter, t0 + ms(2_000)), Verdict::Pass);
    }

    #[test]
    fn the_next_question_needs_a_quiet_moment_of_its_own() {
        let t0 = Instant::now();
        let mut keys = QuestionKeys::new(QUIET);
        keys.show(t0);
        assert_eq!(keys.key(KeyCode::Char('y'), t0 + QUIET), Verdict::Answer(Choice::Yes));
        keys.show(t0 + QUIET);
        assert_eq!(keys.key(KeyCode::Char('y'), t0 + QUIET + ms(100)), Verdict::Pass);
    }

    #[test]
    fn without_a_question_every_key_passes() {
        let t0 = Instant::now();
        let mut keys = QuestionKeys::new(QUIET);
        assert_eq!(keys.key(KeyCode::Char('y'), t0 + ms(5_000)), Verdict::Pass);
        assert_eq!(keys.key(KeyCode::Tab, t0 + ms(6_000)), Verdict::Pass);
        keys.show(t0 + ms(7_000));
        keys.hide();
        assert_eq!(keys.key(KeyCode::Char('y'), t0 + ms(9_000)), Verdict::Pass);
    }
}
