//! `lopi export --format otlp` and `lopi push`: a data file as an OTLP profiles request
//! (`lopi_trace::otlp`), with what this host knows besides the file: the modules' build-ids
//! and source lines, the host's name, when the recording ended.
use crate::names::Namer;
use crate::push::{ConnectArgs, Pusher};
use anyhow::{bail, Result};
use lopi_trace::{otlp, OtlpContext, Timing};
use prost::Message;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// The resource attributes `lopi export --format otlp` and `lopi push` take.
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct ResourceArgs {
    /// The processes' `service.name` [default: the executable's name].
    #[arg(long, value_name = "NAME")]
    pub(crate) service: Option<String>,
    /// A resource attribute of every process (repeatable); a key lopi sets too (host.name)
    /// takes this value.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = label)]
    pub(crate) labels: Vec<(String, String)>,
}

impl ResourceArgs {
    pub(crate) fn given(&self) -> bool {
        self.service.is_some() || !self.labels.is_empty()
    }
}

fn label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => Ok((key.trim().to_string(), value.to_string())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

/// An encoded request and what it holds, for the summary line.
pub(crate) struct Encoded {
    pub(crate) bytes: Vec<u8>,
    pub(crate) summary: String,
}

/// The request of the data file `data` (read as `file`, timed profile `timing`: empty for a
/// record of counts alone), with what `facts` knows of its modules (learning what it lacks)
/// and the time `data` was last written as the recording's end.
pub(crate) fn request(data: &Path, file: &lopi_trace::DataFile, timing: &Timing, namer: &mut Namer, resource: &ResourceArgs, facts: &mut HostFacts) -> otlp::proto::ExportProfilesServiceRequest {
    facts.learn(file, timing);
    // The file was last written when the recording ended.
    let modified = std::fs::metadata(data).and_then(|m| m.modified()).ok();
    let end_unix_ns = modified.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos() as u64);
    let context = facts.context(resource, end_unix_ns);
    let mut site = |pid, ret| lopi_trace::SiteFrame { name: namer.site(pid, ret), place: namer.place(pid, ret).map(|p| (p.path, p.vaddr)) };
    otlp::request(file, timing, &mut site, &context)
}

/// `request`, encoded, with its summary; an error when it holds no sample.
pub(crate) fn encode(data: &Path, file: &lopi_trace::DataFile, timing: &Timing, namer: &mut Namer, resource: &ResourceArgs) -> Result<Encoded> {
    let request = request(data, file, timing, namer, resource, &mut HostFacts::default());
    let Some(summary) = summary(&request) else { bail!("{} has no recorded calls", data.display()) };
    Ok(Encoded { bytes: request.encode_to_vec(), summary })
}

/// `N processes, N profiles, N samples`, or `None` for a request without samples.
pub(crate) fn summary(request: &otlp::proto::ExportProfilesServiceRequest) -> Option<String> {
    let processes = request.resource_profiles.len();
    let profiles: Vec<&otlp::proto::Profile> = request.resource_profiles.iter().flat_map(|r| &r.scope_profiles).flat_map(|s| &s.profiles).collect();
    let samples: usize = profiles.iter().map(|p| p.samples.len()).sum();
    (samples > 0).then(|| format!("{processes} processes, {} profiles, {samples} samples", profiles.len()))
}

/// `lopi push DATA URL`.
pub(crate) fn push(data: &Path, url: &str, resource: &ResourceArgs, connect: &ConnectArgs) -> Result<()> {
    let pusher = Pusher::new(url, connect)?;
    let file = crate::files::read_data(data)?;
    let mut namer = Namer::new(&file.maps);
    let timing = crate::exports::named_timing(&file, &mut namer).unwrap_or_default();
    let encoded = encode(data, &file, &timing, &mut namer, resource)?;
    let pushed = pusher.send(&encoded.bytes)?;
    let tries = match pushed.tries {
        1 => String::new(),
        n => format!(", {n} tries"),
    };
    eprintln!("lopi: pushed {} to {} ({}, {} bytes{tries})", data.display(), pusher.endpoint(), encoded.summary, encoded.bytes.len());
    if let Some(warning) = pushed.warning {
        bail!("the collector kept only part of the profiles: {warning}");
    }
    Ok(())
}

/// What this host knows of a recording's modules besides the data file: their build-ids and
/// the source lines of their functions' entries, looked up once each (a continuous push
/// learns a running program's modules and functions as they show up).
#[derive(Default)]
pub(crate) struct HostFacts {
    build_ids: HashMap<String, String>,
    lines: HashMap<(String, u64), (String, u32)>,
    modules_read: HashSet<String>,
    entries_read: HashSet<(String, u64)>,
}

impl HostFacts {
    fn learn(&mut self, file: &lopi_trace::DataFile, timing: &Timing) {
        // Each module's functions not looked up yet, by file address.
        let mut modules: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for f in timing.functions.iter().filter(|f| !f.module.is_empty() && f.syscall.is_none() && f.lock.is_none()) {
            if self.entries_read.insert((f.module.clone(), f.addr)) {
                modules.entry(&f.module).or_default().push(f.addr);
            }
        }
        for r in file.records.iter().filter(|r| !self.modules_read.contains(&r.exe)) {
            modules.entry(&r.exe).or_default();
        }
        for (module, addrs) in modules {
            // A module that is not here (the record came from another host) has neither.
            let Ok(bytes) = std::fs::read(module) else { continue };
            if self.modules_read.insert(module.to_string()) {
                if let Some(id) = build_id(&bytes) {
                    self.build_ids.insert(module.to_string(), id);
                }
            }
            if addrs.is_empty() {
                continue;
            }
            let debug = lopi_elf::DebugFile::find(Path::new(module), &bytes, &lopi_elf::debug_dir()).and_then(|d| std::fs::read(&d.path).ok());
            let entries: Vec<(u64, u64)> = addrs.iter().map(|&a| (a, a + 1)).collect();
            let Some(found) = lopi_elf::lines::lines_of(debug.as_deref().unwrap_or(&bytes), &entries) else { continue };
            for (addr, entry_lines) in addrs.iter().zip(found) {
                if let Some(line) = entry_lines.first() {
                    self.lines.insert((module.to_string(), *addr), (line.file.clone(), line.line));
                }
            }
        }
    }

    fn context(&self, resource: &ResourceArgs, end_unix_ns: u64) -> OtlpContext {
        let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string()).filter(|h| !h.is_empty());
        OtlpContext {
            service: resource.service.clone(),
            host_name,
            labels: resource.labels.clone(),
            build_ids: self.build_ids.clone(),
            lines: self.lines.clone(),
            end_unix_ns,
        }
    }
}

/// The GNU build-id of an ELF file, in hex.
fn build_id(bytes: &[u8]) -> Option<String> {
    let elf = object::File::parse(bytes).ok()?;
    let id = object::Object::build_id(&elf).ok()??;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_key_value() {
        assert_eq!(label("env=prod"), Ok(("env".into(), "prod".into())));
        assert_eq!(label("url=http://x/?a=b"), Ok(("url".into(), "http://x/?a=b".into())));
        assert_eq!(label("empty="), Ok(("empty".into(), String::new())));
        assert!(label("=x").is_err());
        assert!(label("env").is_err());
    }

    #[test]
    fn build_id_of_this_test() {
        let exe = std::fs::read(std::env::current_exe().expect("test binary")).expect("read it");
        let id = build_id(&exe).expect("rustc links with a build-id");
        assert!(id.len() >= 16 && id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    }
}
