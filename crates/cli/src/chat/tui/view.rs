//! Drawing the chat: the conversation (scrolled to its end unless the person scrolled up), the
//! run tree pane, the status line and the input box.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};

use super::complete::Kind;
use super::question::Choice;
use super::{App, Entry, Mode, TreeView, markdown};
use crate::chat::Chat;

/// The spinner's frames.
const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// Most lines of an unfolded tool result.
const UNFOLDED_LINES: usize = 200;

/// Columns between tab stops.
const TAB_STOP: usize = 8;

/// `line` with each tab expanded to spaces up to the next tab stop (a terminal widget drops
/// tabs, which would glue the columns of a tool's output together).
pub fn expand_tabs(line: &str) -> std::borrow::Cow<'_, str> {
    if !line.contains('\t') {
        return line.into();
    }
    let mut out = String::with_capacity(line.len() + TAB_STOP);
    let mut column = 0;
    for c in line.chars() {
        if c == '\t' {
            let spaces = TAB_STOP - column % TAB_STOP;
            out.extend(std::iter::repeat_n(' ', spaces));
            column += spaces;
        } else {
            out.push(c);
            column += Span::raw(c.to_string()).width();
        }
    }
    out.into()
}

/// Draws the whole screen.
pub fn draw(f: &mut Frame, app: &App, chat: &Chat) {
    let input_height = (app.editor.lines().len() as u16).clamp(1, 8) + 2;
    let mut waiting = waiting_lines(app);
    waiting.extend(popup_lines(app));
    let [main, queued, status, input] = Layout::vertical([
        Constraint::Min(3),
        Constraint::Length(waiting.len() as u16),
        Constraint::Length(1),
        Constraint::Length(input_height),
    ])
    .areas(f.area());
    f.render_widget(Paragraph::new(waiting), queued);
    if app.tree_view != TreeView::Hidden {
        let [conversation, tree] =
            Layout::horizontal([Constraint::Percentage(68), Constraint::Percentage(32)]).areas(main);
        draw_conversation(f, app, conversation);
        let open = app.tree_view == TreeView::Open;
        let title = format!(" run tree ({}){} ", app.tree.len(), if open { " · every call" } else { "" });
        let block = Block::default().borders(Borders::LEFT).title(title);
        let lines = app.tree.lines(std::time::Instant::now(), open);
        // The end of a long tree (the runs at work) stays in sight.
        let top = (lines.len() as u16).saturating_sub(tree.height);
        f.render_widget(Paragraph::new(lines).block(block).scroll((top, 0)), tree);
    } else {
        draw_conversation(f, app, main);
    }
    f.render_widget(Paragraph::new(status_line(app, chat)), status);
    draw_input(f, app, input);
}

/// The state of the shown question's keys, for drawing it.
#[derive(Clone, Copy)]
struct Keys {
    /// A letter would answer now.
    armed: bool,
    highlight: Option<Choice>,
}

fn draw_conversation(f: &mut Frame, app: &App, area: Rect) {
    let mut lines: Vec<Line<'static>> = Vec::new();
    let keys = Keys { armed: app.question.armed(std::time::Instant::now()), highlight: app.question.highlight() };
    for entry in &app.entries {
        entry_lines(entry, app.unfold, keys, &mut lines);
        lines.push(Line::default());
    }
    let paragraph = Paragraph::new(lines).wrap(Wrap { trim: false });
    let total = paragraph.line_count(area.width) as u16;
    let top = total.saturating_sub(area.height).saturating_sub(app.scroll);
    f.render_widget(paragraph.scroll((top, 0)), area);
}

fn styled_lines(text: &str, prefix: &str, style: Style, out: &mut Vec<Line<'static>>) {
    for (i, line) in text.lines().enumerate() {
        let head = if i == 0 { prefix.to_string() } else { " ".repeat(prefix.chars().count()) };
        out.push(Line::from(vec![Span::styled(head, style), Span::styled(expand_tabs(line).into_owned(), style)]));
    }
}

fn entry_lines(entry: &Entry, unfold: bool, keys: Keys, out: &mut Vec<Line<'static>>) {
    let dim = Style::new().fg(Color::DarkGray);
    match entry {
        Entry::User(text) => {
            styled_lines(text, "› ", Style::new().fg(Color::Blue).add_modifier(Modifier::BOLD), out);
        }
        Entry::Answer(text) => out.extend(markdown::render(text)),
        Entry::Diff(text) => out.extend(text.lines().map(|l| super::approval::patch_line(&expand_tabs(l)))),
        Entry::Reasoning(text) => styled_lines(text, "thinking: ", dim.add_modifier(Modifier::ITALIC), out),
        Entry::Tool { title, result, inner, .. } => {
            let (mark, style) = match result {
                None => ("● ", Style::new().fg(Color::Yellow)),
                Some((_, false)) => ("● ", Style::new().fg(Color::Green)),
                Some((_, true)) => ("● ", Style::new().fg(Color::Red)),
            };
            out.push(Line::from(vec![Span::styled(mark, style), Span::raw(title.clone())]));
            if unfold {
                out.extend(inner.iter().map(|l| Line::styled(format!("  ↳ {l}"), dim)));
            } else if let Some(last) = inner.last() {
                out.push(Line::styled(
                    format!("  ↳ {} call(s) inside, the last: {last} (Ctrl-O lists them)", inner.len()),
                    dim,
                ));
            }
            if let Some((output, is_error)) = result {
                let style = if *is_error { Style::new().fg(Color::Red) } else { dim };
                let count = output.lines().count();
                if unfold {
                    for line in output.lines().take(UNFOLDED_LINES) {
                        out.push(Line::styled(format!("  │ {}", expand_tabs(line)), style));
                    }
                } else {
                    let first = recursive_core::text::one_line(&expand_tabs(output.lines().next().unwrap_or("")), 100);
                    let more =
                        if count > 1 { format!(" (+{} lines, Ctrl-O unfolds)", count - 1) } else { String::new() };
                    out.push(Line::styled(format!("  ⎿ {first}{more}"), style));
                }
            }
        }
        Entry::Approval { title, body, answer } => {
            out.push(Line::styled(format!("? {title}"), Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD)));
            for line in body {
                let mut spans = vec![Span::raw("  ")];
                spans.extend(line.spans.iter().cloned().map(|s| s.patch_style(line.style)));
                out.push(Line::from(spans));
            }
            match answer {
                None => question_keys(keys, out),
                Some(said) => out.push(Line::styled(format!("  → {said}"), dim)),
            }
        }
        Entry::Note(text) => styled_lines(text, "", dim, out),
        Entry::Error(text) => styled_lines(text, "error: ", Style::new().fg(Color::Red), out),
    }
}

/// The choices of the shown question and what the keys do.
fn question_keys(keys: Keys, out: &mut Vec<Line<'static>>) {
    let colour = if keys.armed { Color::Magenta } else { Color::DarkGray };
    let mut spans = vec![Span::raw("  ")];
    for choice in Choice::ALL {
        let mut style = Style::new().fg(colour);
        if keys.highlight == Some(choice) {
            style = style.fg(Color::Magenta).add_modifier(Modifier::REVERSED | Modifier::BOLD);
        }
        spans.push(Span::styled(choice.label(), style));
        spans.push(Span::raw("   "));
    }
    out.push(Line::from(spans));
    let when = if keys.armed {
        "  (these keys answer now)"
    } else {
        "  (typing goes to the message box; these keys answer once typing pauses)"
    };
    out.push(Line::styled(
        format!("{when} · Tab / Shift-Tab highlight a choice, Enter answers with it"),
        Style::new().fg(Color::DarkGray),
    ));
    if keys.highlight == Some(Choice::Always) {
        out.push(Line::styled(
            "  allow this tool under this rule for the rest of the session, without asking? Enter confirms · Esc cancels",
            Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD),
        ));
    }
}

fn status_line(app: &App, chat: &Chat) -> Line<'static> {
    let mut spans = Vec::new();
    if let Some(working) = &app.working {
        spans.push(Span::styled(
            format!("{} {} ", SPINNER[app.spinner % SPINNER.len()], working.status(std::time::Instant::now())),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
        spans.push(Span::styled("(Esc interrupts) ", Style::new().fg(Color::DarkGray)));
    }
    let usage = chat.scope.usage();
    let (used, window) = app.context;
    let context = match window {
        Some(w) if w > 0 => format!("context ~{used}/{w} ({}%)", used * 100 / w),
        _ => format!("context ~{used} tokens"),
    };
    let mode = chat.mode();
    let shown = match mode {
        recursive_tools::Mode::Ask => Style::new().fg(Color::DarkGray),
        recursive_tools::Mode::Plan => Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
        _ => Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD),
    };
    spans.push(Span::styled(format!("{mode} "), shown));
    spans.push(Span::styled(
        format!(
            "(Shift-Tab) · {} · {} in / {} out · ${:.4} · {context} · Ctrl-T tree",
            app.status_model,
            usage.input_tokens,
            usage.output_tokens,
            chat.scope.cost_usd()
        ),
        Style::new().fg(Color::DarkGray),
    ));
    Line::from(spans)
}

/// Most waiting texts listed above the input box.
const WAITING_SHOWN: usize = 5;

/// What waits for the running turn: steered messages (for its next model call) and queued texts
/// (for its end), one line each, with the keys that act on them; nothing when none waits.
fn waiting_lines(app: &App) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    let steer = Style::new().fg(Color::Cyan);
    for text in app.steering.iter().take(WAITING_SHOWN) {
        lines.push(Line::styled(format!("  ↳ steering: {}", recursive_core::text::one_line(text, 120)), steer));
    }
    if app.queue.is_empty() {
        return lines;
    }
    let hint = if app.working.is_some() {
        "queued — sent when the turn ends · Ctrl-S steers them into this turn · ↑ on an empty box edits the last"
    } else {
        "queued — Enter on an empty box sends the next · ↑ on an empty box edits the last"
    };
    lines.push(Line::styled(hint, Style::new().fg(Color::DarkGray)));
    for text in app.queue.iter().take(WAITING_SHOWN) {
        lines.push(Line::styled(
            format!("  ⏳ {}", recursive_core::text::one_line(text, 120)),
            Style::new().fg(Color::Blue),
        ));
    }
    if app.queue.len() > WAITING_SHOWN {
        lines.push(Line::styled(
            format!("  … {} more", app.queue.len() - WAITING_SHOWN),
            Style::new().fg(Color::DarkGray),
        ));
    }
    lines
}

/// The completion popup's lines: a heading, then the choices, the picked one reversed.
fn popup_lines(app: &App) -> Vec<Line<'static>> {
    if app.escaped {
        return vec![Line::styled("  Esc again: list the prompts to rewind to", Style::new().fg(Color::DarkGray))];
    }
    let Some(popup) = &app.popup else { return Vec::new() };
    let what = match popup.kind {
        Kind::File => "files",
        Kind::Command => "commands",
        Kind::History => "earlier prompts (Ctrl-R)",
    };
    let dim = Style::new().fg(Color::DarkGray);
    let mut lines = vec![Line::styled(format!("  {what} · ↑↓ pick · Tab accepts · Esc closes"), dim)];
    for (i, (_, shown)) in popup.items.iter().enumerate() {
        let text = format!("  {}", recursive_core::text::one_line(shown, 150));
        let style = if i == popup.selected { Style::new().add_modifier(Modifier::REVERSED) } else { Style::new() };
        lines.push(Line::styled(text, style));
    }
    lines
}

fn draw_input(f: &mut Frame, app: &App, area: Rect) {
    let title = if app.mode == Mode::Reason {
        " why not? (Enter sends the reason to the model · Esc goes back to the question) "
    } else if !app.asks.is_empty() {
        " message · a question waits above: y yes · n no · r a reason · a + Enter always (after a pause in typing) "
    } else if app.working.is_some() {
        " message · Enter queues it for after this turn · Ctrl-S steers it into this turn · Alt-Enter new line · /help "
    } else {
        " message · Enter sends · Alt-Enter new line · /help "
    };
    let block = Block::default().borders(Borders::ALL).title(title).border_style(Style::new().fg(Color::DarkGray));
    let inner = block.inner(area);
    let (row, col) = app.editor.cursor();
    let visible = inner.height as usize;
    let first = (row + 1).saturating_sub(visible);
    let lines: Vec<Line> = app.editor.lines().iter().skip(first).map(|l| Line::raw(l.as_str())).collect();
    f.render_widget(Paragraph::new(lines).block(block), area);
    let before: String = app.editor.lines()[row].chars().take(col).collect();
    let x = Span::raw(before).width() as u16;
    f.set_cursor_position(Position::new(
        inner.x + x.min(inner.width.saturating_sub(1)),
        inner.y + (row - first) as u16,
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tabs_become_spaces_up_to_the_next_tab_stop() {
        assert_eq!(expand_tabs("a\tb"), "a       b");
        assert_eq!(expand_tabs("name\tsize\n"), "name    size\n");
        assert_eq!(expand_tabs("12345678\tx"), "12345678        x");
        assert_eq!(expand_tabs("\t\tx"), format!("{}x", " ".repeat(16)));
        assert_eq!(expand_tabs("né\tx"), "né      x");
        assert_eq!(expand_tabs("no tabs"), "no tabs");
    }

    #[test]
    fn a_tool_results_tabs_are_shown_as_spaces() {
        let tool = Entry::Tool {
            id: "c1".into(),
            title: "run_shell(ls)".into(),
            result: Some(("alpha\t1\nbeta\t22".into(), false)),
            inner: Vec::new(),
        };
        let keys = Keys { armed: false, highlight: None };
        for (unfold, want) in [(false, "  ⎿ alpha   1"), (true, "  │ beta    22")] {
            let mut out = Vec::new();
            entry_lines(&tool, unfold, keys, &mut out);
            let text: Vec<String> = out.iter().map(|l| l.to_string()).collect();
            assert!(text.iter().any(|l| l.starts_with(want)), "{text:?}");
        }
    }
}
