//! The per-thread map tables of probe scripts: inserts, lookups, deletes and clears against a
//! `HashMap` model, a full table counting its drops, and tables whose headers lie.
use lopi_rt_abi::script_map::{self, table_size};
use std::collections::HashMap;

fn table(key_size: u32, slot_size: u32, max: u32) -> Vec<u8> {
    let mut t = vec![0; table_size(key_size as usize, slot_size as usize, max)];
    assert!(script_map::init(&mut t, key_size, slot_size, max));
    t
}

/// Fixed-seed xorshift: the same sequence of operations on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn behaves_like_a_map_through_inserts_deletes_and_clears() {
    let mut t = table(12, 16, 64);
    let mut model: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..20_000 {
        let k = rng.next() % 90;
        let key: Vec<u8> = k.to_le_bytes().iter().chain(&[k as u8, 1, 2, 3]).copied().collect();
        match rng.next() % 10 {
            0..=5 => {
                let full = model.len() >= 64 && !model.contains_key(&key);
                match script_map::slot(&mut t, &key) {
                    Some(slot) => {
                        assert!(!full, "round {round}: a slot beyond max_entries");
                        let v = u64::from_le_bytes(slot[..8].try_into().unwrap()) + 1;
                        slot[..8].copy_from_slice(&v.to_le_bytes());
                        *model.entry(key).or_default() += 1;
                    }
                    None => assert!(full, "round {round}: no slot with room left"),
                }
            }
            6..=8 => assert_eq!(script_map::delete(&mut t, &key), model.remove(&key).is_some(), "round {round}"),
            _ if round % 1000 == 999 => {
                script_map::clear(&mut t);
                model.clear();
            }
            _ => {
                let got = script_map::lookup(&t, &key).map(|s| u64::from_le_bytes(s[..8].try_into().unwrap()));
                assert_eq!(got, model.get(&key).copied(), "round {round}");
            }
        }
        if round % 500 == 0 {
            let mut seen: HashMap<Vec<u8>, u64> = HashMap::new();
            for (k, s) in script_map::entries(&t) {
                assert!(seen.insert(k.to_vec(), u64::from_le_bytes(s[..8].try_into().unwrap())).is_none(), "a key twice");
            }
            assert_eq!(seen, model, "round {round}");
        }
    }
}

#[test]
fn a_full_table_counts_what_it_drops() {
    let mut t = table(8, 8, 4);
    for k in 0u64..4 {
        assert!(script_map::slot(&mut t, &k.to_le_bytes()).is_some());
    }
    assert!(script_map::slot(&mut t, &9u64.to_le_bytes()).is_none());
    assert!(script_map::slot(&mut t, &10u64.to_le_bytes()).is_none());
    assert_eq!(script_map::drops(&t), 2);
    // A key already there still gets its slot, and a deleted one makes room.
    assert!(script_map::slot(&mut t, &3u64.to_le_bytes()).is_some());
    assert!(script_map::delete(&mut t, &0u64.to_le_bytes()));
    assert!(script_map::slot(&mut t, &9u64.to_le_bytes()).is_some());
    assert_eq!(script_map::entries(&t).count(), 4);
}

#[test]
fn keys_of_the_wrong_length_and_lying_headers_yield_nothing() {
    let mut t = table(8, 8, 4);
    assert!(script_map::slot(&mut t, &[1, 2, 3]).is_none());
    assert!(script_map::lookup(&t, &[0; 9]).is_none());
    assert!(!script_map::init(&mut [0u8; 16], 8, 8, 4));
    // Headers claiming more than the bytes hold, or a capacity that is no power of two.
    let mut rng = Rng(7);
    for _ in 0..2000 {
        let mut bytes: Vec<u8> = (0..(rng.next() % 300) as usize).map(|_| rng.next() as u8).collect();
        if bytes.len() >= 12 && rng.next().is_multiple_of(2) {
            bytes[8..12].copy_from_slice(&(1u32 << (rng.next() % 6)).to_le_bytes());
            bytes[0..4].copy_from_slice(&((rng.next() % 16) as u32).to_le_bytes());
            bytes[4..8].copy_from_slice(&((rng.next() % 16) as u32).to_le_bytes());
        }
        let key = vec![1u8; (rng.next() % 16) as usize];
        let _ = script_map::slot(&mut bytes, &key);
        let _ = script_map::lookup(&bytes, &key);
        let _ = script_map::delete(&mut bytes, &key);
        let _ = script_map::entries(&bytes).count();
        script_map::clear(&mut bytes);
    }
}
