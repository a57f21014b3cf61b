//! Relocation tables, one per instruction class (after iced-x86's own test layout): each row
//! is encoded at one address, moved far away, decoded again and must name the same targets.
use super::*;

/// Re-encodes `instructions` at `ip` the way trampolines move displaced code.
fn encode_block(instructions: &[Instruction], ip: u64) -> Result<Vec<u8>, RelocError> {
    let block = iced_x86::InstructionBlock::new(instructions, ip);
    iced_x86::BlockEncoder::encode(64, block, iced_x86::BlockEncoderOptions::NONE)
        .map(|r| r.code_buffer)
        .map_err(|e| RelocError::Encode(e.to_string()))
}

const FROM: u64 = 0x40_1000;
const TO: u64 = 0x4000_0000;

fn relocate(bytes: &[u8]) -> Vec<Instruction> {
    let insns: Vec<_> = decode(bytes, FROM).collect();
    assert_eq!(insns.iter().map(|i| i.len()).sum::<usize>(), bytes.len(), "test row must decode fully");
    let moved = encode_block(&insns, TO).unwrap();
    decode(&moved, TO).collect()
}

fn targets(insns: &[Instruction]) -> Vec<u64> {
    insns.iter().filter_map(|i| branch_target(i).or_else(|| rip_relative_address(i))).collect()
}

#[test]
fn conditional_jumps_keep_targets() {
    for row in [&[0x74u8, 0x10][..], &[0x0f, 0x85, 0x00, 0x01, 0x00, 0x00], &[0x7c, 0x7e]] {
        let before: Vec<_> = decode(row, FROM).collect();
        assert_eq!(targets(&relocate(row)), targets(&before), "row {row:02x?}");
    }
}

#[test]
fn unconditional_jumps_and_calls_keep_targets() {
    for row in [&[0xebu8, 0x05][..], &[0xe9, 0x00, 0x10, 0x00, 0x00], &[0xe8, 0x10, 0x00, 0x00, 0x00]] {
        let before: Vec<_> = decode(row, FROM).collect();
        assert_eq!(targets(&relocate(row)), targets(&before), "row {row:02x?}");
    }
}

#[test]
fn rip_relative_operands_keep_addresses() {
    // lea rax,[rip+0x100]; mov rcx,[rip-0x20]; cmp dword [rip+0x10],5
    let row = [0x48, 0x8d, 0x05, 0x00, 0x01, 0x00, 0x00, 0x48, 0x8b, 0x0d, 0xe0, 0xff, 0xff, 0xff, 0x83, 0x3d, 0x10, 0x00, 0x00, 0x00, 0x05];
    let before: Vec<_> = decode(&row, FROM).collect();
    assert_eq!(targets(&relocate(&row)), targets(&before));
}

#[test]
fn branches_inside_the_block_follow_the_block() {
    // jl to itself: the moved copy loops on itself, not on the old address.
    let after = relocate(&[0x7c, 0xfe]);
    assert_eq!(targets(&after), vec![TO]);
}

#[test]
fn loop_and_jrcxz_keep_targets() {
    for row in [&[0xe2u8, 0x10][..], &[0xe3, 0x08]] {
        let before: Vec<_> = decode(row, FROM).collect();
        let after = relocate(row);
        assert!(targets(&after).contains(&targets(&before)[0]), "row {row:02x?} -> {after:?}");
    }
}

#[test]
fn plain_instructions_are_copied() {
    let row = [0x55, 0x48, 0x89, 0xe5, 0x41, 0x57];
    let moved = encode_block(&decode(&row, FROM).collect::<Vec<_>>(), TO).unwrap();
    assert_eq!(moved, row);
}

#[test]
fn classification() {
    let f = |b: &[u8]| flow(&decode_one(b, FROM).unwrap());
    assert_eq!(f(&[0xc3]), Flow::Return);
    assert_eq!(f(&[0xe8, 0, 0, 0, 0]), Flow::Call);
    assert_eq!(f(&[0xff, 0xe0]), Flow::IndirectJump);
    assert_eq!(f(&[0x0f, 0x0b]), Flow::Stop);
    assert_eq!(f(&[0xf4]), Flow::Stop, "hlt");
    assert_eq!(f(&[0x0f, 0x05]), Flow::Interrupt);
    assert!(is_endbr64(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55]));
}

#[test]
fn padding_detection() {
    assert!(is_padding(&[0xcc, 0xcc], FROM));
    assert!(is_padding(&[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0x90], FROM));
    assert!(!is_padding(&[0x90, 0xc3], FROM));
    assert!(!is_padding(&[0x0f], FROM));
}

#[test]
fn short_jumps_out_of_range_are_refused() {
    assert!(jmp8_bytes(0x1000, 0x1000 + 200).is_none());
    assert_eq!(jmp8_bytes(0x1000, 0x1010), Some([0xeb, 0x0e]));
    assert_eq!(jmp32_bytes(0x1000, 0x2000), Some([0xe9, 0xfb, 0x0f, 0, 0]));
    assert!(jmp32_bytes(0, 1 << 40).is_none());
}


#[test]
fn emulated_calls_push_the_original_return_address() {
    // call rel32 at FROM, and call [rip+0x100]
    for row in [&[0xe8u8, 0x10, 0x00, 0x00, 0x00][..], &[0xff, 0x15, 0x00, 0x01, 0x00, 0x00]] {
        let call = decode_one(row, FROM).unwrap();
        let seq = emulate_call(&call).unwrap();
        assert_eq!(seq[0].ip(), FROM, "a branch to the call lands on its emulation");
        let moved = encode_block(&seq, TO).unwrap();
        let insns: Vec<_> = decode(&moved, TO).collect();
        assert_eq!(rip_relative_address(&insns[2]), Some(FROM + row.len() as u64), "return address");
        let last = insns.last().unwrap();
        assert_eq!(flow(last), if row[0] == 0xe8 { Flow::Jump } else { Flow::IndirectJump });
        assert_eq!(branch_target(last).or_else(|| rip_relative_address(last)), branch_target(&call).or_else(|| rip_relative_address(&call)));
    }
    // call [rsp+8] reads the stack the emulation changes.
    assert!(emulate_call(&decode_one(&[0xff, 0x54, 0x24, 0x08], FROM).unwrap()).is_none());
}

const ACCESS: CounterAccess = CounterAccess {
    shared: TO + 0x10_0000,
    rseq_offset_var: TO + 0x20_0000,
    cpu_count_var: TO + 0x20_0010,
    percpu_base_var: TO + 0x20_0008,
    stride: 0x1000,
    index: 7,
    cs: TO + 0x30_0000,
};

#[test]
fn counting_trampoline_layout() {
    let access = ACCESS;
    // push rbp; mov rbp,rsp (moved body), resume at FROM+4
    let body: Vec<_> = decode(&[0x55, 0x48, 0x89, 0xe5], FROM).collect();
    let t = counting_trampoline(&access, Counted::Entry, &Body { insns: &body, loops_in_copy: false, exits: &[], resume: Some(FROM + 4), syscalls: None }, TO).unwrap();
    let s = t.section;
    let sig_at = (s.abort - TO - 4) as usize;
    assert_eq!(&t.bytes[sig_at..sig_at + 4], &RSEQ_SIG.to_le_bytes(), "signature right before the abort handler");
    let insns: Vec<_> = decode(&t.bytes, TO).collect();
    let at = |ip: u64| insns.iter().find(|i| i.ip() == ip).unwrap();
    // The section starts by arming rseq_cs and ends right after the (unlocked) increment.
    assert_eq!(rip_relative_address(at(s.start)), Some(access.cs));
    assert!(insns.iter().any(|i| i.ip() > s.start && i.memory_segment() == iced_x86::Register::FS));
    let commit = insns.iter().take_while(|i| i.ip() < s.start + s.post_commit_offset).last().unwrap();
    assert_eq!(commit.mnemonic(), iced_x86::Mnemonic::Inc);
    assert!(!commit.has_lock_prefix());
    assert_eq!(commit.memory_displacement64(), 56);
    // The locked fallback counts into the shared counter; the body jumps back.
    assert!(insns.iter().any(|i| i.has_lock_prefix() && rip_relative_address(i) == Some(access.shared)));
    assert!(insns.iter().any(|i| branch_target(i) == Some(FROM + 4)));
}

#[test]
fn exit_probes_run_before_each_exit() {
    const STUB: u64 = TO + 0x40_0000;
    // pop rbx; ret
    let ret: Vec<_> = decode(&[0x5b, 0xc3], FROM).collect();
    let probe = ExitProbe { stub: STUB, counter: Some(3), mode: None, mark_tail: true };
    let bytes = timing_trampoline(Timed::Exit(probe), &Body { insns: &ret, loops_in_copy: false, exits: &[(FROM + 1, ExitKind::Return)], resume: None, syscalls: None }, TO).unwrap().bytes;
    let insns: Vec<_> = decode(&bytes, TO).collect();
    let names: Vec<_> = insns.iter().map(|i| i.mnemonic()).collect();
    use iced_x86::Mnemonic::*;
    assert_eq!(names, [Pop, Push, Call, Ret]);
    assert_eq!(insns[1].immediate32(), 3, "the exiting function's counter index");
    assert_eq!(insns[2].near_branch_target(), STUB);

    // test edi,edi; jne <elsewhere> (a conditional tail call), resume after it
    let target = FROM + 0x1000;
    let code = [0x85, 0xff, 0x0f, 0x85, 0xf8, 0x0f, 0x00, 0x00];
    let jcc: Vec<_> = decode(&code, FROM).collect();
    assert_eq!(jcc[1].near_branch_target(), target);
    let body = Body { insns: &jcc, loops_in_copy: false, exits: &[(FROM + 2, ExitKind::ConditionalTailJump)], resume: Some(FROM + 8), syscalls: None };
    // A site several functions share names none of them.
    let bytes = timing_trampoline(Timed::Exit(ExitProbe { stub: STUB, counter: None, mode: None, mark_tail: true }), &body, TO).unwrap().bytes;
    let insns: Vec<_> = decode(&bytes, TO).collect();
    let names: Vec<_> = insns.iter().map(|i| i.mnemonic()).collect();
    assert_eq!(names, [Test, Jne, Jmp, Push, Call, Jmp]);
    assert_eq!(insns[1].near_branch_target(), insns[3].ip(), "taken path goes through the probe");
    assert_eq!(insns[2].near_branch_target(), FROM + 8);
    assert_eq!(insns[3].immediate32to64(), -1);
    assert_eq!(insns[4].near_branch_target(), STUB);
    assert_eq!(insns[5].near_branch_target(), target);
}

#[test]
fn timed_entry_pushes_the_counter_and_calls_the_stub() {
    // xor eax,eax; ret: the whole function moves, its ret gets the exit probe
    let body: Vec<_> = decode(&[0x31, 0xc0, 0xc3], FROM).collect();
    let mode = TO + 0x20_0100;
    let timed = TimedEntry { enter_stub: TO + 0x40_0000, exit_stub: TO + 0x40_0040, counter: ACCESS, mode, entry_tag: 0 };
    let t = timing_trampoline(Timed::Entry { entry: &timed, copy: None }, &Body { insns: &body, loops_in_copy: false, exits: &[(FROM + 2, ExitKind::Return)], resume: None, syscalls: None }, TO).unwrap();
    let insns: Vec<_> = decode(&t.bytes, TO).collect();
    use iced_x86::Mnemonic::*;
    let names: Vec<_> = insns.iter().map(|i| i.mnemonic()).collect();
    // Mode check, entry probe, body with the exit probe (skipped once switched), then the
    // counting code a switched function runs instead.
    assert_eq!(&names[..10], [Cmp, Jne, Push, Call, Xor, Cmp, Jne, Push, Call, Ret]);
    assert_eq!(rip_relative_address(&insns[0]), Some(mode));
    assert_eq!(insns[2].immediate32(), 7);
    assert_eq!(insns[3].near_branch_target(), timed.enter_stub);
    assert_eq!(rip_relative_address(&insns[5]), Some(mode));
    assert_eq!(insns[6].near_branch_target(), insns[9].ip(), "a switched exit skips to the ret");
    assert_eq!(insns[7].immediate32(), 7);
    assert_eq!(insns[8].near_branch_target(), timed.exit_stub);
    let top = insns[1].near_branch_target();
    let counting = insns.iter().position(|i| i.ip() == top).expect("counting code in the trampoline");
    assert!(insns[counting..].iter().any(|i| i.mnemonic() == Inc && i.memory_displacement64() == 56), "per-CPU increment of counter 7");
    let body_at = insns[4].ip();
    assert!(insns[counting..].iter().any(|i| i.mnemonic() == Jmp && i.near_branch_target() == body_at), "back to the body");
    assert!(t.section.start > TO && t.section.abort > t.section.start);
}

#[test]
fn absolute_constants_are_immediates_and_baseless_displacements() {
    let consts = |bytes: &[u8]| -> Vec<u64> { decode(bytes, FROM).flat_map(|i| absolute_constants(&i).collect::<Vec<_>>()).collect() };
    // mov edi,0x42147b; push 0x401000; mov rax,0x1122334455667788
    assert_eq!(consts(&[0xbf, 0x7b, 0x14, 0x42, 0x00]), vec![0x42147b]);
    assert_eq!(consts(&[0x68, 0x00, 0x10, 0x40, 0x00]), vec![0x401000]);
    assert_eq!(consts(&[0x48, 0xb8, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]), vec![0x1122334455667788]);
    // jmp [rax*8+0x402000]: a non-PIC table base
    assert_eq!(consts(&[0xff, 0x24, 0xc5, 0x00, 0x20, 0x40, 0x00]), vec![0x402000]);
    // lea rax,[rip+0x100]; mov rcx,[rbx+0x400000]; add eax,1: none
    assert!(consts(&[0x48, 0x8d, 0x05, 0x00, 0x01, 0x00, 0x00]).is_empty());
    assert!(consts(&[0x48, 0x8b, 0x8b, 0x00, 0x00, 0x40, 0x00]).is_empty());
    assert!(consts(&[0x83, 0xc0, 0x01]).is_empty());
}

#[test]
fn a_switched_leaf_runs_its_clean_copy() {
    // lea eax,[rdi+1]; ret: a leaf, timed; once switched its count continues in a copy.
    let body: Vec<_> = decode(&[0x8d, 0x47, 0x01, 0xc3], FROM).collect();
    let timed = TimedEntry { enter_stub: TO + 0x40_0000, exit_stub: TO + 0x40_0040, counter: ACCESS, mode: TO + 0x20_0100, entry_tag: 0 };
    let with_probes = Body { insns: &body, loops_in_copy: false, exits: &[(FROM + 3, ExitKind::Return)], resume: None, syscalls: None };
    let t = timing_trampoline(Timed::Entry { entry: &timed, copy: Some(&body) }, &with_probes, TO).unwrap();
    let insns: Vec<_> = decode(&t.bytes, TO).collect();
    use iced_x86::Mnemonic::*;
    // The copy is the last code: the function itself, without probes, 16-byte aligned.
    let n = insns.len();
    assert_eq!([insns[n - 2].mnemonic(), insns[n - 1].mnemonic()], [Lea, Ret]);
    let copy_at = insns[n - 2].ip();
    assert_eq!(copy_at % 16, 0);
    // The counting path (from the mode check's target) jumps there, not into the probed body.
    let top = insns[1].near_branch_target();
    let counting = insns.iter().position(|i| i.ip() == top).expect("counting code");
    let jumps: Vec<u64> = insns[counting..n - 2].iter().filter(|i| i.mnemonic() == Jmp).map(|i| i.near_branch_target()).collect();
    assert!(jumps.contains(&copy_at), "{jumps:x?}");
    assert!(!jumps.contains(&insns[4].ip()), "the switched path must not run the probed body");
}

#[test]
fn a_loop_back_to_a_blocks_start_runs_its_probe_again() {
    // sub rax,1; jne <itself>: a block that is a whole loop, moved into a block probe.
    let body: Vec<_> = decode(&[0x48, 0x83, 0xe8, 0x01, 0x75, 0xfa], FROM).collect();
    assert_eq!(body[1].near_branch_target(), FROM);
    let moved = Body { insns: &body, loops_in_copy: false, exits: &[], resume: Some(FROM + 6), syscalls: None };
    let t = counting_trampoline(&ACCESS, Counted::Block { flags_dead: false }, &moved, TO).unwrap();
    let insns: Vec<_> = decode(&t.bytes, TO).collect();
    let jne = insns.iter().find(|i| i.mnemonic() == iced_x86::Mnemonic::Jne && i.near_branch_target() >= FROM && i.near_branch_target() < TO);
    assert_eq!(jne.map(|i| i.near_branch_target()), Some(FROM), "the loop goes back through the site: {insns:?}");
    // A function moved whole (its loop reaches its entry) runs the loop in the copy.
    let whole = Body { loops_in_copy: true, ..moved };
    let t = counting_trampoline(&ACCESS, Counted::Entry, &whole, TO).unwrap();
    let insns: Vec<_> = decode(&t.bytes, TO).collect();
    let sub = insns.iter().find(|i| i.mnemonic() == iced_x86::Mnemonic::Sub).unwrap().ip();
    assert!(insns.iter().any(|i| i.mnemonic() == iced_x86::Mnemonic::Jne && i.near_branch_target() == sub), "{insns:?}");
}

#[test]
fn moved_code_that_takes_its_own_address_gets_the_original() {
    // lea rax,[rip-7] (its own address); add rax,26
    let code = [0x48, 0x8d, 0x05, 0xf9, 0xff, 0xff, 0xff, 0x48, 0x83, 0xc0, 0x1a];
    let body: Vec<_> = decode(&code, FROM).collect();
    assert_eq!(rip_relative_address(&body[0]), Some(FROM));
    for loops_in_copy in [false, true] {
        let moved = Body { insns: &body, loops_in_copy, exits: &[], resume: Some(FROM + 11), syscalls: None };
        let t = counting_trampoline(&ACCESS, Counted::Block { flags_dead: false }, &moved, TO).unwrap();
        let insns: Vec<_> = decode(&t.bytes, TO).collect();
        // rax = what the moved code computes before its add.
        let add = insns.iter().position(|i| i.mnemonic() == iced_x86::Mnemonic::Add && i.op0_register() == iced_x86::Register::RAX && i.immediate32() == 26).unwrap();
        let rax = match &insns[..add] {
            [.., base, plus] if plus.memory_base() == iced_x86::Register::RAX => rip_relative_address(base).unwrap().wrapping_add(plus.memory_displacement64()),
            [.., own] => rip_relative_address(own).unwrap(),
            [] => unreachable!(),
        };
        assert_eq!(rax, FROM, "loops_in_copy {loops_in_copy}: {insns:?}");
    }
}

#[test]
fn a_coverage_probe_passes_its_own_retire_record() {
    // mov eax,1; a coverage probe that retires itself: rdi names the record after its code.
    let body: Vec<_> = decode(&[0xb8, 0x01, 0x00, 0x00, 0x00], FROM).collect();
    let original = [0xb8, 0x01, 0x00, 0x00, 0x00];
    let retire = Retire { stub: TO + 0x40_0000, site: FROM, jump_len: 5, original: &original };
    let moved = Body { insns: &body, loops_in_copy: false, exits: &[], resume: Some(FROM + 5), syscalls: None };
    let t = marking_trampoline(TO + 0x10_0000, Some(&retire), &moved, TO).unwrap();
    let insns: Vec<_> = decode(&t.bytes, TO).collect();
    let lea = insns.iter().find(|i| i.mnemonic() == iced_x86::Mnemonic::Lea && i.op0_register() == iced_x86::Register::RDI).unwrap();
    let at = (rip_relative_address(lea).unwrap() - TO) as usize;
    assert_eq!(t.bytes.get(at..at + 7), Some(&[5, 5, 0xb8, 0x01, 0x00, 0x00, 0x00][..]), "{insns:?}");
}

#[test]
fn counting_code_goes_on_into_the_moved_copy() {
    // push rbp; mov rbp,rsp: no jump may lead back to the original (the site's own jump).
    let body: Vec<_> = decode(&[0x55, 0x48, 0x89, 0xe5], FROM).collect();
    let moved = Body { insns: &body, loops_in_copy: false, exits: &[], resume: Some(FROM + 4), syscalls: None };
    let timed = TimedEntry { enter_stub: TO + 0x40_0000, exit_stub: TO + 0x40_0040, counter: ACCESS, mode: TO + 0x20_0100, entry_tag: 0 };
    let trampolines = [
        ("counting", counting_trampoline(&ACCESS, Counted::Entry, &moved, TO).unwrap()),
        ("probing counting", counting_trampoline(&ACCESS, Counted::ProbedEntry { stub: TO + 0x40_0080, counter: 7 }, &moved, TO).unwrap()),
        ("block counting", counting_trampoline(&ACCESS, Counted::Block { flags_dead: false }, &moved, TO).unwrap()),
        ("timed", timing_trampoline(Timed::Entry { entry: &timed, copy: None }, &moved, TO).unwrap()),
    ];
    for (kind, t) in trampolines {
        let insns: Vec<_> = decode(&t.bytes, TO).collect();
        assert!(insns.iter().all(|i| branch_target(i) != Some(FROM)), "{kind}: a jump back to the site: {insns:?}");
        assert!(insns.iter().any(|i| i.mnemonic() == iced_x86::Mnemonic::Push && i.op0_register() == iced_x86::Register::RBP), "{kind}: the moved push");
    }
}
