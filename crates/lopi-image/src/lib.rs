//! The probe image of one module: what either installer puts next to the module's code.
//!
//! ```text
//! RW  shared counters (one u64 per probed function; the runtime remaps them onto the data
//!     file) | runtime variables | one `struct rseq_cs` per probed function | one u32 mode
//!     word per probed function (the perturbation budget switches timed functions)
//! RX  runtime blob | installer's entry code | trampolines
//! R   installer's header room | module descriptor | metadata JSON
//! ```
//!
//! The static installer (`lopi-rewrite`) appends the image to the file as three segments;
//! the live installer (`lopi-live`) maps it into a running process within ±2 GiB of the
//! module's code. Addresses are the module's own (file) addresses: for a module loaded at a
//! bias, the installer adds the bias, and an image placed below a module loaded high has
//! "negative" addresses that wrap; all the code built here is relative, so it does not care.
#![forbid(unsafe_code)]

pub mod handler;
pub mod script;

use lopi_elf::{ElfModule, Svma};
use lopi_patch::{Action, Layout, PatchPlan, ProbePoint, Selection, Stubs, RSEQ_CS_SIZE};
use lopi_rt_abi::{page_align, ModuleDescriptor, DESCRIPTOR_LEN, DESCRIPTOR_MAGIC};
use lopi_trace::{MetaAction, MetaBlock, MetaFunction, MetaPoint, MetaProbe, MetaSyscall, MetaUnprobedBlock, ModuleMeta, META_VERSION, UNPROBED_CODE};
use std::ops::Range;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("the probe image would not fit in the address space")]
    TooLarge,
    #[error("compiling the probe script: {0}")]
    Script(#[from] lopi_script::codegen::CodegenError),
}

/// Why a stored image cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoredImageError {
    #[error("cannot encode or decode the image: {0}")]
    Format(#[from] postcard::Error),
    #[error("the stored image is inconsistent: {0}")]
    Inconsistent(&'static str),
}

/// Names recorded in the module metadata.
pub struct ModuleNames {
    /// Where the instrumented module lives (shown by reports).
    pub module: String,
    /// The file it came from.
    pub source: String,
}

/// What the probes record besides counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Recording {
    /// Record every entry and exit of timed functions, with timestamps.
    pub trace: bool,
    /// Perturbation budget of timing, in parts per million of each thread's CPU time (0: none; the
    /// program's `LOPI_BUDGET` overrides it).
    pub budget_ppm: u32,
    /// Sampled time: samples per second of each thread's CPU time (0: exact time, the TSC at
    /// every entry and exit).
    pub sample_hz: u32,
    /// Log each system call, with its arguments and result, in the threads' traces.
    pub syscall_log: bool,
    /// Catch system calls from code no probe covers with Syscall User Dispatch (where the
    /// module's system calls are probed).
    pub catch_unprobed: bool,
}

/// What the installer needs besides the plan.
pub struct Request<'a> {
    pub names: &'a ModuleNames,
    pub recording: Recording,
    /// Page-aligned module address of the RW region; RX and R follow it.
    pub at: u64,
    /// Bytes after the runtime blob for the installer's own entry code (init stub, trap).
    pub entry_room: usize,
    /// Bytes at the start of the R region for the installer (moved program headers).
    pub header_room: usize,
    /// Let an executable's runtime register glibc fork handlers. Only for code that stays
    /// mapped for the life of the process.
    pub fork_handlers: bool,
    /// A probe script to compile in: its probes run at the entries and exits of the timed
    /// functions its points name.
    pub script: Option<ScriptRequest<'a>>,
}

/// A script for one module's image.
#[derive(Clone, Copy)]
pub struct ScriptRequest<'a> {
    pub spec: &'a script::ScriptSpec,
    /// How its points name the module: `None` for the main executable, else the library name
    /// of `func:LIB:GLOB` points.
    pub library: Option<&'a str>,
}

/// A laid-out image: `bytes` cover `rw.start..r.end`; gaps between regions are zero.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct ProbeImage {
    pub plan: PatchPlan,
    pub bytes: Vec<u8>,
    pub rw: Range<u64>,
    pub rx: Range<u64>,
    pub r: Range<u64>,
    /// Where the installer's entry code goes (`entry_room` bytes, filled with int3).
    pub entry_code: u64,
    /// `lopi_rt_init(descriptor, argc, argv, envp)`.
    pub init: u64,
    pub descriptor: u64,
    /// Runtime variables (`lopi_rt_abi::RuntimeVars`).
    pub vars: u64,
}

impl ProbeImage {
    fn slice_mut(&mut self, at: u64, len: usize) -> &mut [u8] {
        let start = (at - self.rw.start) as usize;
        &mut self.bytes[start..start + len]
    }

    /// The image as bytes, for the plan cache (an image laid out at the same place in the
    /// module in every process of a program is built once).
    pub fn to_bytes(&self) -> Result<Vec<u8>, StoredImageError> {
        Ok(postcard::to_stdvec(self)?)
    }

    /// Reads what [`ProbeImage::to_bytes`] wrote, checking that the regions, entry points
    /// and patches are where an image has them: an installer can use it without indexing
    /// out of bounds or writing past a site.
    pub fn from_bytes(bytes: &[u8]) -> Result<ProbeImage, StoredImageError> {
        let (image, rest): (ProbeImage, _) = postcard::take_from_bytes(bytes)?;
        let fail = |what| Err(StoredImageError::Inconsistent(what));
        if !rest.is_empty() {
            return fail("bytes after its end");
        }
        let off = |at: u64| at.wrapping_sub(image.rw.start);
        let len = image.bytes.len() as u64;
        let ordered = [image.rw.end, image.rx.start, image.rx.end, image.r.start].iter().map(|&a| off(a)).collect::<Vec<_>>();
        if off(image.r.end) != len || ordered.windows(2).any(|w| w[0] > w[1]) || ordered[3] > len {
            return fail("regions out of order");
        }
        if [image.entry_code, image.init, image.descriptor, image.vars].iter().any(|&a| off(a) >= len) {
            return fail("an entry point outside the image");
        }
        if image.plan.code_patches.iter().any(|p| p.bytes.len() != p.original.len() || p.bytes.is_empty() || p.bytes.len() > 64) {
            return fail("a patch of an impossible size");
        }
        Ok(image)
    }
}

/// Lays out `selection` (from [`lopi_patch::select`] on `module`) at `request.at`.
pub fn build(module: &ElfModule<'_>, mut selection: Selection, request: &Request<'_>) -> Result<ProbeImage, ImageError> {
    // A script's entry probes run on functions that could not be timed too.
    if let Some(s) = request.script.filter(|s| s.spec.handler.is_none()) {
        selection.probe_entries((0..module.functions.len()).filter(|&f| s.spec.names_entry(s.library, &module.functions[f])));
    }
    // User-space addresses are below 2^47; refusing larger counts keeps every sum below far
    // from overflow (addresses themselves may wrap, see the crate docs).
    let counters = selection.counter_count().max(1);
    if counters > 1 << 32 || request.entry_room > 1 << 20 || request.header_room > 1 << 20 {
        return Err(ImageError::TooLarge);
    }
    let rw_vaddr = request.at;
    let counters_len = lopi_rt_abi::counters_len(counters);
    let stride = u32::try_from(counters_len).map_err(|_| ImageError::TooLarge)?;
    let vars_vaddr = rw_vaddr.wrapping_add(counters_len);
    let rseq_table = vars_vaddr.wrapping_add(lopi_rt_abi::vars::SLOTS);
    let modes = vars_vaddr.wrapping_add(lopi_rt_abi::vars::modes_offset(counters));
    // A C handler's data ends RW and its text follows the blob, as it was linked.
    let handler = request.script.and_then(|s| s.spec.handler.as_ref());
    let handler_data_len = handler.map_or(0, |h| h.data_len);
    let rw_len = counters_len + lopi_rt_abi::vars::modes_offset(counters) + page_align(counters * 4) + handler_data_len;
    let rx_vaddr = rw_vaddr.wrapping_add(rw_len);
    let handler_data = rx_vaddr.wrapping_sub(handler_data_len);
    let blob = lopi_rt_blob::BLOB;
    let handler_text = rx_vaddr.wrapping_add(blob.len().next_multiple_of(16) as u64);
    debug_assert_eq!(handler_text.wrapping_sub(handler_data), handler::text_offset(handler_data_len));
    let entry_code = handler_text.wrapping_add(handler.map_or(0, |h| h.text.len().next_multiple_of(16)) as u64);
    let trampolines = entry_code.wrapping_add(request.entry_room.next_multiple_of(16) as u64);
    let stub = |offset: usize| Svma(rx_vaddr.wrapping_add(offset as u64));
    let stubs = (selection.has_timing() || selection.has_syscalls() || selection.has_points()).then(|| Stubs {
        enter: stub(lopi_rt_blob::ENTER_STUB_OFFSET),
        exit: stub(lopi_rt_blob::EXIT_STUB_OFFSET),
        syscall_enter: stub(lopi_rt_blob::SYSCALL_ENTER_STUB_OFFSET),
        syscall_exit: stub(lopi_rt_blob::SYSCALL_EXIT_STUB_OFFSET),
        lock_enter: stub(lopi_rt_blob::LOCK_ENTER_STUB_OFFSET),
        lock_exit: stub(lopi_rt_blob::LOCK_EXIT_STUB_OFFSET),
        point: stub(lopi_rt_blob::POINT_STUB_OFFSET),
    });
    let layout = Layout {
        trampolines: Svma(trampolines),
        counters: Svma(rw_vaddr),
        vars: Svma(vars_vaddr),
        rseq_table: Svma(rseq_table),
        modes: Svma(modes),
        stride,
        stubs,
        budget: request.recording.budget_ppm > 0,
        retire_stub: Some(stub(lopi_rt_blob::RETIRE_STUB_OFFSET)),
        dispatch: request.recording.catch_unprobed && selection.has_syscalls(),
    };
    let plan = selection.lay_out(module, layout);

    let meta = ModuleMeta {
        version: META_VERSION,
        module: request.names.module.clone(),
        source: request.names.source.clone(),
        counters: rw_vaddr,
        probes: plan
            .probes
            .iter()
            .map(|p| {
                let point = match p.point {
                    ProbePoint::Entry { function, .. } => {
                        let f = &module.functions[function];
                        MetaPoint::Entry(MetaFunction { name: f.name.clone(), addr: f.addr.0, size: f.size })
                    }
                    ProbePoint::Syscall { at, site, .. } => {
                        let site = &plan.syscalls[site];
                        let function = site.function.map(|f| module.functions[f].name.clone()).unwrap_or_default();
                        MetaPoint::Syscall(MetaSyscall { addr: at.0, function, nr: site.nr })
                    }
                    ProbePoint::Block { function, start, end, .. } => MetaPoint::Block(MetaBlock { addr: start.0, end: end.0, function: module.functions[function].name.clone() }),
                    // Readers name system-call sites by their function: this one is no site.
                    ProbePoint::Dispatch => MetaPoint::Syscall(MetaSyscall { addr: 0, function: UNPROBED_CODE.to_string(), nr: None }),
                };
                MetaProbe { point, action: meta_action(p.action) }
            })
            .collect(),
        script: request.script.filter(|s| s.spec.handler.is_none()).map(|s| s.spec.meta.clone()),
        unprobed_blocks: plan
            .blocks
            .iter()
            .filter_map(|f| f.blocks.as_ref().ok().map(|blocks| (f, blocks)))
            .flat_map(|(f, blocks)| {
                let implied = lopi_patch::blocks::implications(f);
                let name = &module.functions[f.function].name;
                blocks
                    .iter()
                    .filter_map(|(b, outcome)| match outcome {
                        lopi_patch::Outcome::Skipped(reason) => Some(MetaUnprobedBlock {
                            addr: b.start,
                            end: b.end,
                            function: name.clone(),
                            reason: reason.key().to_string(),
                            implied_by: implied.get(&b.start).map(|i| i.by.clone()).unwrap_or_default(),
                            needs: implied.get(&b.start).map(|i| i.needs.clone()).unwrap_or_default(),
                            exactly: implied.get(&b.start).is_some_and(|i| i.exactly),
                        }),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
            })
            .collect(),
    };
    let meta_json = serde_json::to_vec(&meta).expect("metadata serialises");

    let script_code_at = trampolines.wrapping_add(plan.trampoline_code.len().next_multiple_of(16) as u64);
    let compiled = request.script.map(|s| script::compile(s.spec, script_code_at, rx_vaddr)).transpose()?;
    let code_at = if handler.is_some() { handler_text } else { script_code_at };
    let rx_len = match &compiled {
        Some(c) => script_code_at.wrapping_sub(rx_vaddr) + c.code.len() as u64,
        None => trampolines.wrapping_sub(rx_vaddr) + plan.trampoline_code.len() as u64,
    };
    let r_vaddr = rx_vaddr.wrapping_add(page_align(rx_len));
    let desc_vaddr = r_vaddr.wrapping_add(request.header_room.next_multiple_of(8) as u64);
    let meta_vaddr = desc_vaddr.wrapping_add(DESCRIPTOR_LEN as u64);
    let script_vaddr = meta_vaddr.wrapping_add(meta_json.len().next_multiple_of(8) as u64);
    let script_bytes = match (request.script, &compiled) {
        (Some(s), Some(compiled)) => {
            let counted = counted(module, &plan);
            script::descriptor(s.spec, s.library, compiled, &counted, script_vaddr, code_at, handler_data)
        }
        _ => Vec::new(),
    };
    let script_end = if script_bytes.is_empty() { meta_vaddr.wrapping_add(meta_json.len() as u64) } else { script_vaddr.wrapping_add(script_bytes.len() as u64) };
    let switches_vaddr = script_end.next_multiple_of(8);
    let counter_count = plan.probes.len() as u64;
    let switches = switch_table(&plan.switch_patches, counter_count, switches_vaddr).ok_or(ImageError::TooLarge)?;
    let r_end = if switches.is_empty() { script_end } else { switches_vaddr.wrapping_add(switches.len() as u64) };
    let total = r_end.wrapping_sub(rw_vaddr);
    if total > 1 << 40 {
        return Err(ImageError::TooLarge);
    }

    let descriptor = ModuleDescriptor {
        magic: DESCRIPTOR_MAGIC,
        meta_offset: (meta_vaddr.wrapping_sub(desc_vaddr)) as i64,
        meta_len: meta_json.len() as u64,
        counters_offset: rw_vaddr.wrapping_sub(desc_vaddr) as i64,
        counters_len,
        counter_count,
        svma: desc_vaddr,
        vars_offset: vars_vaddr.wrapping_sub(desc_vaddr) as i64,
        rseq_table_offset: rseq_table.wrapping_sub(desc_vaddr) as i64,
        stride: u64::from(stride),
        budget_ppm: u64::from(request.recording.budget_ppm),
        sample_hz: u64::from(request.recording.sample_hz),
        script_offset: if script_bytes.is_empty() { 0 } else { script_vaddr.wrapping_sub(desc_vaddr) as i64 },
        switches_offset: if switches.is_empty() { 0 } else { switches_vaddr.wrapping_sub(desc_vaddr) as i64 },
        // Instruction probes run scripts on threads' chunks, which timing sets up.
        probes: if plan.keeps_thread_state() {
            let trace = match (request.recording.trace, request.recording.syscall_log) {
                (_, true) => lopi_rt_abi::PROBE_TRACE | lopi_rt_abi::PROBE_SYSCALL_LOG,
                (true, false) => lopi_rt_abi::PROBE_TRACE,
                (false, false) => 0,
            };
            let executable = if request.fork_handlers && module.kind != lopi_elf::ModuleKind::SharedLibrary {
                lopi_rt_abi::MODULE_EXECUTABLE
            } else {
                0
            };
            let locks = if plan.probes.iter().any(|p| matches!(p.action, Action::Lock(_))) { lopi_rt_abi::PROBE_LOCKS } else { 0 };
            let dispatch = if plan.layout.dispatch { lopi_rt_abi::PROBE_SYSCALL_DISPATCH } else { 0 };
            lopi_rt_abi::PROBE_TIMING | trace | executable | locks | dispatch
        } else {
            0
        },
    };

    let mut image = ProbeImage {
        bytes: vec![0; total as usize],
        rw: rw_vaddr..rx_vaddr,
        rx: rx_vaddr..rx_vaddr.wrapping_add(rx_len),
        r: r_vaddr..r_end,
        entry_code,
        init: rx_vaddr.wrapping_add(lopi_rt_blob::INIT_OFFSET as u64),
        descriptor: desc_vaddr,
        vars: vars_vaddr,
        plan,
    };

    // RW: counters, variables and modes start at zero; each rseq_cs is {version 0, flags 0,
    // start_ip, post_commit_offset, abort_ip}, with module addresses the runtime rebases.
    let sections = image.plan.rseq_sections.clone();
    for (i, section) in sections.into_iter().enumerate() {
        let cs = image.slice_mut(rseq_table.wrapping_add(i as u64 * RSEQ_CS_SIZE), RSEQ_CS_SIZE as usize);
        cs[8..16].copy_from_slice(&section.start.to_le_bytes());
        cs[16..24].copy_from_slice(&section.post_commit_offset.to_le_bytes());
        cs[24..32].copy_from_slice(&section.abort.to_le_bytes());
    }

    // RX: runtime, entry room, trampolines.
    let rx = image.slice_mut(rx_vaddr, rx_len as usize);
    rx.fill(0xcc);
    rx[..blob.len()].copy_from_slice(blob);
    // The runtime finds its variables and counters through these words, relative to
    // themselves.
    let deltas_at = lopi_rt_blob::DELTAS_OFFSET;
    for (i, target) in [vars_vaddr, rw_vaddr].into_iter().enumerate() {
        let at = deltas_at + 8 * i;
        let delta = target.wrapping_sub(rx_vaddr.wrapping_add(at as u64)) as i64;
        rx[at..at + 8].copy_from_slice(&delta.to_le_bytes());
    }
    if let Some(h) = handler {
        image.slice_mut(handler_text, h.text.len()).copy_from_slice(&h.text);
        image.slice_mut(handler_data, h.data.len()).copy_from_slice(&h.data);
    }
    let code = std::mem::take(&mut image.plan.trampoline_code);
    image.slice_mut(trampolines, code.len()).copy_from_slice(&code);
    image.plan.trampoline_code = code;
    if let Some(compiled) = &compiled {
        image.slice_mut(script_code_at, compiled.code.len()).copy_from_slice(&compiled.code);
    }

    // R: descriptor and metadata after the header room.
    image.slice_mut(desc_vaddr, DESCRIPTOR_LEN).copy_from_slice(&descriptor.to_bytes());
    image.slice_mut(meta_vaddr, meta_json.len()).copy_from_slice(&meta_json);
    if !script_bytes.is_empty() {
        image.slice_mut(script_vaddr, script_bytes.len()).copy_from_slice(&script_bytes);
    }
    if !switches.is_empty() {
        image.slice_mut(switches_vaddr, switches.len()).copy_from_slice(&switches);
    }
    Ok(image)
}

/// The table of the budget's switches at `at` (see `lopi_rt_abi::switches`); empty without
/// any. `None` when it would not fit its 32-bit offsets.
fn switch_table(patches: &[lopi_patch::SwitchPatches], counters: u64, at: u64) -> Option<Vec<u8>> {
    if patches.is_empty() {
        return Some(Vec::new());
    }
    let mut table = vec![0u8; usize::try_from(counters).ok()? * 4];
    for p in patches {
        let record = u32::try_from(table.len()).ok()?;
        table.get_mut(p.counter as usize * 4..p.counter as usize * 4 + 4)?.copy_from_slice(&record.to_le_bytes());
        table.extend(u32::try_from(p.swaps().count()).ok()?.to_le_bytes());
        for swap in p.swaps() {
            table.extend(swap.at.0.wrapping_sub(at).to_le_bytes());
            table.push(u8::try_from(swap.bytes.len()).ok()?);
            table.push(swap.jump_len);
            table.extend(&swap.bytes);
        }
    }
    Some(table)
}

/// What each counter counts, in counter order (system-call sites and blocks are no script's
/// function points).
fn counted<'m>(module: &'m ElfModule<'_>, plan: &PatchPlan) -> Vec<script::Counted<'m>> {
    let nothing = script::Counted { name: "", aliases: &[], addr: 0, timed: false, entry: false, site: None };
    plan.probes
        .iter()
        .map(|p| match p.point {
            ProbePoint::Entry { function, .. } => {
                let f = &module.functions[function];
                let timed = p.action == Action::Time;
                script::Counted { name: &f.name, aliases: &f.aliases, addr: f.addr.0, timed, entry: timed || p.action == Action::Probe, site: None }
            }
            // A system-call site's address is a C handler's `addr` there.
            ProbePoint::Syscall { at, .. } => script::Counted { addr: at.0, ..nothing },
            // An instruction's probe is named by its function, at its own address.
            ProbePoint::Block { function, patch_at, .. } if p.action == Action::Probe => {
                script::Counted { name: &module.functions[function].name, aliases: &[], addr: patch_at.0, timed: false, entry: false, site: Some(patch_at.0) }
            }
            ProbePoint::Block { .. } | ProbePoint::Dispatch => nothing,
        })
        .collect()
}

/// How the metadata names a planned probe's action.
fn meta_action(action: Action) -> MetaAction {
    match action {
        Action::Count => MetaAction::Count,
        Action::Time => MetaAction::Time,
        Action::Lock(_) => MetaAction::Lock,
        Action::Mark => MetaAction::Mark,
        Action::Probe => MetaAction::Probe,
    }
}
