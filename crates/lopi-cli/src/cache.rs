//! `lopi cache`: where plans are cached, or clearing them.
use crate::output::print;
use crate::progress;
use anyhow::{Context, Result};
use lopi_cache::PlanCache;

/// `lopi cache [--clear]`.
pub(crate) fn show(cache: Option<&PlanCache>, clear: bool) -> Result<()> {
    let Some(cache) = cache else {
        eprintln!("lopi: the plan cache is off ({}=off or --no-cache)", progress::CACHE_ENV);
        return Ok(());
    };
    let store = cache.store();
    let dir = store.dir().display();
    if clear {
        let removed = store.clear().with_context(|| format!("clearing {dir}"))?;
        eprintln!("lopi: removed {} from {dir}", entries(removed));
        return Ok(());
    }
    let listed = match store.entries() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        other => other.with_context(|| format!("reading {dir}"))?,
    };
    let bytes: u64 = listed.iter().map(|(_, len)| len).sum();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    print(&format!(
        "{dir}: {} (plans and laid-out images), {:.1} MiB of at most {:.0} MiB (the least recently used go first)\n",
        entries(listed.len()),
        mib(bytes),
        mib(lopi_cache::DEFAULT_LIMIT)
    ))
}

fn entries(n: usize) -> String {
    format!("{n} {}", if n == 1 { "entry" } else { "entries" })
}
