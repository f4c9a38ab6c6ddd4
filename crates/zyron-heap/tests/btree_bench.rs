//! Suite `btree`: the primary-key index (`zyron_heap::btree::BPlusTree`)
//! with the keys the heap gives it (BIGINT keys in the order-preserving key
//! encoding), next to Rust's `std::collections::BTreeMap` holding the same
//! keys, interleaved round by round: random inserts, point lookups (one in
//! ten for a missing key), range scans of 100 keys, and removal of half the
//! keys. Both must return the same slots (checksums compared).
//!
//! `ZYRON_BENCH_SCALE=full cargo test --release -p zyron-heap --test btree_bench -- --nocapture`

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use zyron_bench::{Metric, Samples, SuiteRun};
use zyron_heap::btree::BPlusTree;
use zyron_heap::row::KeyCodec;

const RANGE_KEYS: i64 = 100;

/// A deterministic shuffle source (splitmix64): the same work every run.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Keys of ids `0..count` as the heap encodes a BIGINT primary key.
fn encoded_keys(ids: &[i64]) -> Vec<Vec<u8>> {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let codec = KeyCodec::new(&schema, &[0]).unwrap();
    let batch =
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(ids.to_vec()))]).unwrap();
    (0..ids.len()).map(|r| codec.key(&batch, r)).collect()
}

/// The work of one round, precomputed so timing covers index work only.
struct Workload {
    /// Keys in random insertion order, with the slot each maps to.
    inserts: Vec<(Vec<u8>, u64)>,
    /// Keys to look up: ids drawn at random, one in ten beyond the last id.
    lookups: Vec<Vec<u8>>,
    /// `[low, high)` key bounds of `RANGE_KEYS` consecutive ids.
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
    /// Half of the keys, in random order.
    removes: Vec<Vec<u8>>,
}

impl Workload {
    fn new(count: i64, operations: usize) -> Self {
        let mut ids: Vec<i64> = (0..count).collect();
        for i in (1..ids.len()).rev() {
            ids.swap(i, (mix(i as u64) % (i as u64 + 1)) as usize);
        }
        let keys = encoded_keys(&ids);
        let inserts = keys
            .iter()
            .zip(&ids)
            .map(|(k, id)| (k.clone(), *id as u64 * 3 + 1))
            .collect();
        let wanted: Vec<i64> = (0..operations as u64)
            .map(|i| (mix(i ^ 0x5eed) % (count as u64 * 10 / 9)) as i64)
            .collect();
        let lookups = encoded_keys(&wanted);
        let starts: Vec<i64> = (0..operations as u64 / 100)
            .map(|i| (mix(i ^ 0xa11) % (count - RANGE_KEYS) as u64) as i64)
            .collect();
        let ends: Vec<i64> = starts.iter().map(|s| s + RANGE_KEYS).collect();
        let ranges = encoded_keys(&starts)
            .into_iter()
            .zip(encoded_keys(&ends))
            .collect();
        let removes = keys[..keys.len() / 2].to_vec();
        Self {
            inserts,
            lookups,
            ranges,
            removes,
        }
    }
}

/// What one structure answered, to compare with the other's.
#[derive(Debug, PartialEq)]
struct Answers {
    found: u64,
    found_sum: u64,
    ranged: u64,
    ranged_sum: u64,
    left: usize,
}

struct Rates {
    insert: Samples,
    lookup: Samples,
    range: Samples,
    remove: Samples,
}

impl Rates {
    fn new() -> Self {
        Self {
            insert: Samples::for_values(),
            lookup: Samples::for_values(),
            range: Samples::for_values(),
            remove: Samples::for_values(),
        }
    }
}

fn per_second(count: usize, started: Instant) -> f64 {
    count as f64 / started.elapsed().as_secs_f64()
}

/// The operations the suite times, on the B+ tree and on its peer.
trait Index {
    fn insert(&mut self, key: &[u8], slot: u64);
    fn get(&self, key: &[u8]) -> Option<u64>;
    /// Slots of the keys in `[low, high)`: (count, wrapping sum).
    fn range_sum(&self, low: &[u8], high: &[u8]) -> (u64, u64);
    fn remove(&mut self, key: &[u8]);
    fn len(&self) -> usize;
}

impl Index for BPlusTree {
    fn insert(&mut self, key: &[u8], slot: u64) {
        BPlusTree::insert(self, key, slot).expect("keys are unique");
    }

    fn get(&self, key: &[u8]) -> Option<u64> {
        BPlusTree::get(self, key)
    }

    fn range_sum(&self, low: &[u8], high: &[u8]) -> (u64, u64) {
        self.range(low, Some(high))
            .fold((0, 0), |(n, sum), (_, slot)| {
                (n + 1, sum.wrapping_add(slot))
            })
    }

    fn remove(&mut self, key: &[u8]) {
        BPlusTree::remove(self, key).expect("the key is present");
    }

    fn len(&self) -> usize {
        BPlusTree::len(self)
    }
}

impl Index for BTreeMap<Vec<u8>, u64> {
    fn insert(&mut self, key: &[u8], slot: u64) {
        assert!(BTreeMap::insert(self, key.to_vec(), slot).is_none());
    }

    fn get(&self, key: &[u8]) -> Option<u64> {
        BTreeMap::get(self, key).copied()
    }

    fn range_sum(&self, low: &[u8], high: &[u8]) -> (u64, u64) {
        self.range::<[u8], _>((Bound::Included(low), Bound::Excluded(high)))
            .fold((0, 0), |(n, sum), (_, slot)| {
                (n + 1, sum.wrapping_add(*slot))
            })
    }

    fn remove(&mut self, key: &[u8]) {
        BTreeMap::remove(self, key).expect("the key is present");
    }

    fn len(&self) -> usize {
        BTreeMap::len(self)
    }
}

/// Runs the workload on `index`, timing each phase into `rates`.
fn run_workload(index: &mut impl Index, work: &Workload, rates: &mut Rates) -> Answers {
    let started = Instant::now();
    for (key, slot) in &work.inserts {
        index.insert(key, *slot);
    }
    rates
        .insert
        .record_value(per_second(work.inserts.len(), started));

    let started = Instant::now();
    let (mut found, mut found_sum) = (0, 0u64);
    for slot in work.lookups.iter().filter_map(|key| index.get(key)) {
        found += 1;
        found_sum = found_sum.wrapping_add(slot);
    }
    rates
        .lookup
        .record_value(per_second(work.lookups.len(), started));

    let started = Instant::now();
    let (mut ranged, mut ranged_sum) = (0, 0u64);
    for (low, high) in &work.ranges {
        let (n, sum) = index.range_sum(low, high);
        ranged += n;
        ranged_sum = ranged_sum.wrapping_add(sum);
    }
    rates
        .range
        .record_value(per_second(ranged as usize, started));

    let started = Instant::now();
    for key in &work.removes {
        index.remove(key);
    }
    rates
        .remove
        .record_value(per_second(work.removes.len(), started));
    Answers {
        found,
        found_sum,
        ranged,
        ranged_sum,
        left: index.len(),
    }
}

#[test]
fn btree_suite() {
    let mut run = SuiteRun::new("btree");
    let keys: i64 = run.scale().pick(50_000, 2_000_000);
    let operations = run.scale().pick(50_000, 2_000_000);
    let rounds = run.scale().pick(2, 5);
    let work = Workload::new(keys, operations);
    let (mut ours, mut peer) = (Rates::new(), Rates::new());
    let mut height = 0;
    zyron_bench::interleave::<String>(
        rounds,
        |_| {
            let mut tree = BPlusTree::new();
            let answers = run_workload(&mut tree, &work, &mut ours);
            tree.check();
            height = tree.height();
            let expected = run_workload(&mut BTreeMap::new(), &work, &mut Rates::new());
            assert_eq!(answers, expected, "the B+ tree answers as BTreeMap does");
            assert_eq!(answers.ranged, work.ranges.len() as u64 * RANGE_KEYS as u64);
            Ok(())
        },
        |_| {
            run_workload(&mut BTreeMap::new(), &work, &mut peer);
            Ok(())
        },
    )
    .unwrap();
    const PEER: &str = "Rust std BTreeMap<Vec<u8>, u64>, same keys, same run";
    for (name, unit, ours, theirs) in [
        ("insert_random", "keys/s", &ours.insert, &peer.insert),
        ("lookup_point", "lookups/s", &ours.lookup, &peer.lookup),
        ("range_scan_100", "keys/s", &ours.range, &peer.range),
        ("remove_random_half", "keys/s", &ours.remove, &peer.remove),
    ] {
        run.push(
            Metric::throughput(name, unit, ours)
                .param("keys", keys)
                .param("key_bytes", 9)
                .param("height", height)
                .with_peer(PEER, Metric::throughput("peer", unit, theirs).value),
        );
    }
    let path = run.finish().unwrap();
    println!("btree results: {}", path.display());
}
