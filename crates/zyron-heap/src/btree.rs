//! A B+ tree from byte-string keys to row slots: the primary-key index.
//!
//! Keys are the order-preserving encodings of [`crate::row::KeyCodec`], so
//! byte order is value order and one tree serves point lookups and key-range
//! scans. Nodes live in one arena (`Vec<Node>`) and refer to each other by
//! index; leaves are chained left to right for range scans. A node holds at
//! most [`MAX_KEYS`] keys and splits in two when it would hold more.
//!
//! Each node also keeps its keys' first 16 bytes in an array of their own
//! (`Keys`): a search compares those numbers and follows a key's
//! pointer only where they tie, which made lookups three times faster than
//! a binary search over boxed keys (suite `btree`).
//!
//! Deleting does not merge underfull nodes (as in PostgreSQL's nbtree, space
//! comes back when the tree is rebuilt, here by a checkpoint's reload); an
//! emptied leaf stays in the chain and costs one step in a scan.
//!
//! ```
//! use zyron_heap::btree::BPlusTree;
//! let mut tree = BPlusTree::new();
//! for i in 0u32..1000 {
//!     tree.insert(&i.to_be_bytes(), i as u64).unwrap();
//! }
//! assert_eq!(tree.get(&7u32.to_be_bytes()), Some(7));
//! assert_eq!(tree.insert(&7u32.to_be_bytes(), 99), Err(7), "keys are unique");
//! let range: Vec<u64> = tree.range(&10u32.to_be_bytes()[..], Some(&13u32.to_be_bytes()[..])).map(|(_, v)| v).collect();
//! assert_eq!(range, vec![10, 11, 12]);
//! ```

/// Keys per node before it splits: two fewer than a power of two, so that a node's arrays
/// at their largest ([`NODE_ARRAY_CAPACITY`]) fill an allocator size class exactly. With 64,
/// a 1,056-byte array would take a 1,280-byte block from mimalloc, the server's allocator.
pub const MAX_KEYS: usize = 62;

/// Keys a node keeps when a key past the tree's last key splits it. Ascending inserts (a
/// serial key, a bulk load in key order) only ever fill the rightmost node, so a half split
/// would leave every node behind them half empty; like PostgreSQL's nbtree, such a split
/// keeps the left node 90% full instead.
const RIGHTMOST_SPLIT_KEEPS: usize = MAX_KEYS * 9 / 10;

type Key = Box<[u8]>;

/// Bytes of a key that [`Keys`] keeps inline for comparing: a BIGINT key (a marker byte and
/// eight value bytes) or two INT columns fit, so a search reads one array instead of
/// following a pointer per comparison.
const PREFIX_BYTES: usize = 16;

/// A key's first [`PREFIX_BYTES`] bytes, zero-padded, as a big-endian number: two keys
/// compare as their prefixes do unless the prefixes are equal.
fn prefix(key: &[u8]) -> u128 {
    let mut bytes = [0u8; PREFIX_BYTES];
    let n = key.len().min(PREFIX_BYTES);
    bytes[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(bytes)
}

/// Bytes a boxed key of `len` bytes takes from the allocator, which hands out multiples of 8.
fn key_allocation_bytes(len: usize) -> usize {
    len.next_multiple_of(8)
}

/// What an entry costs beyond its key's allocation: a 16-byte prefix, a 16-byte key pointer
/// and an 8-byte value, in node arrays between half and wholly used (a split leaves the half
/// no new key went into holding only what it uses, see [`Room`]), plus the internal nodes.
/// Measured with [`BPlusTree::allocated_bytes`] for BIGINT keys: 64 bytes when keys arrive
/// in random order, 46 in interleaved ascending or descending runs, 45 in descending order,
/// 43 in ascending order (rightmost splits leave full nodes). The charge covers the dearest
/// with 8 bytes to spare for what the allocator adds, so the budget does not count an index
/// short.
pub const ENTRY_OVERHEAD_BYTES: usize = 72;

/// What the entry for a `key_len`-byte key costs in memory, as the heap's budget counts it.
pub fn entry_bytes(key_len: usize) -> usize {
    key_allocation_bytes(key_len) + ENTRY_OVERHEAD_BYTES
}

/// The most a node's array ever holds: `MAX_KEYS + 1` keys just before the node splits,
/// and one more child than keys in an internal node.
const NODE_ARRAY_CAPACITY: usize = MAX_KEYS + 2;

/// Inserts into one of a node's arrays, growing it by doubling but never past
/// [`NODE_ARRAY_CAPACITY`]: a node's arrays would otherwise double to twice that, and a
/// node a split shrank would double on its next insert.
fn insert_in_node<T>(array: &mut Vec<T>, i: usize, item: T) {
    if array.len() == array.capacity() {
        let target = (array.capacity() * 2)
            .clamp(4, NODE_ARRAY_CAPACITY)
            .max(array.len() + 1);
        array.reserve_exact(target - array.len());
    }
    array.insert(i, item);
}

/// Which half of a splitting node keeps room for a full node: the one the key that filled
/// it went into. Keys arriving in runs (ascending or descending) go on landing there and
/// never again in the other half, which is therefore left holding only what it uses; in
/// random order either half may grow, and only one of them reallocates when it does.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Room {
    Left,
    Right,
}

impl Room {
    /// The half that position `inserted_at` of the full node falls in, when the right half
    /// starts at `at`.
    fn for_insert(inserted_at: usize, at: usize) -> Room {
        if inserted_at >= at {
            Room::Right
        } else {
            Room::Left
        }
    }
}

/// Splits a node's array at `at`, giving `room` the capacity of a full node and the other
/// half exactly what it holds (see [`Room`]).
fn split_node_array<T>(array: &mut Vec<T>, at: usize, room: Room) -> Vec<T> {
    match room {
        Room::Left => array.split_off(at),
        Room::Right => {
            let mut right = Vec::with_capacity(NODE_ARRAY_CAPACITY);
            right.extend(array.drain(at..));
            array.shrink_to_fit();
            right
        }
    }
}

/// A key being looked up, with its [`prefix`] worked out once for the whole descent.
#[derive(Clone, Copy)]
struct Probe<'a> {
    bytes: &'a [u8],
    prefix: u128,
}

impl<'a> Probe<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Probe {
            bytes,
            prefix: prefix(bytes),
        }
    }
}

/// The sorted keys of one node: each key whole, and its [`prefix`] in an array of its own.
/// Searches compare prefixes and read a whole key only where prefixes tie (an equal key,
/// or keys sharing their first sixteen bytes).
#[derive(Debug, Clone, Default)]
struct Keys {
    prefixes: Vec<u128>,
    whole: Vec<Key>,
}

impl Keys {
    fn one(key: Key) -> Self {
        Keys {
            prefixes: vec![prefix(&key)],
            whole: vec![key],
        }
    }

    fn len(&self) -> usize {
        self.whole.len()
    }

    fn get(&self, i: usize) -> &[u8] {
        &self.whole[i]
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.whole.iter().map(|k| k.as_ref())
    }

    /// How the key at `i` compares with `probe`.
    fn cmp_at(&self, i: usize, probe: Probe) -> std::cmp::Ordering {
        self.prefixes[i]
            .cmp(&probe.prefix)
            .then_with(|| self.whole[i].as_ref().cmp(probe.bytes))
    }

    /// The position of `key`, or where it would go.
    fn search(&self, probe: Probe) -> Result<usize, usize> {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let mid = (low + high) / 2;
            match self.cmp_at(mid, probe) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(low)
    }

    /// How many keys are `<= key`: the child of an internal node that holds `key`.
    fn count_at_most(&self, probe: Probe) -> usize {
        match self.search(probe) {
            Ok(i) => i + 1,
            Err(i) => i,
        }
    }

    /// How many keys are `< key`.
    fn count_below(&self, probe: Probe) -> usize {
        match self.search(probe) {
            Ok(i) | Err(i) => i,
        }
    }

    fn insert(&mut self, i: usize, key: Key) {
        insert_in_node(&mut self.prefixes, i, prefix(&key));
        insert_in_node(&mut self.whole, i, key);
    }

    fn remove(&mut self, i: usize) -> Key {
        self.prefixes.remove(i);
        self.whole.remove(i)
    }

    /// Every prefix is its key's, and the keys strictly increase.
    fn check(&self) {
        assert_eq!(self.prefixes.len(), self.whole.len());
        for (p, key) in self.prefixes.iter().zip(&self.whole) {
            assert_eq!(*p, prefix(key), "a prefix is its key's");
        }
        assert!(self.whole.windows(2).all(|w| w[0] < w[1]), "keys increase");
    }

    /// Bytes these keys hold on the heap: both arrays' capacity and each key's allocation.
    fn allocated_bytes(&self) -> usize {
        let arrays =
            self.prefixes.capacity() * size_of::<u128>() + self.whole.capacity() * size_of::<Key>();
        arrays
            + self
                .whole
                .iter()
                .map(|k| key_allocation_bytes(k.len()))
                .sum::<usize>()
    }

    /// See [`split_node_array`].
    fn split_off(&mut self, at: usize, room: Room) -> Keys {
        Keys {
            prefixes: split_node_array(&mut self.prefixes, at, room),
            whole: split_node_array(&mut self.whole, at, room),
        }
    }
}

#[derive(Debug, Clone)]
enum Node {
    Leaf {
        keys: Keys,
        values: Vec<u64>,
        next: Option<usize>,
    },
    /// `children[i]` holds the keys `k` with `keys[i-1] <= k < keys[i]`.
    Internal { keys: Keys, children: Vec<usize> },
}

/// A node that split: the separator to put in its parent, its new right sibling, and
/// whether the split was at the tree's right edge (see [`RIGHTMOST_SPLIT_KEEPS`]).
struct Split {
    separator: Key,
    right: usize,
    rightmost: bool,
}

#[derive(Debug, Clone)]
pub struct BPlusTree {
    nodes: Vec<Node>,
    root: usize,
    len: usize,
}

impl Default for BPlusTree {
    fn default() -> Self {
        Self::new()
    }
}

impl BPlusTree {
    pub fn new() -> Self {
        BPlusTree {
            nodes: vec![Node::Leaf {
                keys: Keys::default(),
                values: Vec::new(),
                next: None,
            }],
            root: 0,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the tree holds on the heap: its nodes, their arrays' capacity (not just the
    /// part in use) and the keys. Walks every node; for checks and statistics, not per write.
    pub fn allocated_bytes(&self) -> usize {
        let node_arrays = |node: &Node| match node {
            Node::Leaf { keys, values, .. } => {
                keys.allocated_bytes() + values.capacity() * size_of::<u64>()
            }
            Node::Internal { keys, children } => {
                keys.allocated_bytes() + children.capacity() * size_of::<usize>()
            }
        };
        self.nodes.capacity() * size_of::<Node>()
            + self.nodes.iter().map(node_arrays).sum::<usize>()
    }

    /// Height of the tree (1 for a lone leaf).
    pub fn height(&self) -> usize {
        let mut height = 1;
        let mut node = self.root;
        while let Node::Internal { children, .. } = &self.nodes[node] {
            node = children[0];
            height += 1;
        }
        height
    }

    fn leaf_for(&self, probe: Probe) -> usize {
        let mut node = self.root;
        while let Node::Internal { keys, children } = &self.nodes[node] {
            node = children[keys.count_at_most(probe)];
        }
        node
    }

    pub fn get(&self, key: &[u8]) -> Option<u64> {
        let probe = Probe::new(key);
        let Node::Leaf { keys, values, .. } = &self.nodes[self.leaf_for(probe)] else {
            unreachable!()
        };
        keys.search(probe).ok().map(|i| values[i])
    }

    /// Inserts `key -> value`; if the key is present, changes nothing and
    /// returns the value it maps to.
    pub fn insert(&mut self, key: &[u8], value: u64) -> Result<(), u64> {
        if let Some(split) = self.insert_into(self.root, Probe::new(key), value)? {
            let left = self.root;
            self.nodes.push(Node::Internal {
                keys: Keys::one(split.separator),
                children: vec![left, split.right],
            });
            self.root = self.nodes.len() - 1;
        }
        self.len += 1;
        Ok(())
    }

    /// Points an existing key at a new value; returns the old one.
    pub fn replace(&mut self, key: &[u8], value: u64) -> Option<u64> {
        let probe = Probe::new(key);
        let leaf = self.leaf_for(probe);
        let Node::Leaf { keys, values, .. } = &mut self.nodes[leaf] else {
            unreachable!()
        };
        let i = keys.search(probe).ok()?;
        Some(std::mem::replace(&mut values[i], value))
    }

    /// Inserts below `node`; returns how `node` split, if it did.
    fn insert_into(&mut self, node: usize, probe: Probe, value: u64) -> Result<Option<Split>, u64> {
        let child = match &mut self.nodes[node] {
            Node::Leaf { keys, values, next } => {
                let (inserted_at, rightmost) = match keys.search(probe) {
                    Ok(i) => return Err(values[i]),
                    Err(i) => {
                        let past_the_last_key = i == keys.len() && next.is_none();
                        keys.insert(i, probe.bytes.into());
                        insert_in_node(values, i, value);
                        (i, past_the_last_key)
                    }
                };
                return Ok(self.split_if_full(node, inserted_at, rightmost));
            }
            Node::Internal { keys, children } => {
                let i = keys.count_at_most(probe);
                (i, children[i])
            }
        };
        let (slot, child_node) = child;
        let Some(split) = self.insert_into(child_node, probe, value)? else {
            return Ok(None);
        };
        let Node::Internal { keys, children } = &mut self.nodes[node] else {
            unreachable!()
        };
        keys.insert(slot, split.separator);
        insert_in_node(children, slot + 1, split.right);
        // A split at the right edge below puts the new separator past this node's last key.
        Ok(self.split_if_full(node, slot, split.rightmost))
    }

    /// Splits `node` if it holds more than [`MAX_KEYS`] keys; `inserted_at` is where the key
    /// (or, in an internal node, the separator) that filled it went.
    fn split_if_full(&mut self, node: usize, inserted_at: usize, rightmost: bool) -> Option<Split> {
        let new_index = self.nodes.len();
        let keep = |len: usize| {
            if rightmost {
                RIGHTMOST_SPLIT_KEEPS
            } else {
                len / 2
            }
        };
        let (separator, right) = match &mut self.nodes[node] {
            Node::Leaf { keys, values, next } if keys.len() > MAX_KEYS => {
                let half = keep(keys.len());
                let room = Room::for_insert(inserted_at, half);
                let right_keys = keys.split_off(half, room);
                let right_values = split_node_array(values, half, room);
                let separator = right_keys.get(0).into();
                let right = Node::Leaf {
                    keys: right_keys,
                    values: right_values,
                    next: next.replace(new_index),
                };
                (separator, right)
            }
            Node::Internal { keys, children } if keys.len() > MAX_KEYS => {
                let half = keep(keys.len());
                // The separator at `half` moves up; a new one there brought its child into
                // the right half.
                let room = Room::for_insert(inserted_at, half);
                let mut right_keys = keys.split_off(half, room);
                let separator = right_keys.remove(0);
                let right_children = split_node_array(children, half + 1, room);
                (
                    separator,
                    Node::Internal {
                        keys: right_keys,
                        children: right_children,
                    },
                )
            }
            _ => return None,
        };
        self.nodes.push(right);
        Some(Split {
            separator,
            right: new_index,
            rightmost,
        })
    }

    /// Removes `key`; returns the value it mapped to.
    pub fn remove(&mut self, key: &[u8]) -> Option<u64> {
        let probe = Probe::new(key);
        let leaf = self.leaf_for(probe);
        let Node::Leaf { keys, values, .. } = &mut self.nodes[leaf] else {
            unreachable!()
        };
        let i = keys.search(probe).ok()?;
        keys.remove(i);
        self.len -= 1;
        Some(values.remove(i))
    }

    /// Entries with `low <= key < high` (`high = None`: to the end), in key order.
    pub fn range<'a>(&'a self, low: &[u8], high: Option<&'a [u8]>) -> Range<'a> {
        let low = Probe::new(low);
        let leaf = self.leaf_for(low);
        let Node::Leaf { keys, .. } = &self.nodes[leaf] else {
            unreachable!()
        };
        let position = keys.count_below(low);
        Range {
            tree: self,
            leaf: Some(leaf),
            position,
            high: high.map(Probe::new),
        }
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> Range<'_> {
        self.range(&[], None)
    }

    /// Checks the tree's invariants; for tests and fuzzing.
    pub fn check(&self) {
        let mut count = 0;
        let mut previous: Option<&[u8]> = None;
        for (key, _) in self.iter() {
            assert!(
                previous.is_none_or(|p| p < key),
                "keys strictly increase along the leaves"
            );
            previous = Some(key);
            count += 1;
        }
        assert_eq!(count, self.len);
        self.check_node(self.root, None, None);
    }

    fn check_node(&self, node: usize, low: Option<&[u8]>, high: Option<&[u8]>) {
        match &self.nodes[node] {
            Node::Leaf { keys, .. } => {
                assert!(keys.len() <= MAX_KEYS);
                keys.check();
                for key in keys.iter() {
                    assert!(low.is_none_or(|l| l <= key) && high.is_none_or(|h| key < h));
                }
            }
            Node::Internal { keys, children } => {
                assert!(keys.len() <= MAX_KEYS && children.len() == keys.len() + 1);
                keys.check();
                for (i, &child) in children.iter().enumerate() {
                    let child_low = if i == 0 { low } else { Some(keys.get(i - 1)) };
                    let child_high = if i == keys.len() {
                        high
                    } else {
                        Some(keys.get(i))
                    };
                    self.check_node(child, child_low, child_high);
                }
            }
        }
    }
}

/// An ascending scan over a key range.
pub struct Range<'a> {
    tree: &'a BPlusTree,
    leaf: Option<usize>,
    position: usize,
    high: Option<Probe<'a>>,
}

impl<'a> Iterator for Range<'a> {
    type Item = (&'a [u8], u64);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let Node::Leaf { keys, values, next } = &self.tree.nodes[self.leaf?] else {
                unreachable!()
            };
            if self.position < keys.len() {
                let beyond = |high| keys.cmp_at(self.position, high).is_ge();
                if self.high.is_some_and(beyond) {
                    self.leaf = None;
                    return None;
                }
                self.position += 1;
                return Some((keys.get(self.position - 1), values[self.position - 1]));
            }
            self.leaf = *next;
            self.position = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl BPlusTree {
        /// Keys per leaf in key order, and keys per internal node.
        fn node_sizes(&self) -> (Vec<usize>, Vec<usize>) {
            let mut node = self.root;
            while let Node::Internal { children, .. } = &self.nodes[node] {
                node = children[0];
            }
            let mut leaves = vec![];
            let mut leaf = Some(node);
            while let Some(Node::Leaf { keys, next, .. }) = leaf.map(|n| &self.nodes[n]) {
                leaves.push(keys.len());
                leaf = *next;
            }
            let internal = self.nodes.iter().filter_map(|node| match node {
                Node::Internal { keys, .. } => Some(keys.len()),
                Node::Leaf { .. } => None,
            });
            (leaves, internal.collect())
        }
    }
    use std::collections::BTreeMap;

    /// A deterministic pseudo-random sequence (xorshift), so failures replay.
    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn matches_a_reference_map_under_random_operations() {
        let mut tree = BPlusTree::new();
        let mut reference = BTreeMap::new();
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for step in 0..60_000u64 {
            let key = (xorshift(&mut seed) % 5_000).to_be_bytes();
            match xorshift(&mut seed) % 10 {
                0..=5 => {
                    let expected = reference.get(&key.to_vec()).copied();
                    assert_eq!(tree.insert(&key, step).err(), expected);
                    reference.entry(key.to_vec()).or_insert(step);
                }
                6..=7 => assert_eq!(tree.remove(&key), reference.remove(&key.to_vec())),
                _ => assert_eq!(tree.get(&key), reference.get(&key.to_vec()).copied()),
            }
        }
        tree.check();
        assert!(tree.height() >= 2);
        let all: Vec<(Vec<u8>, u64)> = tree.iter().map(|(k, v)| (k.to_vec(), v)).collect();
        assert_eq!(all, reference.into_iter().collect::<Vec<_>>());
    }

    /// Keys whose first sixteen bytes tie (long keys with one prefix, and short keys that
    /// differ only in trailing zero bytes) must still order by their whole bytes.
    #[test]
    fn keys_whose_prefixes_tie_order_by_all_their_bytes() {
        let mut tree = BPlusTree::new();
        let mut reference = BTreeMap::new();
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for step in 0..20_000u64 {
            let r = xorshift(&mut seed);
            let mut key = vec![0u8; ((r >> 16) % 24) as usize];
            if r % 3 == 0 {
                // Long keys sharing their first 16 bytes, differing after.
                key = vec![7u8; 16];
                key.extend_from_slice(&(r >> 40).to_be_bytes()[5..]);
            } else if let Some(last) = key.last_mut() {
                *last = (r >> 8) as u8 % 3;
            }
            if r % 5 == 0 {
                assert_eq!(tree.remove(&key), reference.remove(&key));
            } else {
                let expected = reference.get(&key).copied();
                assert_eq!(tree.insert(&key, step).err(), expected);
                reference.entry(key).or_insert(step);
            }
        }
        tree.check();
        let keys: Vec<&Vec<u8>> = reference.keys().collect();
        for _ in 0..200 {
            let mut bounds = [0, 1].map(|_| keys[xorshift(&mut seed) as usize % keys.len()]);
            bounds.sort();
            let [low, high] = bounds;
            let got: Vec<u64> = tree.range(low, Some(high)).map(|(_, v)| v).collect();
            let expected: Vec<u64> = reference
                .range(low.clone()..high.clone())
                .map(|(_, v)| *v)
                .collect();
            assert_eq!(got, expected, "the range [{low:?}, {high:?})");
            // A bound and a lookup between two present keys: `high` with a zero byte appended
            // sorts right after it, and ties with it in the first 16 bytes when it is short.
            let missing = [high.as_slice(), &[0]].concat();
            let got: Vec<u64> = tree.range(low, Some(&missing)).map(|(_, v)| v).collect();
            let expected: Vec<u64> = reference
                .range(low.clone()..missing.clone())
                .map(|(_, v)| *v)
                .collect();
            assert_eq!(got, expected, "the range [{low:?}, {missing:?})");
            assert_eq!(tree.get(&missing), reference.get(&missing).copied());
        }
        let all: Vec<(Vec<u8>, u64)> = tree.iter().map(|(k, v)| (k.to_vec(), v)).collect();
        assert_eq!(all, reference.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn ranges_are_half_open_and_ordered() {
        let mut tree = BPlusTree::new();
        for i in (0u64..10_000).rev() {
            tree.insert(&(i * 2).to_be_bytes(), i).unwrap();
        }
        tree.check();
        assert_eq!(tree.height(), 3);
        let got: Vec<u64> = tree
            .range(&101u64.to_be_bytes(), Some(&111u64.to_be_bytes()))
            .map(|(_, v)| v)
            .collect();
        assert_eq!(got, vec![51, 52, 53, 54, 55]);
        assert_eq!(tree.range(&20_000u64.to_be_bytes(), None).count(), 0);
        assert_eq!(tree.range(&0u64.to_be_bytes(), None).count(), 10_000);
        assert_eq!(tree.replace(&4u64.to_be_bytes(), 77), Some(2));
        assert_eq!(tree.get(&4u64.to_be_bytes()), Some(77));
        assert_eq!(tree.replace(&5u64.to_be_bytes(), 1), None);
    }

    #[test]
    fn ascending_inserts_leave_full_nodes_behind_them() {
        let mut tree = BPlusTree::new();
        let n = 100_000u64;
        for i in 0..n {
            tree.insert(&i.to_be_bytes(), i).unwrap();
        }
        tree.check();
        let (leaves, internal) = tree.node_sizes();
        let full = leaves
            .iter()
            .filter(|&&len| len >= RIGHTMOST_SPLIT_KEEPS)
            .count();
        assert!(
            full * 10 >= leaves.len() * 9,
            "{full} of {} leaves are at least 90% full",
            leaves.len()
        );
        // Internal nodes split at the right edge too: half splits there would leave about
        // one internal node per 30 leaves.
        assert!(
            internal.len() * 45 < leaves.len(),
            "{} internal nodes over {} leaves",
            internal.len(),
            leaves.len()
        );

        // Keys arriving later between the existing ones split nodes in half: no leaf but the
        // last ends up with fewer than half a node's keys.
        let groups = (0..n).step_by(997);
        for i in groups.clone() {
            for suffix in 0..10u8 {
                let key = [&i.to_be_bytes()[..], &[suffix]].concat();
                tree.insert(&key, i).unwrap();
            }
        }
        tree.check();
        assert_eq!(tree.len(), tree.iter().count());
        assert!(tree.iter().map(|(k, _)| k).is_sorted());
        let (leaves, _) = tree.node_sizes();
        let partial = leaves
            .iter()
            .filter(|&&len| len < RIGHTMOST_SPLIT_KEEPS)
            .count();
        assert!(partial >= groups.count(), "only {partial} leaves split");
        let smallest = leaves[..leaves.len() - 1].iter().min().unwrap();
        assert!(*smallest >= MAX_KEYS / 2, "a leaf holds {smallest} keys");
    }

    /// The orders keys arrive in, as the memory charge must cover them.
    #[derive(Debug, Clone, Copy)]
    enum Arrival {
        Random,
        Ascending,
        /// Sixteen ascending runs interleaved, as with a `(tenant, serial)` key: every run but
        /// the last grows inside the tree, where splits are half splits.
        InterleavedRuns,
        /// Descending keys: every split is at the left edge, where they go on arriving.
        Descending,
        /// Sixteen descending runs interleaved.
        InterleavedDescendingRuns,
    }

    /// Bytes the tree allocates per byte [`entry_bytes`] charges, for 100,000 BIGINT keys.
    fn allocated_per_charged_byte(arrival: Arrival) -> f64 {
        let mut tree = BPlusTree::new();
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut charged = 0;
        for i in 0..100_000u64 {
            let value = match arrival {
                Arrival::Random => xorshift(&mut seed),
                Arrival::Ascending => i,
                Arrival::InterleavedRuns => (i % 16) << 32 | i / 16,
                Arrival::Descending => u64::MAX - i,
                Arrival::InterleavedDescendingRuns => (i % 16) << 32 | (u32::MAX as u64 - i / 16),
            };
            // A BIGINT key as KeyCodec encodes it: a marker byte and eight value bytes.
            let key = [&[1u8][..], &value.to_be_bytes()].concat();
            if tree.insert(&key, i).is_ok() {
                charged += entry_bytes(key.len());
            }
        }
        tree.allocated_bytes() as f64 / charged as f64
    }

    /// The charge covers what the tree allocates whatever order keys come in (within 5%,
    /// the slack of the nodes array's own doubling), and keys arriving in runs, which leave
    /// nodes behind them holding only what they use (see [`Room`] and
    /// [`RIGHTMOST_SPLIT_KEEPS`]), cost well under it.
    #[test]
    fn entry_bytes_estimates_what_the_tree_allocates() {
        let ratio = |arrival| (arrival, allocated_per_charged_byte(arrival));
        let ratios = [
            ratio(Arrival::Random),
            ratio(Arrival::Ascending),
            ratio(Arrival::InterleavedRuns),
            ratio(Arrival::Descending),
            ratio(Arrival::InterleavedDescendingRuns),
        ];
        for (arrival, ratio) in ratios {
            assert!(
                (0.6..1.05).contains(&ratio),
                "{arrival:?}: the tree allocates {ratio:.2}x the charge"
            );
        }
        // Keys in runs leave behind them nodes that hold only what they use.
        for (arrival, ratio) in &ratios[1..] {
            assert!(*ratio < 0.85, "{arrival:?}: {ratio:.2}x");
        }
    }
}
