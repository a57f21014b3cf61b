//! What lopi writes: text or JSON on stdout, and an error on one line.
use anyhow::{Context, Result};
use clap::ValueEnum;

/// `--format`: a table for people, or JSON for programs.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum Format {
    Text,
    Json,
}

/// Writes to stdout; a reader that went away (`lopi info x | head`) ends the output quietly.
pub(crate) fn print(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("writing to stdout"),
        _ => Ok(()),
    }
}

pub(crate) fn print_json(value: &impl serde::Serialize) -> Result<()> {
    print(&(serde_json::to_string_pretty(value)? + "\n"))
}

/// An error and its causes on one line, each said once: a cause whose text its context
/// already holds is left out (a `thiserror` message that shows its source, then the source),
/// and a context that a cause repeats with more is replaced by it.
pub(crate) fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if parts.iter().any(|p| p.contains(&text)) {
            continue;
        }
        match parts.last_mut() {
            Some(last) if text.starts_with(last.as_str()) => *last = text,
            _ => parts.push(text),
        }
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::one_line;

    /// An error whose message shows its source, as `thiserror`'s `{source}` does.
    #[derive(Debug)]
    struct Start(std::io::Error);

    impl std::fmt::Display for Start {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "starting prog: {}", self.0)
        }
    }

    impl std::error::Error for Start {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn causes_are_said_once() {
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let inner = anyhow::Error::new(Start(io()));
        assert_eq!(one_line(&inner), "starting prog: entity not found", "a message that shows its source");
        assert_eq!(one_line(&inner.context("starting prog")), "starting prog: entity not found", "a context the message repeats");
        let plain = anyhow::Error::new(io()).context("reading f").context("installing probes");
        assert_eq!(one_line(&plain), "installing probes: reading f: entity not found", "distinct causes stay");
    }
}
