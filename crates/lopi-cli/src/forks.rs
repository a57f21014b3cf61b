//! The forks of a process lopi attached to: a process it forks afterwards (a prefork server's
//! workers) runs the same code, probes included, and records into the same data file, until
//! it executes a program. `lopi attach` and `lopi agent` take the probes out of those too when
//! they let go.
/// The pids of the processes running now.
pub(crate) fn processes() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok())).collect()
}

/// The parent of process `pid` (`/proc/PID/stat`'s field 4).
pub(crate) fn parent_of(pid: i32) -> Option<i32> {
    stat_field(pid, 4)
}

/// When the process started, in clock ticks after boot (field 22).
pub(crate) fn start_time(pid: i32) -> Option<u64> {
    stat_field(pid, 22)
}

/// Field `n` (1-based, as proc(5) numbers them; from 3 on) of `/proc/PID/stat`.
fn stat_field<T: std::str::FromStr>(pid: i32, n: usize) -> Option<T> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields 3 on follow the last `)`.
    stat.rsplit_once(')')?.1.split_whitespace().nth(n.checked_sub(3)?)?.parse().ok()
}

/// Whether process `pid`, a descendant of `attached`, is a fork of it that still runs the code
/// lopi probed: started after it, the same executable, and no program executed since its fork
/// (the kernel's `PF_FORKNOEXEC` flag, set at fork and cleared at exec, in field 9).
pub(crate) fn carries_probes_of(pid: i32, attached: i32) -> bool {
    const PF_FORKNOEXEC: u64 = 0x40;
    let exe = |p: i32| lopi_live::procfs::exe(p).ok();
    let forked_only = stat_field::<u64>(pid, 9).is_some_and(|flags| flags & PF_FORKNOEXEC != 0);
    forked_only && exe(pid).is_some() && exe(pid) == exe(attached) && start_time(pid) >= start_time(attached)
}

/// The forks of `attached` (and of its forks, and so on) that carry its probes, running now.
pub(crate) fn forks_of(attached: i32) -> Vec<i32> {
    let running: Vec<(i32, i32)> = processes().into_iter().filter_map(|p| Some((p, parent_of(p)?))).collect();
    let mut found = vec![attached];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(running.iter().filter(|&&(p, pp)| pp == parent && carries_probes_of(p, attached)).map(|&(p, _)| p));
        i += 1;
    }
    found.remove(0);
    found
}

/// The forks of an attached process lopi has seen, looked for once a second.
pub(crate) struct Forks {
    root: i32,
    known: std::collections::BTreeSet<i32>,
    next: std::time::Instant,
}

impl Forks {
    pub(crate) fn new(root: i32) -> Forks {
        Forks { root, known: Default::default(), next: std::time::Instant::now() }
    }

    /// Looks for new forks, if a second has passed since the last look (they are found
    /// through the attached process: once it is gone, those seen before are what is known).
    pub(crate) fn refresh(&mut self) {
        if std::time::Instant::now() >= self.next {
            self.look();
        }
    }

    fn look(&mut self) {
        self.known.retain(|&p| crate::live::alive(p));
        if crate::live::alive(self.root) {
            self.known.extend(forks_of(self.root));
        }
        self.next = std::time::Instant::now() + std::time::Duration::from_secs(1);
    }

    /// The forks running now, looked for again.
    pub(crate) fn running(&mut self) -> Vec<i32> {
        self.look();
        self.known.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shell whose subshell is a fork that executed nothing, and whose `sleep` executed a
    /// program.
    #[test]
    fn a_fork_carries_its_parents_probes_until_it_executes() {
        let mut shell = std::process::Command::new("sh").args(["-c", "( sleep 1; true ) & wait"]).spawn().expect("sh");
        let sh = shell.id() as i32;
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_eq!(parent_of(sh), Some(std::process::id() as i32));
        let forks = forks_of(sh);
        assert_eq!(forks.len(), 1, "the subshell alone: {forks:?}");
        let sleeping: Vec<i32> = processes().into_iter().filter(|&p| parent_of(p) == Some(forks[0])).collect();
        assert_eq!(sleeping.len(), 1, "the subshell's sleep: {sleeping:?}");
        assert!(!carries_probes_of(sleeping[0], sh), "a child that executed a program");
        let _ = shell.wait();
    }
}
