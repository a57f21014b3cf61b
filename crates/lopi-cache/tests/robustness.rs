//! "Never trust, never panic" for the plan cache: stored selections read back with mutations
//! (past the entry's checksum, as if it had been defeated) end in an error or in a selection
//! that lays out without panicking; damaged entries on disk are replaced by what planning
//! gives. Deterministic (fixed seed), so a failure names its case.
use lopi_cache::{Lookup, PlanCache};
use lopi_elf::ElfModule;
use lopi_patch::{Filter, Selection};
use std::path::PathBuf;
use std::process::Command;

/// xorshift64*, as in lopi-rewrite's robustness tests.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// A copy of `bytes` damaged as case `case` asks: a few random bytes (at offsets `pick`
    /// chooses), one flipped bit, or a truncation.
    fn mutate(&mut self, bytes: &[u8], case: usize, pick: impl Fn(&mut Rng) -> usize) -> Vec<u8> {
        let mut mutated = bytes.to_vec();
        match case % 3 {
            0 => {
                for _ in 0..1 + self.below(4) {
                    let at = pick(self);
                    mutated[at] = self.next() as u8;
                }
            }
            1 => {
                let at = self.below(mutated.len());
                mutated[at] ^= 1 << self.below(8);
            }
            _ => mutated.truncate(self.below(bytes.len())),
        }
        mutated
    }
}

fn dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cache-robustness");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A program with calls, loops, a jump table and tiny functions: sites of every kind. Each
/// test builds its own (`name`): tests run in parallel, and a file rebuilt under another
/// test's feet changes its identity.
fn build_sample(name: &str) -> Vec<u8> {
    let src = dir().join(format!("{name}.c"));
    std::fs::write(
        &src,
        "#include <stdio.h>\nstatic int sq(int x){return x*x;}\nint tiny(void){return 0;}\n\
         int sw(int x){switch(x){case 0:return 3;case 1:return 7;case 2:return 9;case 3:return 1;\
         case 4:return 5;case 5:return 8;default:return -1;}}\n\
         int loop(int n){int s=0;for(int i=0;i<n;i++)s+=sw(i)+sq(i);return s;}\n\
         int main(int c,char**v){printf(\"%d %d %d\\n\",sq(c),tiny(),loop(c*9));return 0;}\n",
    )
    .unwrap();
    let exe = dir().join(name);
    let ok = Command::new("cc").args(["-O2", "-o"]).arg(&exe).arg(&src).status().expect("cc must be installed").success();
    assert!(ok, "cc failed");
    std::fs::read(exe).unwrap()
}

fn image(module: &ElfModule<'_>, selection: Selection) -> lopi_image::ProbeImage {
    let names = lopi_image::ModuleNames { module: "m".into(), source: "s".into() };
    let request = lopi_image::Request {
        names: &names,
        recording: lopi_image::Recording { trace: true, budget_ppm: 0, sample_hz: 0, syscall_log: false, catch_unprobed: false },
        at: lopi_rt_abi::page_align(module.end_of_image().0),
        entry_room: 16,
        header_room: 0,
        fork_handlers: false,
        script: None,
    };
    lopi_image::build(module, selection, &request).unwrap()
}

fn lay_out(module: &ElfModule<'_>, selection: Selection) -> Vec<u8> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| image(module, selection).bytes)).unwrap_or_default()
}

#[test]
fn mutated_selections_never_panic() {
    let original = build_sample("selections");
    let mut module = ElfModule::parse(&original).unwrap();
    let analysis = lopi_patch::analyse(&mut module);
    let selection = lopi_patch::select(&module, &analysis, &Filter::default(), lopi_patch::Probes::TIME);
    let bytes = selection.to_bytes().unwrap();
    let back = Selection::from_bytes(&bytes, &module).unwrap();
    assert_eq!(lay_out(&module, back), lay_out(&module, selection), "a selection read back lays out as the original");
    let mut rng = Rng(0x5eed_cafe_0000_0001);
    for case in 0..4000 {
        let mutated = rng.mutate(&bytes, case, |rng| rng.below(bytes.len()));
        let result = std::panic::catch_unwind(|| {
            if let Ok(selection) = Selection::from_bytes(&mutated, &module) {
                lay_out(&module, selection);
            }
        });
        assert!(result.is_ok(), "case {case} panicked");
    }
}

#[test]
fn damaged_entries_are_replaced_by_what_planning_gives() {
    let original = build_sample("entries");
    let mut module = ElfModule::parse(&original).unwrap();
    let cache_dir = dir().join("cache");
    let _ = std::fs::remove_dir_all(&cache_dir);
    let cache = PlanCache::new(cache_dir.clone());
    let id = lopi_cache::read_file(&dir().join("entries")).unwrap().id.expect("the sample does not change");
    let key = lopi_cache::plan_key(id, &original, None, &Filter::default(), lopi_patch::Probes::TIME);
    let plan = |module: &mut ElfModule<'_>| {
        let analysis = lopi_patch::analyse(module);
        let selection = lopi_patch::select(module, &analysis, &Filter::default(), lopi_patch::Probes::TIME);
        (analysis.fragments, selection)
    };
    let expected = plan(&mut ElfModule::parse(&original).unwrap()).1.to_bytes().unwrap();

    let (first, lookup) = cache.selection(&key, &mut module, plan);
    assert_eq!(lookup, Lookup::Stored);
    assert_eq!(first.to_bytes().unwrap(), expected);
    let mut fresh = ElfModule::parse(&original).unwrap();
    let (hit, lookup) = cache.selection(&key, &mut fresh, |_| panic!("a hit must not plan"));
    assert_eq!(lookup, Lookup::Hit);
    assert_eq!(hit.to_bytes().unwrap(), expected);

    let entry = cache.store().entries().unwrap().pop().unwrap().0;
    let good = std::fs::read(&entry).unwrap();
    let mut rng = Rng(0x0dd_ba11_0000_0002);
    for case in 0..300 {
        let mut bad = good.clone();
        match case % 4 {
            0 => bad.truncate(rng.below(good.len())),
            1 => {
                let at = rng.below(bad.len());
                bad[at] ^= 1 << rng.below(8);
            }
            2 => bad = (0..rng.below(4096)).map(|_| rng.next() as u8).collect(),
            _ => bad.extend_from_slice(b"more"),
        }
        std::fs::write(&entry, &bad).unwrap();
        let mut module = ElfModule::parse(&original).unwrap();
        let (selection, lookup) = cache.selection(&key, &mut module, plan);
        assert!(matches!(lookup, Lookup::Replaced(_)), "case {case}: {lookup:?}");
        assert_eq!(selection.to_bytes().unwrap(), expected, "case {case}");
        assert_eq!(std::fs::read(&entry).unwrap(), good, "case {case}: the entry was written again");
    }
}

#[test]
fn mutated_images_never_panic() {
    let original = build_sample("images");
    let mut module = ElfModule::parse(&original).unwrap();
    let analysis = lopi_patch::analyse(&mut module);
    let built = image(&module, lopi_patch::select(&module, &analysis, &Filter::default(), lopi_patch::Probes::TIME));
    let bytes = built.to_bytes().unwrap();
    let back = lopi_image::ProbeImage::from_bytes(&bytes).unwrap();
    assert!(back.bytes == built.bytes && back.plan.code_patches.len() == built.plan.code_patches.len());
    // The plan comes first, then the image's bytes (mostly zeros and the runtime), then its
    // regions and entry points: mutations go to the first and the last.
    let plan_end = bytes.len() - built.bytes.len() - 64;
    let mut rng = Rng(0x1a5e_0000_0000_0003);
    for case in 0..4000 {
        let mutated = rng.mutate(&bytes, case, |rng| if rng.below(2) == 0 { rng.below(plan_end) } else { bytes.len() - 1 - rng.below(48) });
        let result = std::panic::catch_unwind(|| {
            if let Ok(image) = lopi_image::ProbeImage::from_bytes(&mutated) {
                let off = |a: u64| a.wrapping_sub(image.rw.start) as usize;
                let _ = (&image.bytes[off(image.rx.start)..off(image.r.end)], &image.bytes[off(image.init)]);
            }
        });
        assert!(result.is_ok(), "case {case} panicked");
    }
}
