//! Diagnostics: what is wrong with a script, where (byte span, 1-based line and column), and
//! how to show it the way rustc does. Columns count characters, not bytes, so that a caret
//! lands under the right character of a line with non-ASCII text.

/// A byte range of the script's source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub const fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }
}

/// A span with its line and column (both 1-based; the column in characters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub span: Span,
    pub line: usize,
    pub column: usize,
}

/// More about a diagnostic, such as where a map's type was fixed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub message: String,
    pub at: Option<Location>,
}

/// One error in a script.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{column}: {message}")]
pub struct Diagnostic {
    pub message: String,
    pub span: Span,
    pub line: usize,
    pub column: usize,
    pub notes: Vec<Note>,
}

/// The errors of a script, in source order (the first hundred).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", summary(.errors))]
pub struct Diagnostics {
    pub errors: Vec<Diagnostic>,
}

fn summary(errors: &[Diagnostic]) -> String {
    match errors {
        [] => "no errors".to_string(),
        [one] => one.to_string(),
        [first, rest @ ..] => format!("{first} (and {} more errors)", rest.len()),
    }
}

impl Diagnostics {
    /// The text rustc would print: `error: ...`, `--> file:line:col`, the line and carets under
    /// the span, then the notes.
    pub fn render(&self, source: &str, file_name: &str) -> String {
        let mut out = String::new();
        for error in &self.errors {
            let here = Location { span: error.span, line: error.line, column: error.column };
            let gutter = error.notes.iter().filter_map(|n| n.at).map(|at| at.line).chain([error.line]).max().unwrap_or(1);
            let gutter = gutter.to_string().len();
            out.push_str(&format!("error: {}\n", error.message));
            snippet(&mut out, source, file_name, here, gutter);
            for note in &error.notes {
                match note.at {
                    Some(at) => {
                        out.push_str(&format!("note: {}\n", note.message));
                        snippet(&mut out, source, file_name, at, gutter);
                    }
                    None => out.push_str(&format!("{:gutter$} = note: {}\n", "", note.message)),
                }
            }
            out.push('\n');
        }
        out
    }
}

/// ` --> file:l:c`, the line (tabs shown as four spaces) and `^` under the span's part on it.
fn snippet(out: &mut String, source: &str, file_name: &str, at: Location, gutter: usize) {
    out.push_str(&format!("{:gutter$}--> {file_name}:{}:{}\n", "", at.line, at.column));
    let Some(text) = source.split('\n').nth(at.line.saturating_sub(1)) else { return };
    let text = text.strip_suffix('\r').unwrap_or(text);
    let (mut shown, mut pad, mut carets) = (String::new(), 0, 0);
    let first = at.column.saturating_sub(1);
    let count = source.get(at.span.start..at.span.end).map_or(1, |s| s.chars().take_while(|&c| c != '\n').count().max(1));
    for (i, c) in text.chars().enumerate() {
        let width = if c == '\t' { 4 } else { 1 };
        match c {
            '\t' => shown.push_str("    "),
            c => shown.push(c),
        }
        if i < first {
            pad += width;
        } else if i < first + count {
            carets += width;
        }
    }
    out.push_str(&format!("{:gutter$} |\n{:>gutter$} | {shown}\n", "", at.line));
    out.push_str(&format!("{:gutter$} | {:pad$}{}\n", "", "", "^".repeat(carets.max(1))));
}

/// The source text and where its lines start: turns spans into lines and columns.
#[derive(Clone, Debug, Default)]
pub(crate) struct SourceMap {
    text: String,
    line_starts: Vec<usize>,
}

impl SourceMap {
    pub fn new(text: &str) -> SourceMap {
        let line_starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        SourceMap { text: text.to_string(), line_starts }
    }

    pub fn locate(&self, span: Span) -> Location {
        let mut at = span.start.min(self.text.len());
        while !self.text.is_char_boundary(at) {
            at -= 1;
        }
        let line = self.line_starts.partition_point(|&s| s <= at);
        let start = self.line_starts[line - 1];
        Location { span, line, column: self.text[start..at].chars().count() + 1 }
    }
}

/// An error while it is being found: spans only; [`Issue::locate`] adds lines and columns.
#[derive(Clone, Debug)]
pub(crate) struct Issue {
    pub message: String,
    pub span: Span,
    pub notes: Vec<(String, Option<Span>)>,
}

impl Issue {
    pub fn new(span: Span, message: impl Into<String>) -> Issue {
        Issue { message: message.into(), span, notes: Vec::new() }
    }

    pub fn note(mut self, span: Option<Span>, message: impl Into<String>) -> Issue {
        self.notes.push((message.into(), span));
        self
    }

    pub fn locate(self, map: &SourceMap) -> Diagnostic {
        let at = map.locate(self.span);
        let notes = self.notes.into_iter().map(|(message, span)| Note { message, at: span.map(|s| map.locate(s)) }).collect();
        Diagnostic { message: self.message, span: self.span, line: at.line, column: at.column, notes }
    }
}

/// Errors reported at most: past a hundred, more say little, and each costs a walk of its line.
const MAX_DIAGNOSTICS: usize = 100;

/// The first [`MAX_DIAGNOSTICS`] issues in source order, with lines and columns.
pub(crate) fn diagnostics(mut issues: Vec<Issue>, map: &SourceMap) -> Diagnostics {
    issues.sort_by_key(|i| i.span.start);
    issues.truncate(MAX_DIAGNOSTICS);
    Diagnostics { errors: issues.into_iter().map(|i| i.locate(map)).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_count_characters_and_lines_start_at_one() {
        let map = SourceMap::new("ab\n\u{e9}t\u{e9} x\n");
        assert_eq!(map.locate(Span::new(0, 1)), Location { span: Span::new(0, 1), line: 1, column: 1 });
        let x = "ab\n\u{e9}t\u{e9} ".len();
        assert_eq!((map.locate(Span::new(x, x + 1)).line, map.locate(Span::new(x, x + 1)).column), (2, 5));
        assert_eq!(map.locate(Span::new(999, 999)).line, 3);
    }

    #[test]
    fn renders_like_rustc_with_notes() {
        let source = "begin {\n\t@x = 1;\n\t@x = \"s\";\n}\n";
        let map = SourceMap::new(source);
        let at = source.rfind("@x").unwrap();
        let first = source.find("@x").unwrap();
        let issue = Issue::new(Span::new(at, at + 2), "conflict").note(Some(Span::new(first, first + 2)), "first here").note(None, "plain");
        let text = diagnostics(vec![issue], &map).render(source, "t.lp");
        let expected = "error: conflict\n --> t.lp:3:2\n  |\n3 |     @x = \"s\";\n  |     ^^\n\
                        note: first here\n --> t.lp:2:2\n  |\n2 |     @x = 1;\n  |     ^^\n  = note: plain\n\n";
        assert_eq!(text, expected);
    }
}
