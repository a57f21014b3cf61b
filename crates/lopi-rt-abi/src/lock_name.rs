//! Lock operations in a calling-context tree. A call of a lock function (`--probe locks`) is a
//! frame whose node hangs under a *site* node (the call's return address) under the caller's
//! path, and is named by the operation, how it went, and the lock's address:
//!
//! ```text
//! bit 63: 0 (system calls set it)   bit 61: lock   bit 60: site (low 48 bits: return address)
//! lock: bits 52..58 operation, bits 48..52 outcome, low 48 bits the lock's address
//! ```
//!
//! Functions are named by counter addresses below 2^47, so no name is taken for another. A
//! hold (acquisition to release) is a sibling node with outcome [`Outcome::Hold`] and the
//! acquiring operation. A lock entry's trampoline pushes its counter index with the operation
//! in bits 24..31 ([`OP_SHIFT`]).
//!
//! Thread calls (`pthread_create`, `_join`, `_detach`, `_exit`, `_setname_np`) are probed the
//! same way, their "lock" being the `pthread_t` they act on (`pthread_create`: its start
//! routine). A create that started a thread has a child node with outcome
//! [`Outcome::Started`] whose address is the new thread's tid, `calls` 1 and `max_ticks` the
//! TSC at which the create returned.

pub const TAG: u64 = 1 << 61;
pub const SITE: u64 = 1 << 60;
pub const OP_SHIFT_NAME: u32 = 52;
pub const OUTCOME_SHIFT: u32 = 48;
const ADDR_MASK: u64 = (1 << OUTCOME_SHIFT) - 1;
const SYSCALL: u64 = 1 << 63;

/// Where a lock entry's pushed word holds the operation (below: the counter index).
pub const OP_SHIFT: u32 = 24;
pub const INDEX_MASK: u64 = (1 << OP_SHIFT) - 1;

/// The kind of object an operation works on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Mutex,
    RwLock,
    SpinLock,
    Semaphore,
    Cond,
    Barrier,
    /// Thread calls: no lock, the thread's life.
    Thread,
}

impl Kind {
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::RwLock => "rwlock",
            Kind::SpinLock => "spinlock",
            Kind::Semaphore => "sem",
            Kind::Cond => "cond",
            Kind::Barrier => "barrier",
            Kind::Thread => "thread",
        }
    }
}

/// What an operation does to its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Takes the lock, waiting for it (`try`: never waits; a failure is [`Outcome::Busy`]).
    Acquire { try_only: bool, read: bool },
    Release,
    /// Waits on a semaphore (takes a unit), a condition variable or a barrier.
    Wait { try_only: bool },
    /// Posts a semaphore, signals or broadcasts a condition variable.
    Wake,
    Init,
    /// Creates, joins, detaches, ends or names a thread.
    Life,
}

macro_rules! ops {
    ($($(#[$doc:meta])* $op:ident = $n:literal: $kind:ident, $role:expr, $name:literal;)*) => {
        /// A probed lock operation.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u8)]
        pub enum Op { $($(#[$doc])* $op = $n,)* }

        impl Op {
            pub const ALL: &'static [Op] = &[$(Op::$op,)*];

            pub const fn from_u8(n: u8) -> Option<Op> {
                match n { $($n => Some(Op::$op),)* _ => None }
            }

            pub const fn kind(self) -> Kind {
                match self { $(Op::$op => Kind::$kind,)* }
            }

            pub const fn role(self) -> Role {
                match self { $(Op::$op => $role,)* }
            }

            /// As the user sees it: the pthread function's name without `pthread_`.
            pub const fn name(self) -> &'static str {
                match self { $(Op::$op => $name,)* }
            }
        }
    };
}

const LOCK: Role = Role::Acquire { try_only: false, read: false };
const TRY: Role = Role::Acquire { try_only: true, read: false };
const RDLOCK: Role = Role::Acquire { try_only: false, read: true };
const TRYRD: Role = Role::Acquire { try_only: true, read: true };
const WAIT: Role = Role::Wait { try_only: false };

ops! {
    MutexLock = 1: Mutex, LOCK, "mutex_lock";
    MutexTrylock = 2: Mutex, TRY, "mutex_trylock";
    MutexTimedlock = 3: Mutex, LOCK, "mutex_timedlock";
    MutexUnlock = 4: Mutex, Role::Release, "mutex_unlock";
    MutexInit = 5: Mutex, Role::Init, "mutex_init";
    /// The mutex a condition wait takes back before it returns (glibc's internal
    /// `__pthread_mutex_cond_lock`), counted at the wait's return.
    CondRelock = 6: Mutex, LOCK, "cond_wait(relock)";
    RwRdlock = 7: RwLock, RDLOCK, "rwlock_rdlock";
    RwTryrdlock = 8: RwLock, TRYRD, "rwlock_tryrdlock";
    RwTimedrdlock = 9: RwLock, RDLOCK, "rwlock_timedrdlock";
    RwWrlock = 10: RwLock, LOCK, "rwlock_wrlock";
    RwTrywrlock = 11: RwLock, TRY, "rwlock_trywrlock";
    RwTimedwrlock = 12: RwLock, LOCK, "rwlock_timedwrlock";
    RwUnlock = 13: RwLock, Role::Release, "rwlock_unlock";
    RwInit = 14: RwLock, Role::Init, "rwlock_init";
    SpinLock = 15: SpinLock, LOCK, "spin_lock";
    SpinTrylock = 16: SpinLock, TRY, "spin_trylock";
    SpinUnlock = 17: SpinLock, Role::Release, "spin_unlock";
    SemWait = 18: Semaphore, WAIT, "sem_wait";
    SemTrywait = 19: Semaphore, Role::Wait { try_only: true }, "sem_trywait";
    SemTimedwait = 20: Semaphore, WAIT, "sem_timedwait";
    SemPost = 21: Semaphore, Role::Wake, "sem_post";
    CondWait = 22: Cond, WAIT, "cond_wait";
    CondTimedwait = 23: Cond, WAIT, "cond_timedwait";
    CondSignal = 24: Cond, Role::Wake, "cond_signal";
    CondBroadcast = 25: Cond, Role::Wake, "cond_broadcast";
    BarrierWait = 26: Barrier, WAIT, "barrier_wait";
    ThreadCreate = 27: Thread, Role::Life, "create";
    /// Also `pthread_tryjoin_np`, `_timedjoin_np`, `_clockjoin_np`.
    ThreadJoin = 28: Thread, Role::Life, "join";
    ThreadDetach = 29: Thread, Role::Life, "detach";
    /// Counted when made: it never returns.
    ThreadExit = 30: Thread, Role::Life, "exit";
    ThreadSetname = 31: Thread, Role::Life, "setname_np";
}

impl Op {
    /// A condition wait: releases the mutex in its second argument and takes it back.
    pub const fn is_cond_wait(self) -> bool {
        matches!(self, Op::CondWait | Op::CondTimedwait)
    }

    /// Takes an exclusive or shared hold that a release ends (mutexes, rwlocks, spinlocks).
    pub const fn holds(self) -> bool {
        matches!(self.role(), Role::Acquire { .. })
    }
}

/// How a call went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Outcome {
    /// Done; for an acquisition, the lock was free on arrival.
    Ok = 0,
    /// Acquired (or, for a barrier, waited) after finding the lock taken on arrival.
    Contended = 1,
    /// A try operation that found it taken (`EBUSY`, `EAGAIN`).
    Busy = 2,
    TimedOut = 3,
    /// `EDEADLK`: an error-checking mutex relocked by its owner.
    Deadlock = 4,
    /// `EPERM`: unlocked by a thread that does not own it.
    NotOwner = 5,
    /// `EOWNERDEAD`: a robust mutex whose owner died; the lock is taken.
    OwnerDead = 6,
    OtherError = 7,
    /// A recursive mutex relocked by its owner.
    Nested = 8,
    /// `pthread_barrier_wait` returned `PTHREAD_BARRIER_SERIAL_THREAD`.
    Serial = 9,
    /// Not a call: the holds that began with this operation (ticks: acquisition to release).
    Hold = 10,
    /// Not a call: a thread its create call's node started (see the module comment).
    Started = 11,
}

impl Outcome {
    pub const fn from_u8(n: u8) -> Option<Outcome> {
        Some(match n {
            0 => Outcome::Ok,
            1 => Outcome::Contended,
            2 => Outcome::Busy,
            3 => Outcome::TimedOut,
            4 => Outcome::Deadlock,
            5 => Outcome::NotOwner,
            6 => Outcome::OwnerDead,
            7 => Outcome::OtherError,
            8 => Outcome::Nested,
            9 => Outcome::Serial,
            10 => Outcome::Hold,
            11 => Outcome::Started,
            _ => return None,
        })
    }

    /// The lock is taken after a call that ended so.
    pub const fn acquired(self) -> bool {
        matches!(self, Outcome::Ok | Outcome::Contended | Outcome::OwnerDead | Outcome::Nested)
    }

    /// Of a pthread function's result (an error number, 0 on success).
    pub const fn of_result(errno: u32) -> Outcome {
        match errno {
            0 => Outcome::Ok,
            16 | 11 => Outcome::Busy,
            110 => Outcome::TimedOut,
            35 => Outcome::Deadlock,
            1 => Outcome::NotOwner,
            130 => Outcome::OwnerDead,
            _ => Outcome::OtherError,
        }
    }
}

/// The name of `op` on the lock at `addr`, ended so.
pub const fn encode(op: Op, outcome: Outcome, addr: u64) -> u64 {
    TAG | (op as u64) << OP_SHIFT_NAME | (outcome as u64) << OUTCOME_SHIFT | (addr & ADDR_MASK)
}

/// The name of the call site whose return address is `ret`.
pub const fn site(ret: u64) -> u64 {
    SITE | (ret & ADDR_MASK)
}

/// A decoded lock name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockName {
    pub op: Op,
    pub outcome: Outcome,
    pub addr: u64,
}

/// `None` for any other name.
pub const fn decode(name: u64) -> Option<LockName> {
    if name & (SYSCALL | TAG) != TAG {
        return None;
    }
    let (Some(op), Some(outcome)) = (Op::from_u8((name >> OP_SHIFT_NAME) as u8 & 0x7f), Outcome::from_u8((name >> OUTCOME_SHIFT) as u8 & 0xf)) else {
        return None;
    };
    Some(LockName { op, outcome, addr: name & ADDR_MASK })
}

/// The return address of a site node's name.
pub const fn decode_site(name: u64) -> Option<u64> {
    if name & (SYSCALL | TAG | SITE) != SITE {
        return None;
    }
    Some(name & ADDR_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_stay_apart() {
        let addr = 0x7ffd_1234_5678;
        for &op in Op::ALL {
            assert_eq!(Op::from_u8(op as u8), Some(op));
            for outcome in [Outcome::Ok, Outcome::Hold, Outcome::Serial, Outcome::Started] {
                let name = encode(op, outcome, addr);
                assert!(name >= 1 << 47);
                assert_eq!(decode(name), Some(LockName { op, outcome, addr }));
                assert_eq!(decode_site(name), None);
                assert!(crate::syscall_name::decode(name).is_none());
            }
        }
        assert_eq!(decode_site(site(0x5555_0000_1234)), Some(0x5555_0000_1234));
        assert_eq!(decode(site(0x5555_0000_1234)), None);
        assert_eq!(decode(crate::syscall_name::encode(addr, 202, false)), None);
        assert_eq!(decode(0x5555_0000_1234), None);
    }
}
