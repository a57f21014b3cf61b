//! Lock functions (`--probe locks`): glibc's POSIX lock, semaphore, condition-variable and
//! barrier functions and its thread calls, found by name (an exported symbol or any alias of it), each probed at
//! its entry and exits with the lock action. Some end in a tail jump into glibc's shared code
//! (`pthread_mutex_timedlock` into `__pthread_mutex_clocklock_common`,
//! `pthread_mutex_unlock` into `__pthread_mutex_unlock_usercnt`): the call is not over
//! there, so the planner follows such jumps and probes the returns of the code they reach
//! (shared by the functions reaching it; a return of theirs that ends no lock call at the
//! same stack pointer is ignored by the runtime). Those parts are then not probed as
//! functions of their own. A tail jump into another lock function is not followed: glibc's
//! compat versions (`pthread_cond_wait@GLIBC_2.2.5`) end in the current ones, whose probes
//! time the operation, and are counted only (`continues-in-lock`).
use crate::exits::{self, CodeMap, Region};
use crate::targets::Targets;
use lopi_elf::ElfModule;
use lopi_rt_abi::lock_name::Op;
use std::collections::HashSet;

/// Public names and the operation each performs; the `clock` variants of timed calls are
/// timed calls with a clock argument.
const FUNCTIONS: &[(&str, Op)] = &[
    ("pthread_mutex_lock", Op::MutexLock),
    ("pthread_mutex_trylock", Op::MutexTrylock),
    ("pthread_mutex_timedlock", Op::MutexTimedlock),
    ("pthread_mutex_clocklock", Op::MutexTimedlock),
    ("pthread_mutex_unlock", Op::MutexUnlock),
    ("pthread_mutex_init", Op::MutexInit),
    ("pthread_rwlock_rdlock", Op::RwRdlock),
    ("pthread_rwlock_tryrdlock", Op::RwTryrdlock),
    ("pthread_rwlock_timedrdlock", Op::RwTimedrdlock),
    ("pthread_rwlock_clockrdlock", Op::RwTimedrdlock),
    ("pthread_rwlock_wrlock", Op::RwWrlock),
    ("pthread_rwlock_trywrlock", Op::RwTrywrlock),
    ("pthread_rwlock_timedwrlock", Op::RwTimedwrlock),
    ("pthread_rwlock_clockwrlock", Op::RwTimedwrlock),
    ("pthread_rwlock_unlock", Op::RwUnlock),
    ("pthread_rwlock_init", Op::RwInit),
    ("pthread_spin_lock", Op::SpinLock),
    ("pthread_spin_trylock", Op::SpinTrylock),
    ("pthread_spin_unlock", Op::SpinUnlock),
    ("sem_wait", Op::SemWait),
    ("sem_trywait", Op::SemTrywait),
    ("sem_timedwait", Op::SemTimedwait),
    ("sem_clockwait", Op::SemTimedwait),
    ("sem_post", Op::SemPost),
    ("pthread_cond_wait", Op::CondWait),
    ("pthread_cond_timedwait", Op::CondTimedwait),
    ("pthread_cond_clockwait", Op::CondTimedwait),
    ("pthread_cond_signal", Op::CondSignal),
    ("pthread_cond_broadcast", Op::CondBroadcast),
    ("pthread_barrier_wait", Op::BarrierWait),
    ("pthread_create", Op::ThreadCreate),
    ("pthread_join", Op::ThreadJoin),
    ("pthread_tryjoin_np", Op::ThreadJoin),
    ("pthread_timedjoin_np", Op::ThreadJoin),
    ("pthread_clockjoin_np", Op::ThreadJoin),
    ("pthread_detach", Op::ThreadDetach),
    ("pthread_exit", Op::ThreadExit),
    ("pthread_setname_np", Op::ThreadSetname),
];

/// The operation of a function with these names (glibc's internal aliases carry leading
/// underscores: `__pthread_mutex_lock`, `___pthread_mutex_lock`).
pub(crate) fn op_of(names: &[&str]) -> Option<Op> {
    names.iter().find_map(|n| {
        let bare = n.trim_start_matches('_');
        FUNCTIONS.iter().find(|(name, _)| *name == bare).map(|&(_, op)| op)
    })
}

/// Starts of the functions the lock functions' tail jumps lead into, found by decoding them
/// as their exits will be: `ends[f]` is where function `f` ends, `ops[f]` its operation.
pub(crate) fn tail_parts(module: &ElfModule<'_>, ends: &[u64], ops: &[Option<Op>], targets: &Targets) -> HashSet<u64> {
    let map = CodeMap::new(module);
    let mut parts = HashSet::new();
    for (f, function) in module.functions.iter().enumerate() {
        if ops[f].is_none() || function.size == 0 {
            continue;
        }
        let own = Region { start: function.addr.0, end: ends[f] };
        if let Ok(found) = exits::find(module, own, &map, targets, true) {
            parts.extend(found.code.keys().filter(|&&start| start != own.start && map.is_entry(start)));
        }
    }
    parts
}
