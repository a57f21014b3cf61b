//! Maps: every aggregation against the slot layouts of `codegen::abi`, keys of every type
//! encoded as the ABI says, plain values read, updated, deleted and cleared, and full maps.
use crate::harness::{ctx, s, Script, Value, K};
use lopi_script::codegen::abi::{hist_bucket, lhist_bucket, HIST_BUCKETS};

const VALUES: [i64; 12] = [5, -3, 100, 0, 1 << 40, 1, 2, 3, i64::MAX, i64::MIN, 99, -100];

/// Runs the `aggregations` script once per value of [`VALUES`].
fn aggregated() -> crate::harness::Runtime {
    let script = Script::named("aggregations");
    let mut rt = script.runtime();
    for v in VALUES {
        script.run(0, &mut ctx([v, 0, 0, 0, 0, 0]), &mut rt);
    }
    rt
}

#[test]
fn count_sum_avg_min_max_stats() {
    let rt = aggregated();
    let n = VALUES.len() as i64;
    let sum = VALUES.iter().fold(0i64, |a, &v| a.wrapping_add(v));
    let (min, max) = (*VALUES.iter().min().unwrap(), *VALUES.iter().max().unwrap());
    assert_eq!(rt.words("c", &[]), Some(vec![n]));
    assert_eq!(rt.words("s", &[]), Some(vec![sum]));
    assert_eq!(rt.words("a", &[]), Some(vec![sum, n]));
    assert_eq!(rt.words("mn", &[]), Some(vec![min, 1]));
    assert_eq!(rt.words("mx", &[]), Some(vec![max, 1]));
    assert_eq!(rt.words("st", &[]), Some(vec![n, sum, min, max]));
}

#[test]
fn min_and_max_start_at_the_first_value() {
    let script = Script::new("func:foo { @mn = min(arg0); @mx = max(arg0); @st = stats(arg0); }");
    let mut rt = script.runtime();
    for v in [7, 9] {
        script.run(0, &mut ctx([v, 0, 0, 0, 0, 0]), &mut rt);
    }
    assert_eq!(rt.words("mn", &[]), Some(vec![7, 1]));
    assert_eq!(rt.words("mx", &[]), Some(vec![9, 1]));
    assert_eq!(rt.words("st", &[]), Some(vec![2, 16, 7, 9]));
    let (_, rt) = script.run_args([-5, 0, 0, 0, 0, 0]);
    assert_eq!((rt.words("mn", &[]), rt.words("st", &[])), (Some(vec![-5, 1]), Some(vec![1, -5, -5, -5])));
}

#[test]
fn hist_counts_powers_of_two() {
    let rt = aggregated();
    let hist = rt.words("h", &[]).unwrap();
    assert_eq!(hist.len(), HIST_BUCKETS);
    let mut expected = vec![0; HIST_BUCKETS];
    VALUES.iter().for_each(|&v| expected[hist_bucket(v)] += 1);
    assert_eq!(hist, expected);
    // Negatives (-3, MIN, -100), zero, 1, 2..3, 4..7 (5), 64..127 (100, 99), 2^40, MAX.
    let spots = [(0, 3), (1, 1), (2, 1), (3, 2), (4, 1), (8, 2), (42, 1), (64, 1)];
    for (bucket, count) in spots {
        assert_eq!(hist[bucket], count, "bucket {bucket}");
    }
}

#[test]
fn lhist_counts_linear_buckets_and_the_outside() {
    let rt = aggregated();
    // lhist(arg0, -100, 100, 20): below, ten buckets, above.
    let lhist = rt.words("l", &[]).unwrap();
    assert_eq!(lhist.len(), 12);
    let mut expected = vec![0; 12];
    VALUES.iter().for_each(|&v| expected[lhist_bucket(v, -100, 100, 20)] += 1);
    assert_eq!(lhist, expected);
    // -100 is in the first bucket, 99 in the last; MIN below; 100, 2^40, MAX above.
    assert_eq!((lhist[0], lhist[1], lhist[10], lhist[11]), (1, 1, 1, 3));

    let script = Script::new("func:foo { @l = lhist(arg0, 0, 100, 30); @w = lhist(arg0, -9223372036854775808, 9223372036854775807, 9223372036854775807); }");
    let mut rt = script.runtime();
    for v in [0, 29, 30, 95, 99, 100, -1, i64::MIN, i64::MAX, 0, i64::MAX - 1, -2] {
        script.run(0, &mut ctx([v, 0, 0, 0, 0, 0]), &mut rt);
    }
    assert_eq!(rt.words("l", &[]), Some(vec![3, 3, 1, 0, 2, 3]));
    // Buckets of 2^63 - 1 from i64::MIN: [MIN, -1), [-1, MAX - 1), [MAX - 1, MAX); v - min
    // overflows an i64.
    assert_eq!(rt.words("w", &[]), Some(vec![0, 2, 8, 1, 1]));
}

#[test]
fn tuple_keys_are_packed() {
    let script = Script::new("func:foo { @m[arg0, comm, arg1] = count(); @t[tid, func] = sum(arg0); }");
    let mut rt = script.runtime();
    for args in [[1, 0, 2, 0, 0, 0], [1, 0, 2, 0, 0, 0], [-1, 0, 2, 0, 0, 0]] {
        script.run(0, &mut ctx(args), &mut rt);
    }
    assert_eq!(rt.words("m", &[K::Int(1), K::Str("sqlite3"), K::Int(0)]), Some(vec![2]));
    assert_eq!(rt.words("m", &[K::Int(-1), K::Str("sqlite3"), K::Int(0)]), Some(vec![1]));
    assert_eq!(rt.words("t", &[K::Int(4243), K::Str("foo")]), Some(vec![1]));
    assert_eq!(rt.len("m"), 2);
}

#[test]
fn stack_keys_hold_the_frames_in_use() {
    let script = Script::named("stack_local");
    let (_, rt) = script.run_args([0; 6]);
    let frames = [0x40_1000, 0x40_2000, 0x40_3000];
    assert_eq!(rt.words("m", &[K::Stack(&frames), K::Int(4243)]), Some(vec![1]));
    assert_eq!(rt.printed, [Value::Stack(frames.to_vec())]);
    let script = Script::named("ustack_keys");
    let (_, rt) = script.run_args([0; 6]);
    assert_eq!(rt.words("stacks", &[K::Stack(&frames)]), Some(vec![1]));
    assert_eq!(rt.words("deep", &[K::Stack(&frames)]), Some(vec![1]));
    let script = Script::new("func:foo { @two[ustack(2)] = count(); }");
    let (_, rt) = script.run_args([0; 6]);
    assert_eq!(rt.words("two", &[K::Stack(&frames[..2])]), Some(vec![1]));
}

#[test]
fn python_stacks_are_keys_as_user_stacks_are() {
    let script = Script::new("profile:hz:99 { @py[pystack] = count(); @both[pystack(2), ustack] = count(); }");
    let (_, rt) = script.run_args([0; 6]);
    let tag = lopi_rt_abi::python::PY_FRAME;
    let (user, python) = ([0x40_1000, 0x40_2000, 0x40_3000], [0x40_1000 | tag, 0x40_2000 | tag, 0x40_3000 | tag]);
    assert_eq!(rt.words("py", &[K::Stack(&python)]), Some(vec![1]));
    assert_eq!(rt.words("both", &[K::Stack(&python[..2]), K::Stack(&user)]), Some(vec![1]));
    assert!(rt.calls.iter().any(|c| c == "pystack 127") && rt.calls.iter().any(|c| c == "pystack 2"));
}

#[test]
fn a_helper_counting_too_many_frames_is_cut_to_the_depth() {
    let script = Script::new("func:foo { @two[ustack(2)] = count(); print(ustack(1)); }");
    let mut rt = script.runtime();
    rt.ustack_claims = Some(1000);
    script.run(0, &mut ctx([0; 6]), &mut rt);
    assert_eq!(rt.words("two", &[K::Stack(&[0x40_1000, 0x40_2000])]), Some(vec![1]));
    assert_eq!(rt.printed, [Value::Stack(vec![0x40_1000])]);
}

#[test]
fn plain_values_read_update_and_default() {
    let src = "func:foo { @n[arg0] = arg1; @n[arg0] += 5; @last[tid] = comm; \
               printf(\"%d %d %s %s\", @n[arg0], @n[99], @last[tid], @last[1]); }";
    let script = Script::new(src);
    let (_, rt) = script.run_args([3, 10, 0, 0, 0, 0]);
    assert_eq!(rt.printfs[0].args, [Value::Int(15), Value::Int(0), s("sqlite3"), s("")]);
    assert_eq!(rt.slot("last", &[K::Int(4243)]), Some(&rt.str_bytes("sqlite3")[..]));
    // Reads never create keys.
    assert_eq!((rt.len("n"), rt.len("last")), (1, 1));
}

#[test]
fn a_map_read_into_the_same_map_sees_the_old_value() {
    let script = Script::new("func:foo { @m[1] = 7; @m[2] = @m[1] * 2; @s[1] = \"one\"; @s[2] = @s[1]; printf(\"%d %s\", @m[2], @s[2]); }");
    let (_, rt) = script.run_args([0; 6]);
    assert_eq!(rt.printfs[0].args, [Value::Int(14), s("one")]);
}

#[test]
fn string_values_compare_through_maps() {
    let script = Script::named("string_map_values");
    let (done, rt) = script.run_args([0; 6]);
    assert_eq!(done.exit, 0);
    assert_eq!(rt.slot("who", &[]), Some(&rt.str_bytes("nobody")[..]));
    let mut rt = script.runtime();
    rt.comm = b"nobody".to_vec();
    let mut c = ctx([0; 6]);
    script.run(0, &mut c, &mut rt);
    assert_eq!(c.exit, 1);
}

#[test]
fn delete_and_clear() {
    let script = Script::named("delete_clear");
    let mut rt = script.runtime();
    script.run(0, &mut ctx([4, 0, 0, 0, 0, 0]), &mut rt);
    assert_eq!(rt.len("m"), 0);
    assert_eq!(rt.calls, ["map_slot", "map_delete"]);
    let script = Script::new("func:foo { @m[arg0] = 1; @k = 2; if (arg1) { delete(@m[arg0 - 1]); } if (arg2) { clear(@m); print(@m); print(@k, 10, 1000); } }");
    let mut rt = script.runtime();
    for arg in [1, 2, 3] {
        script.run(0, &mut ctx([arg, 0, 0, 0, 0, 0]), &mut rt);
    }
    script.run(0, &mut ctx([4, 1, 0, 0, 0, 0]), &mut rt);
    assert_eq!(rt.len("m"), 3);
    assert!(rt.slot("m", &[K::Int(3)]).is_none());
    script.run(0, &mut ctx([5, 0, 1, 0, 0, 0]), &mut rt);
    assert_eq!((rt.len("m"), rt.len("k")), (0, 1));
    assert_eq!(rt.printed, [Value::Map(0, 0, 1), Value::Map(1, 10, 1000)]);
}

#[test]
fn a_full_map_drops_the_update() {
    let script = Script::new("func:foo { @c[arg0] = count(); @v[arg0] = arg0; @v[arg0] += 1; @s[arg0] = comm; printf(\"%d\", @v[arg0]); }");
    let mut rt = script.runtime();
    rt.capacity = 1;
    for arg in [1, 2, 1] {
        script.run(0, &mut ctx([arg, 0, 0, 0, 0, 0]), &mut rt);
    }
    assert_eq!((rt.len("c"), rt.len("v"), rt.len("s")), (1, 1, 1));
    assert_eq!(rt.words("c", &[K::Int(1)]), Some(vec![2]));
    // Key 2 was dropped at each of its four updates.
    assert_eq!(rt.drops, 4);
    let printed: Vec<Value> = rt.printfs.iter().map(|p| p.args[0].clone()).collect();
    assert_eq!(printed, [Value::Int(2), Value::Int(0), Value::Int(2)]);
}
