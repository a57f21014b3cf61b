//! What `/proc/PID` says about a process: its threads, mappings, tracer and memory.
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub readable: bool,
    pub executable: bool,
    pub offset: u64,
    pub dev: String,
    pub inode: u64,
    /// The file, `[heap]`-style name, or empty for anonymous memory.
    pub path: String,
}

/// Parses `/proc/PID/maps` text; lines that do not parse are skipped.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_map_line).collect()
}

fn parse_map_line(line: &str) -> Option<Mapping> {
    let mut fields = line.splitn(6, ' ');
    let (range, perms, offset, dev, inode) = (fields.next()?, fields.next()?, fields.next()?, fields.next()?, fields.next()?);
    let path = fields.next().unwrap_or("").trim_start().to_string();
    let (start, end) = range.split_once('-')?;
    let perms = perms.as_bytes();
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        readable: perms.first() == Some(&b'r'),
        executable: perms.get(2) == Some(&b'x'),
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev: dev.to_string(),
        inode: inode.parse().ok()?,
        path,
    })
}

pub fn maps(pid: i32) -> std::io::Result<Vec<Mapping>> {
    Ok(parse_maps(&std::fs::read_to_string(format!("/proc/{pid}/maps"))?))
}

/// Thread ids, from `/proc/PID/task`.
pub fn threads(pid: i32) -> std::io::Result<Vec<i32>> {
    let mut tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// Whether thread `tid` of `pid` has ended (a zombie or dead task, or gone): ptrace refuses
/// such a thread with EPERM.
pub fn thread_ended(pid: i32, tid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")) {
        Ok(stat) => stat.rfind(')').and_then(|i| stat.get(i + 2..i + 3)).is_some_and(|state| state == "Z" || state == "X"),
        Err(_) => true,
    }
}

/// The process (thread group) thread `tid` belongs to (`Tgid:` in `/proc/TID/status`).
pub fn thread_group(tid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok())
}

/// The files process `pid` has code of mapped (executable mappings of files), each once.
pub fn code_files(pid: i32) -> Vec<String> {
    let mut files: Vec<String> = maps(pid).unwrap_or_default().into_iter().filter(|m| m.executable && m.path.starts_with('/')).map(|m| m.path).collect();
    files.sort_unstable();
    files.dedup();
    files
}

/// Process `pid`'s command line (`/proc/PID/cmdline`), an argument a string.
pub fn command_line(pid: i32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(raw.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect())
}

/// The pid of the process tracing `pid`, if any (`TracerPid:` in `/proc/PID/status`).
pub fn tracer(pid: i32) -> Option<i32> {
    task_tracer(pid, pid)
}

/// The thread tracing thread `tid` of `pid`, if any.
pub fn task_tracer(pid: i32, tid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("TracerPid:"))?;
    line["TracerPid:".len()..].trim().parse().ok().filter(|&t| t != 0)
}

/// True when process `pid` has a handler of its own for `signal` (`SigCgt:` in
/// `/proc/PID/status`).
pub fn handles_signal(pid: i32, signal: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let caught = status.lines().find_map(|l| l.strip_prefix("SigCgt:")).and_then(|v| u64::from_str_radix(v.trim(), 16).ok()).unwrap_or(0);
    caught & (1 << (signal - 1)) != 0
}

/// `start_brk` (field 47 of `/proc/PID/stat`): where the heap starts growing.
pub fn start_brk(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(44)?.parse().ok()
}

/// A value from `/proc/PID/auxv`.
pub fn auxv(pid: i32, key: u64) -> Option<u64> {
    let raw = std::fs::read(format!("/proc/{pid}/auxv")).ok()?;
    raw.chunks_exact(16).find_map(|pair| {
        let k = u64::from_le_bytes(pair[..8].try_into().ok()?);
        (k == key).then(|| u64::from_le_bytes(pair[8..].try_into().unwrap_or_default()))
    })
}

pub fn exe(pid: i32) -> std::io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe"))
}

/// A process's memory through `/proc/PID/mem`: reads and writes any mapped page, including
/// read-only code (the kernel copies the page on write, as for a debugger's breakpoints).
pub struct Memory {
    file: File,
}

impl Memory {
    pub fn open(pid: i32) -> std::io::Result<Self> {
        Ok(Self { file: std::fs::OpenOptions::new().read(true).write(true).open(format!("/proc/{pid}/mem"))? })
    }

    pub fn read(&self, addr: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0; len];
        self.file.read_exact_at(&mut buf, addr)?;
        Ok(buf)
    }

    pub fn read_u64(&self, addr: u64) -> std::io::Result<u64> {
        let bytes = self.read(addr, 8)?;
        Ok(u64::from_le_bytes(bytes.try_into().unwrap_or_default()))
    }

    pub fn write(&self, addr: u64, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all_at(bytes, addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_maps_lines() {
        let text = "55d0c8a00000-55d0c8a02000 r-xp 00001000 fd:01 1234     /usr/bin/my prog\n\
                    7ffd1000-7ffd3000 rw-p 00000000 00:00 0                  [stack]\n\
                    7f0000000000-7f0000001000 ---p 00000000 00:00 0\n\
                    garbage\n";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 3);
        assert_eq!(maps[0].start, 0x55d0c8a00000);
        assert!(maps[0].executable && maps[0].readable);
        assert_eq!(maps[0].offset, 0x1000);
        assert_eq!(maps[0].inode, 1234);
        assert_eq!(maps[0].path, "/usr/bin/my prog");
        assert_eq!(maps[1].path, "[stack]");
        assert!(!maps[2].readable);
        assert_eq!(maps[2].path, "");
    }

    #[test]
    fn any_text_parses_without_panicking() {
        let line = "55d0c8a00000-55d0c8a02000 r-xp 00001000 fd:01 1234     /usr/bin/x\n";
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut bytes = line.as_bytes().to_vec();
            let at = (state % bytes.len() as u64) as usize;
            bytes[at] = (state >> 32) as u8;
            bytes.truncate(((state >> 40) % (bytes.len() as u64 + 1)) as usize);
            let _ = parse_maps(&String::from_utf8_lossy(&bytes));
        }
    }

    #[test]
    fn reads_own_process() {
        let pid = std::process::id() as i32;
        assert!(threads(pid).unwrap().contains(&pid));
        assert!(start_brk(pid).is_some_and(|b| maps(pid).unwrap().iter().any(|m| m.path == "[heap]" && m.start >= b) || b > 0));
        assert!(auxv(pid, 6).is_some_and(|page| page == 4096)); // AT_PAGESZ
        assert!(!maps(pid).unwrap().is_empty());
    }
}
