//! `args.NAME` (`args->NAME`): bpftrace's fields of the system-call tracepoints, which are the
//! call's arguments at its entry (`args.filename` at `sys_enter_openat` is `arg1`) and its
//! result at its exit (`args.ret` is `retval`); `args.id` is the call's number (`raw_syscalls`'
//! field, at any system-call point here). One probe body is compiled once for all its
//! points, but a field may be a different argument at each (`filename` is `open`'s first and
//! `openat`'s second): such a probe is split into one probe per set of points that read its
//! fields alike, a glob into the calls it matches where they differ.
use super::points::Resolver;
use crate::glob::{glob_match, is_glob};
use crate::ir::{Builtin, Point};
use crate::syscall_args::{calls, syscall_args};
use std::collections::BTreeMap;

/// What each field a probe names reads at some of its points: a builtin, or why it cannot.
pub(super) type Fields = BTreeMap<String, Result<Builtin, String>>;

/// `points` grouped by what `fields` read at them, in the order of their first point; one
/// group with no fields when the probe names none.
pub(super) fn split(points: &[Point], fields: &[String], resolver: &dyn Resolver) -> Vec<(Vec<Point>, Fields)> {
    if fields.is_empty() {
        return vec![(points.to_vec(), Fields::new())];
    }
    let mut groups: Vec<(Vec<Point>, Fields)> = Vec::new();
    let mut add = |point: Point, read: Fields| match groups.iter_mut().find(|(_, g)| *g == read) {
        Some((points, _)) => points.push(point),
        None => groups.push((vec![point], read)),
    };
    for point in points {
        let (glob, spelling, ret) = match point {
            Point::SyscallEntry { glob, spelling } => (glob, *spelling, false),
            Point::SyscallReturn { glob, spelling } => (glob, *spelling, true),
            other => {
                let why = format!("`{other}` has no `args`: they are the fields of a system call's tracepoint (use arg0..arg5, retval)");
                add(other.clone(), fields.iter().map(|f| (f.clone(), Err(why.clone()))).collect());
                continue;
            }
        };
        let matched: Vec<&str> = match is_glob(glob) {
            true => calls().filter(|c| glob_match(glob, c) && resolver.syscall_known(c)).collect(),
            false => vec![glob.as_str()],
        };
        if matched.is_empty() {
            let why = format!("lopi knows no arguments of the calls `{glob}` matches");
            add(point.clone(), fields.iter().map(|f| (f.clone(), Err(why.clone()))).collect());
            continue;
        }
        let mut each: Vec<Fields> = matched.iter().map(|call| fields.iter().map(|f| (f.clone(), field(call, ret, f))).collect()).collect();
        // A field some matched call lacks is refused for the whole point, so that a glob is
        // split only where its calls have the field in different places.
        for f in fields {
            let Some((call, why)) = matched.iter().zip(&each).find_map(|(call, read)| Some((call, read[f].clone().err()?))) else { continue };
            let why = if is_glob(glob) && why.contains(&format!("`{call}`")) { format!("{why} (`{glob}` matches `{call}`)") } else { why };
            each.iter_mut().for_each(|read| _ = read.insert(f.clone(), Err(why.clone())));
        }
        if each.windows(2).all(|w| w[0] == w[1]) {
            add(point.clone(), each.swap_remove(0));
        } else {
            for (call, read) in matched.into_iter().zip(each) {
                let glob = call.to_string();
                add(if ret { Point::SyscallReturn { glob, spelling } } else { Point::SyscallEntry { glob, spelling } }, read);
            }
        }
    }
    groups
}

/// What `args.FIELD` reads at the entry (or with `ret`, the exit) of system call `call`.
fn field(call: &str, ret: bool, field: &str) -> Result<Builtin, String> {
    match (field, ret) {
        ("ret", true) => Ok(Builtin::Retval),
        ("id", _) => Ok(Builtin::SyscallNr),
        (_, true) => Err(format!("at a system call's exit `args` has only `ret`, not `{field}`")),
        ("args", false) => Err("`args.args`, the raw arguments: use arg0..arg5".into()),
        (_, false) => match syscall_args(call) {
            Some(names) => match names.iter().position(|n| *n == field) {
                Some(i) => Ok(Builtin::Arg(i as u8)),
                None if names.is_empty() => Err(format!("`{call}` has no arguments")),
                None => Err(format!("`{call}` has no argument `{field}`; its arguments are {}", names.join(", "))),
            },
            None => Err(format!("lopi does not know the names of `{call}`'s arguments: use arg0..arg5")),
        },
    }
}
