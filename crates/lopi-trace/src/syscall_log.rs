//! The system calls a thread's trace logged (`lopi run --log`, [`lopi_rt_abi::syscall_log`]):
//! an [`EVENT_SYSCALL`] event is followed by its payload's slots, which are not events.
use lopi_rt_abi::syscall_log::{self as log, SyscallRecord, SLOT_LEN, SYSCALL_RECORD_LEN};
use lopi_rt_abi::{Event, EVENT_LEN, EVENT_SYSCALL};

/// One logged call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedCall {
    /// When it returned (or was made, for a call that does not return), in TSC ticks.
    pub tsc: u64,
    pub record: SyscallRecord,
    /// The bytes of each of `bytes_of(nr)`'s two parts.
    pub bytes: [Vec<u8>; 2],
}

/// A trace region's events and logged calls, in order. `None` when a payload runs past the
/// region or says more than a payload can hold.
pub(crate) fn split(trace: &[u8]) -> Option<(Vec<Event>, Vec<LoggedCall>)> {
    let (mut events, mut calls) = (Vec::new(), Vec::new());
    let mut at = 0;
    while at + EVENT_LEN <= trace.len() {
        let event = Event::from_bytes(&trace[at..])?;
        at += EVENT_LEN;
        if event.kind != EVENT_SYSCALL {
            events.push(event);
            continue;
        }
        let slots = event.node as usize;
        if slots > log::MAX_SLOTS {
            return None;
        }
        let payload = trace.get(at..at + slots * SLOT_LEN)?;
        at += slots * SLOT_LEN;
        let record = SyscallRecord::from_bytes(payload)?;
        let mut from = SYSCALL_RECORD_LEN;
        let mut part = |len: u16| -> Option<Vec<u8>> {
            let bytes = payload.get(from..from + len as usize)?.to_vec();
            from += log::slots_of(len as usize) * SLOT_LEN;
            Some(bytes)
        };
        let bytes = [part(record.lens[0])?, part(record.lens[1])?];
        calls.push(LoggedCall { tsc: event.tsc, record, bytes });
    }
    Some((events, calls))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(tsc: u64, node: u32, kind: u32) -> Vec<u8> {
        [tsc.to_le_bytes().as_slice(), &node.to_le_bytes(), &kind.to_le_bytes()].concat()
    }

    #[test]
    fn payloads_are_not_events() {
        let mut trace = event(5, 2, lopi_rt_abi::EVENT_ENTER);
        let mut record = vec![0u8; SYSCALL_RECORD_LEN];
        record[..4].copy_from_slice(&257u32.to_le_bytes());
        record[4..8].copy_from_slice(&log::RETURNED.to_le_bytes());
        record[64..66].copy_from_slice(&4u16.to_le_bytes());
        trace.extend(event(9, 6, EVENT_SYSCALL));
        trace.extend(&record);
        trace.extend(b"/etc\0\0\0\0\0\0\0\0\0\0\0\0");
        trace.extend(event(10, 2, lopi_rt_abi::EVENT_EXIT));
        let (events, calls) = split(&trace).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].tsc, calls[0].record.nr, calls[0].bytes[0].as_slice()), (9, 257, b"/etc".as_slice()));
        // A payload running past the region, or longer than any payload, is refused.
        assert!(split(&trace[..trace.len() - 20]).is_none());
        let mut long = event(9, log::MAX_SLOTS as u32 + 1, EVENT_SYSCALL);
        long.extend(vec![0; (log::MAX_SLOTS + 1) * SLOT_LEN]);
        assert!(split(&long).is_none());
    }
}
