//! Prompts assembled within a character budget. A prompt is fixed text (the goal, its place in
//! the tree) and titled sections of items (evidence, sub-goal results, capabilities). When the
//! whole does not fit, every item gets a fair share of what is left — short items whole, long
//! ones shortened in the middle with a visible `[… N characters elided …]` — and a section
//! says so in its title ("2 of 5 items shortened to fit the prompt budget"). Only when even a
//! short view of each item cannot fit are the last items left out, and counted. Nothing is
//! dropped silently, and every item that fits a minimal view is shown.

/// The fewest characters an item is shortened to; below this an item is left out instead.
const MIN_ITEM_CHARS: usize = 160;
/// Room reserved per section for its title's elision note.
const NOTE_CHARS: usize = 90;

/// A prompt being assembled.
#[derive(Debug, Clone, Default)]
pub struct Prompt {
    parts: Vec<Part>,
}

#[derive(Debug, Clone)]
enum Part {
    Fixed(String),
    Section(Section),
}

#[derive(Debug, Clone)]
struct Section {
    title: String,
    items: Vec<String>,
    empty: String,
}

impl Prompt {
    /// An empty prompt.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds fixed text (kept whole unless it alone overflows the budget).
    pub fn text(&mut self, text: impl Into<String>) -> &mut Self {
        self.parts.push(Part::Fixed(text.into()));
        self
    }

    /// Adds a titled section of items, each rendered as `- item`; `empty` is shown when there
    /// are none (nothing at all when `empty` is empty).
    pub fn section(&mut self, title: impl Into<String>, items: Vec<String>, empty: impl Into<String>) -> &mut Self {
        self.parts.push(Part::Section(Section { title: title.into(), items, empty: empty.into() }));
        self
    }

    /// The prompt in at most `budget` characters (or its fixed text alone, shortened, when
    /// that is all that fits).
    pub fn render(&self, budget: usize) -> String {
        let fixed: usize = self.parts.iter().map(Part::fixed_chars).sum();
        let fixed_share = if fixed > budget / 2 { Some(budget / 2 / self.fixed_count().max(1)) } else { None };
        let fixed_used: usize = match fixed_share {
            Some(share) => self
                .parts
                .iter()
                .map(|p| match p {
                    Part::Fixed(_) => p.fixed_chars().min(share),
                    Part::Section(_) => p.fixed_chars(),
                })
                .sum(),
            None => fixed,
        };
        let available = budget.saturating_sub(fixed_used);
        let lengths: Vec<usize> = self.items().map(|i| chars(i) + 3).collect();
        let shown = shown_count(&lengths, available);
        let shares = water_fill(&lengths[..shown], available);
        let mut out = String::new();
        let mut index = 0;
        for part in &self.parts {
            match part {
                Part::Fixed(text) => out.push_str(&match fixed_share {
                    Some(share) => shorten(text, share),
                    None => text.clone(),
                }),
                Part::Section(s) => {
                    let range = index..index + s.items.len();
                    index = range.end;
                    render_section(s, range, shown, &shares, &mut out);
                }
            }
        }
        out
    }

    fn fixed_count(&self) -> usize {
        self.parts.iter().filter(|p| matches!(p, Part::Fixed(_))).count()
    }

    fn items(&self) -> impl Iterator<Item = &String> {
        self.parts.iter().flat_map(|p| match p {
            Part::Section(s) => s.items.iter(),
            Part::Fixed(_) => [].iter(),
        })
    }
}

impl Part {
    /// Characters that are not items: fixed text, section titles and their notes.
    fn fixed_chars(&self) -> usize {
        match self {
            Part::Fixed(t) => chars(t),
            Part::Section(s) => chars(&s.title) + NOTE_CHARS + chars(&s.empty) + 4,
        }
    }
}

fn render_section(s: &Section, range: std::ops::Range<usize>, shown: usize, shares: &[usize], out: &mut String) {
    let total = s.items.len();
    let mut body = String::new();
    let (mut shortened, mut omitted) = (0, 0);
    for (item, i) in s.items.iter().zip(range) {
        if i >= shown {
            omitted += 1;
            continue;
        }
        let room = shares[i].saturating_sub(3);
        if chars(item) > room {
            shortened += 1;
        }
        body.push_str("- ");
        body.push_str(&shorten(item, room));
        body.push('\n');
    }
    let mut notes = Vec::new();
    if shortened > 0 {
        notes.push(format!("{shortened} of {total} shortened"));
    }
    if omitted > 0 {
        notes.push(format!("the last {omitted} of {total} left out"));
    }
    out.push_str(&format!("\n{}", s.title));
    if !notes.is_empty() {
        out.push_str(&format!(" ({} to fit the prompt budget)", notes.join(", ")));
    }
    out.push_str(":\n");
    if total == 0 && !s.empty.is_empty() {
        out.push_str(&format!("{}\n", s.empty));
    }
    out.push_str(&body);
}

/// How many items (from the first) can be shown with at least a minimal view each.
fn shown_count(lengths: &[usize], available: usize) -> usize {
    let mut used = 0;
    for (i, &len) in lengths.iter().enumerate() {
        used += len.min(MIN_ITEM_CHARS);
        if used > available {
            return i;
        }
    }
    lengths.len()
}

/// Shares of `available` for items of these lengths: the short ones whole, the rest an equal
/// share of what remains.
fn water_fill(lengths: &[usize], available: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    let mut shares = vec![0; lengths.len()];
    let mut remaining = available;
    for (k, &i) in order.iter().enumerate() {
        let fair = remaining / (lengths.len() - k);
        shares[i] = lengths[i].min(fair);
        remaining -= shares[i];
    }
    shares
}

/// `text` in at most `max` characters: whole when it fits, else its head and tail around a
/// marker saying how much was elided.
pub fn shorten(text: &str, max: usize) -> String {
    let len = chars(text);
    if len <= max {
        return text.to_string();
    }
    let marker = |n: usize| format!(" [… {n} characters elided …] ");
    let keep = max.saturating_sub(chars(&marker(len)));
    let head = keep * 2 / 3;
    let tail = keep - head;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(len - tail).collect();
    format!("{start}{}{end}", marker(len - head - tail))
}

fn chars(text: &str) -> usize {
    text.chars().count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(items: Vec<String>) -> Prompt {
        let mut p = Prompt::new();
        p.text("Current goal: g\n").section("Evidence so far", items, "(none yet)");
        p
    }

    #[test]
    fn everything_fits_whole_without_a_note() {
        let text = prompt(vec!["a".into(), "b".into()]).render(1000);
        assert_eq!(text, "Current goal: g\n\nEvidence so far:\n- a\n- b\n");
    }

    #[test]
    fn long_items_are_shortened_fairly_and_the_section_says_so() {
        let items = vec!["x".repeat(50_000), "short".into(), "y".repeat(50_000)];
        let text = prompt(items).render(4000);
        assert!(text.chars().count() <= 4000, "{}", text.chars().count());
        assert!(text.contains("(2 of 3 shortened to fit the prompt budget)"), "{text}");
        assert!(text.contains("- short\n"));
        assert!(text.contains("characters elided"));
        let xs = text.matches('x').count();
        let ys = text.matches('y').count();
        assert!(xs > 1000 && ys > 1000 && xs.abs_diff(ys) < 10, "fair shares: {xs} vs {ys}");
    }

    #[test]
    fn when_minimal_views_do_not_fit_the_last_items_are_counted_not_hidden() {
        let items: Vec<String> = (0..100).map(|i| format!("item {i} {}", "z".repeat(500))).collect();
        let text = prompt(items).render(3000);
        assert!(text.chars().count() <= 3000, "{}", text.chars().count());
        assert!(text.contains("item 0 "), "the first items are kept");
        assert!(text.contains("left out"), "{text}");
    }

    #[test]
    fn empty_section_shows_its_placeholder() {
        assert!(prompt(vec![]).render(500).ends_with("Evidence so far:\n(none yet)\n"));
    }

    #[test]
    fn shorten_keeps_head_and_tail_within_the_limit() {
        let s = shorten(&format!("BEGIN{}END", "m".repeat(1000)), 100);
        assert!(s.chars().count() <= 100 && s.starts_with("BEGIN") && s.ends_with("END"), "{s}");
    }

    #[test]
    fn overflowing_fixed_text_is_shortened_too() {
        let mut p = Prompt::new();
        p.text("o".repeat(10_000)).section("S", vec!["i".repeat(10_000)], "");
        assert!(p.render(2000).chars().count() <= 2000);
    }
}
