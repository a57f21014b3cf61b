//! The windows of a continuous push that wait for the collector: a directory of encoded
//! requests, one file each (`NNNNNNNNNN.otlp`, numbered in the order they were made), sent
//! oldest first. It holds at most `max_bytes`; past that the oldest are dropped, and counted.
//! Files a previous run left (its collector was away when it ended) are taken up and sent
//! first.
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

const SUFFIX: &str = ".otlp";

pub(crate) struct Queue {
    dir: PathBuf,
    max_bytes: u64,
    /// (number, size) of each file, oldest first.
    files: Vec<(u64, u64)>,
    /// Windows dropped for room, and their bytes.
    pub(crate) dropped: u64,
    pub(crate) dropped_bytes: u64,
}

impl Queue {
    /// The queue in `dir` (made if missing), with what it holds already.
    pub(crate) fn open(dir: &Path, max_bytes: u64) -> Result<Queue> {
        std::fs::create_dir_all(dir).with_context(|| format!("making the push queue {}", dir.display()))?;
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading the push queue {}", dir.display()))? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(number) = name.to_str().and_then(|n| n.strip_suffix(SUFFIX)).and_then(|n| n.parse::<u64>().ok()) else { continue };
            files.push((number, entry.metadata()?.len()));
        }
        files.sort_unstable();
        Ok(Queue { dir: dir.to_path_buf(), max_bytes, files, dropped: 0, dropped_bytes: 0 })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn len(&self) -> usize {
        self.files.len()
    }

    fn path(&self, number: u64) -> PathBuf {
        self.dir.join(format!("{number:010}{SUFFIX}"))
    }

    /// Adds a request after the others (written whole, then renamed into place, so that a
    /// crash leaves no half file), then drops the oldest while the queue holds too much; the
    /// newest stays even alone over the limit.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<()> {
        let number = self.files.last().map_or(0, |&(n, _)| n + 1);
        let path = self.path(number);
        let partial = self.dir.join(format!(".{number:010}{SUFFIX}.partial"));
        std::fs::write(&partial, bytes).and_then(|()| std::fs::rename(&partial, &path)).with_context(|| format!("queueing a window in {}", path.display()))?;
        self.files.push((number, bytes.len() as u64));
        while self.files.len() > 1 && self.files.iter().map(|&(_, size)| size).sum::<u64>() > self.max_bytes {
            let (oldest, size) = self.files.remove(0);
            let _ = std::fs::remove_file(self.path(oldest));
            self.dropped += 1;
            self.dropped_bytes += size;
        }
        Ok(())
    }

    /// The oldest request; a file that cannot be read is dropped (and counted).
    pub(crate) fn oldest(&mut self) -> Option<Vec<u8>> {
        while let Some(&(number, size)) = self.files.first() {
            match std::fs::read(self.path(number)) {
                Ok(bytes) => return Some(bytes),
                Err(_) => {
                    self.files.remove(0);
                    self.dropped += 1;
                    self.dropped_bytes += size;
                }
            }
        }
        None
    }

    /// Removes the oldest request, once the collector took it.
    pub(crate) fn sent_oldest(&mut self) {
        if !self.files.is_empty() {
            let (number, _) = self.files.remove(0);
            let _ = std::fs::remove_file(self.path(number));
        }
    }

    /// Removes the directory when nothing waits in it.
    pub(crate) fn close(self) {
        if self.files.is_empty() {
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

/// `64M`, `512k`, `1G` or plain bytes.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: u64 = number.parse().map_err(|_| format!("bad size {text:?} (try 64M, 512k)"))?;
    let scale: u64 = match unit.to_ascii_lowercase().trim_end_matches("ib").trim_end_matches('b') {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        _ => return Err(format!("bad size unit {unit:?} (try 64M, 512k)")),
    };
    value.checked_mul(scale).ok_or_else(|| format!("size {text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lopi-queue-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn oldest_first_and_taken_up_again() {
        let d = dir("order");
        let mut q = Queue::open(&d, 1 << 20).expect("open");
        q.push(b"one").expect("push");
        q.push(b"two").expect("push");
        assert_eq!(q.oldest().as_deref(), Some(&b"one"[..]));
        q.sent_oldest();
        drop(q);
        let mut again = Queue::open(&d, 1 << 20).expect("open again");
        assert_eq!(again.len(), 1);
        again.push(b"three").expect("push");
        assert_eq!(again.oldest().as_deref(), Some(&b"two"[..]));
        again.sent_oldest();
        assert_eq!(again.oldest().as_deref(), Some(&b"three"[..]));
        again.sent_oldest();
        assert_eq!(again.oldest(), None);
        again.close();
        assert!(!d.exists(), "an empty queue leaves no directory");
    }

    #[test]
    fn past_its_size_the_oldest_are_dropped_and_counted() {
        let d = dir("bound");
        let mut q = Queue::open(&d, 10).expect("open");
        for w in [b"aaaa", b"bbbb", b"cccc", b"dddd"] {
            q.push(w).expect("push");
        }
        assert_eq!((q.len(), q.dropped, q.dropped_bytes), (2, 2, 8));
        assert_eq!(q.oldest().as_deref(), Some(&b"cccc"[..]));
        q.push(&[0; 64]).expect("push");
        assert_eq!(q.len(), 1, "the newest stays, alone over the limit");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("100"), Ok(100));
        assert!(parse_size("ten").is_err());
        assert!(parse_size("5T").is_err());
    }
}
