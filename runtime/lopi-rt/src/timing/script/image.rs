//! Reading a script image: its strings, its functions' names and its maps' tables in a
//! thread's area.
use crate::abi::script::{FunctionName, ScriptArea, ScriptImage, TableShape};
use crate::abi::script_map;

/// A map's table in `area`.
pub(super) unsafe fn table_of<'a>(area: *mut ScriptArea, shape: TableShape) -> &'a mut [u8] {
    let len = script_map::table_size(shape.key_size as usize, shape.slot_size as usize, shape.max_entries);
    // SAFETY: the image builder laid the tables out inside the area.
    unsafe { core::slice::from_raw_parts_mut((area as *mut u8).add(shape.offset as usize), len) }
}

/// A string of the script image: (address, length).
pub(super) unsafe fn string(s: *const ScriptImage, offset: u32, len: u32) -> (*const u8, usize) {
    // SAFETY: the image builder keeps every (offset, length) inside `strings`.
    unsafe {
        let end = (u64::from(offset) + u64::from(len)).min((*s).strings_len);
        let start = u64::from(offset).min(end);
        ((s as u64).wrapping_add((*s).strings as u64).wrapping_add(start) as *const u8, (end - start) as usize)
    }
}

pub(super) unsafe fn function(s: *const ScriptImage, index: u64) -> Option<FunctionName> {
    // SAFETY: a `FunctionName` per counter.
    unsafe { (index < u64::from((*s).counter_count)).then(|| *((s as u64).wrapping_add((*s).functions as u64) as *const FunctionName).add(index as usize)) }
}
