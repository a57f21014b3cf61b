//! The text output against what bpftrace prints for the same maps.
use super::slots::*;
use lopi_script::ir::{AggKind, Type, ValueKind};
use lopi_script::output::{text, text_map, MergedMap};

fn show(map: &MergedMap) -> String {
    text_map(map, &symbol)
}

/// One bucket line: label in 16 columns, count right-aligned in 8, a bar of `bar` `@`s in 52.
fn line(label: &str, count: u64, bar: usize) -> String {
    format!("{label:<16}{count:>8} |{}{}|\n", "@".repeat(bar), " ".repeat(52 - bar))
}

#[test]
fn scalars_print_their_number() {
    let cases = [
        (agg("n", &[], AggKind::Count), int(42), "@n: 42\n\n"),
        (agg("total", &[], AggKind::Sum { unsigned: false }), int(-7), "@total: -7\n\n"),
        (agg("mean", &[], AggKind::Avg), avg(-15, 4), "@mean: -3\n\n"),
        (agg("least", &[], AggKind::Min), extreme(Some(-9)), "@least: -9\n\n"),
        (agg("most", &[], AggKind::Max), extreme(Some(9)), "@most: 9\n\n"),
        (agg("s", &[], AggKind::Stats), stats(&[1, 5, 10]), "@s: count 3, average 5, total 16\n\n"),
        (map("who", &[], ValueKind::Plain(Type::Str)), str("bash"), "@who: bash\n\n"),
        (map("", &[], ValueKind::Plain(Type::Int)), int(3), "@: 3\n\n"),
    ];
    for (map, slot, expected) in cases {
        assert_eq!(show(&merged(&map, &[(Vec::new(), slot)])), expected, "@{}", map.name);
    }
}

#[test]
fn keyed_maps_sort_by_value_then_key() {
    let calls = agg("calls", &[Type::Str, Type::Int], AggKind::Count);
    let entries = [
        ([str("sshd"), int(1)].concat(), int(5)),
        ([str("bash"), int(2)].concat(), int(1)),
        ([str("bash"), int(1)].concat(), int(5)),
        ([str("zsh"), int(3)].concat(), int(2)),
    ];
    let expected = "@calls[bash, 2]: 1\n@calls[zsh, 3]: 2\n@calls[bash, 1]: 5\n@calls[sshd, 1]: 5\n\n";
    assert_eq!(show(&merged(&calls, &entries)), expected);
    let avgs = agg("lat", &[Type::Int], AggKind::Avg);
    let entries = [(int(1), avg(100, 2)), (int(2), avg(9, 3)), (int(3), avg(-1, 2))];
    assert_eq!(show(&merged(&avgs, &entries)), "@lat[3]: 0\n@lat[2]: 3\n@lat[1]: 50\n\n");
    let names = map("name", &[Type::Int], ValueKind::Plain(Type::Str));
    let entries = [(int(1), str("b")), (int(2), str("a"))];
    assert_eq!(show(&merged(&names, &entries)), "@name[2]: a\n@name[1]: b\n\n");
}

#[test]
fn unsigned_keys_and_values_print_and_sort_as_unsigned() {
    // classify.bt: a 32-bit -1 in `retval` is 4294967295; a 64-bit one 18446744073709551615.
    let rets = agg("", &[Type::Uint], AggKind::Count);
    let entries = [(int(-1), int(3)), (int(0xffff_ffff), int(2)), (int(1), int(1))];
    assert_eq!(show(&merged(&rets, &entries)), "@[1]: 1\n@[4294967295]: 2\n@[18446744073709551615]: 3\n\n");
    let sums = agg("s", &[Type::Int], AggKind::Sum { unsigned: true });
    let entries = [(int(-1), int(-2)), (int(1), int(7))];
    assert_eq!(show(&merged(&sums, &entries)), "@s[1]: 7\n@s[-1]: 18446744073709551614\n\n");
    // bpftrace's max() is signed whatever it takes.
    let most = agg("m", &[], AggKind::Max);
    assert_eq!(show(&merged(&most, &[(Vec::new(), extreme(Some(-5)))])), "@m: -5\n\n");
    let plain = map("p", &[], ValueKind::Plain(Type::Uint));
    assert_eq!(show(&merged(&plain, &[(Vec::new(), int(-1))])), "@p: 18446744073709551615\n\n");
}

#[test]
fn print_with_a_top_and_a_divisor_shows_the_greatest_entries_divided() {
    use lopi_script::output::limited;
    let calls = agg("calls", &[Type::Str], AggKind::Count);
    let entries = [(str("a"), int(5000)), (str("b"), int(1000)), (str("c"), int(3000)), (str("d"), int(2999))];
    let all = merged(&calls, &entries);
    assert_eq!(show(&limited(&all, 2, 1000)), "@calls[c]: 3\n@calls[a]: 5\n\n");
    assert_eq!(show(&limited(&all, 0, 0)), show(&all), "0 is all, a divisor 0 is 1");
    assert_eq!(show(&limited(&all, 9, 1)), show(&all));
    // stats() takes neither, as bpftrace's.
    let st = agg("st", &[Type::Int], AggKind::Stats);
    let entries = [(int(1), stats(&[10, 20])), (int(2), stats(&[30]))];
    let both = merged(&st, &entries);
    assert_eq!(show(&limited(&both, 1, 10)), show(&both));
}

#[test]
fn usym_keys_print_their_symbol_without_the_offset() {
    use lopi_script::output::symbol;
    let threads = agg("", &[Type::Usym], AggKind::Count);
    // The test symbolizer names 0x40 `f40`: a symbol of its own.
    assert_eq!(show(&merged(&threads, &[(int(0x40), int(4))])), "@[f40]: 4\n\n");
    for (frame, name) in [("worker+12", "worker"), ("libc.so.6+0x29d90", "libc.so.6"), ("worker", "worker"), ("operator+", "operator+"), ("0x401000", "0x401000")] {
        assert_eq!(symbol(frame), name, "{frame}");
    }
}

#[test]
fn stack_keys_take_a_line_per_frame() {
    let map = agg("", &[Type::Stack], AggKind::Count);
    let entries = [(stack(&[0x1234, 0x40]), int(4))];
    assert_eq!(show(&merged(&map, &entries)), "@[\n        f1234\n        f40\n]: 4\n\n");
}

#[test]
fn hist_shows_powers_of_two_from_the_first_count_to_the_last() {
    let map = agg("bytes", &[], AggKind::Hist);
    let slot = hist(AggKind::Hist, &[1, 2, 3, 4, 5, 6, 7, 1024, 1500]);
    let mut expected = "@bytes:\n".to_string() + &line("[1]", 1, 13) + &line("[2, 4)", 2, 26) + &line("[4, 8)", 4, 52);
    for (lo, hi) in [("8", "16"), ("16", "32"), ("32", "64"), ("64", "128"), ("128", "256"), ("256", "512"), ("512", "1K")] {
        expected += &line(&format!("[{lo}, {hi})"), 0, 0);
    }
    expected += &(line("[1K, 2K)", 2, 26) + "\n");
    assert_eq!(show(&merged(&map, &[(Vec::new(), slot)])), expected);
    assert!(expected.contains("\n[1]                    1 |@@@@@@@@@@@@@                                       |\n"));
}

#[test]
fn hist_of_negatives_and_zero_and_huge_values() {
    let map = agg("v", &[], AggKind::Hist);
    let slot = hist(AggKind::Hist, &[-5, -1, 0, 0, 1]);
    let expected = "@v:\n".to_string() + &line("(..., 0)", 2, 52) + &line("[0]", 2, 52) + &line("[1]", 1, 26) + "\n";
    assert_eq!(show(&merged(&map, &[(Vec::new(), slot)])), expected);
    let slot = hist(AggKind::Hist, &[1 << 40, 1 << 62, i64::MAX]);
    let shown = show(&merged(&map, &[(Vec::new(), slot)]));
    assert!(shown.starts_with(&("@v:\n".to_string() + &line("[1T, 2T)", 1, 26))), "{shown}");
    assert!(shown.ends_with(&(line("[4E, 8E)", 2, 52) + "\n")), "{shown}");
}

#[test]
fn lhist_shows_below_linear_and_above_buckets() {
    let kind = AggKind::Lhist { min: 0, max: 100, step: 30 };
    let map = agg("ms", &[Type::Str], kind);
    let entries = [(str("a"), hist(kind, &[-1, 10, 95, 100, 200, 200])), (str("b"), hist(kind, &[40]))];
    let expected = "@ms[b]:\n".to_string()
        + &line("[30, 60)", 1, 52)
        + "\n@ms[a]:\n"
        + &line("(..., 0)", 1, 17)
        + &line("[0, 30)", 1, 17)
        + &line("[30, 60)", 0, 0)
        + &line("[60, 90)", 0, 0)
        + &line("[90, 100)", 1, 17)
        + &line("[100, ...)", 3, 52)
        + "\n";
    assert_eq!(show(&merged(&map, &entries)), expected);
    let kind = AggKind::Lhist { min: -2048, max: 2048, step: 2048 };
    let map = agg("k", &[], kind);
    let shown = show(&merged(&map, &[(Vec::new(), hist(kind, &[-3000, -1, 5000]))]));
    let expected = "@k:\n".to_string() + &line("(..., -2K)", 1, 52) + &line("[-2K, 0)", 1, 52) + &line("[0, 2K)", 0, 0) + &line("[2K, ...)", 1, 52) + "\n";
    assert_eq!(shown, expected);
}

#[test]
fn maps_print_by_name_and_empty_ones_not_at_all() {
    let (b, a, empty) = (agg("b", &[], AggKind::Count), agg("a", &[Type::Int], AggKind::Sum { unsigned: false }), agg("c", &[], AggKind::Count));
    let maps = [merged(&b, &[(Vec::new(), int(1))]), merged(&empty, &[]), merged(&a, &[(int(1), int(2))])];
    assert_eq!(text(&maps, &symbol), "@a[1]: 2\n\n@b: 1\n\n");
    assert_eq!(show(&maps[1]), "");
    let never_set = agg("m", &[], AggKind::Max);
    assert_eq!(show(&merged(&never_set, &[(Vec::new(), extreme(None))])), "");
}
