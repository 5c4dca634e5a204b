//! The map of keys: a persistent hash trie.
//!
//! Every key sits in a trie indexed by a fixed 64-bit hash of its name
//! ([`key_hash`]), five bits a level from the top, with each node's
//! children packed after a bitmap of which are present (a HAMT). A lookup
//! walks the bits of one hash: at 10 M keys five nodes, of which the first
//! three stay in the cache, and one comparison of names at the end. The
//! B-tree this replaced compared names at every step of a binary search in
//! every node, each step a cache miss on a big keyspace (benches/HISTORY.md).
//!
//! Persistent: nodes are shared (`Arc`) and copied only when written while
//! shared, so a clone is O(1) (a snapshot is taken under the state lock in
//! constant time and encoded elsewhere while applying goes on) and a change
//! after it copies only the nodes on its path.
//!
//! Ordered by hash: iteration visits keys in ascending [`key_hash`], names
//! with an equal hash in name order, the same on every node whatever order
//! the keys came in. `SCAN` takes that hash as its cursor and continues
//! from it in time proportional to the page ([`KeyMap::iter_from`]);
//! `RANDOMKEY` picks the first key at or after a random hash.
//!
//! The hash is public and fixed (every node must order alike), so names
//! that share it can be made on purpose. Such names are kept in one
//! persistent B-tree under the last level ([`Sub::Collision`]): each still
//! costs a logarithm, never a scan of the others.
//!
//! Shape, the same for the same keys whatever their history: a child holds
//! one key in place, or a sub-node for two or more keys sharing the child's
//! bits, and below the last level (all 64 bits used) a collision set. A
//! node keeps its keys and its sub-nodes in two arrays (CHAMP's layout), so
//! a sub-node costs its parent a 16-byte slot, not a key's 88: at 1 M keys
//! about a third of the nodes' children are sub-nodes.

use std::marker::PhantomData;
use std::sync::Arc;

use super::{mix64, Key};

/// The hash that places a name in the map and in `SCAN`'s order: FNV-1a,
/// then SplitMix64's finaliser ([`mix64`]), so that names differing only
/// in their last bytes still differ in their top bits (which the trie uses
/// first). Fixed forever: cursors and iteration order depend on it.
pub fn key_hash(name: &[u8]) -> u64 {
    mix64(fnv1a(FNV_OFFSET, name))
}

/// FNV-1a's starting value.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a over `bytes`, going on from `hash`.
pub fn fnv1a(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// How a [`KeyMap`] hashes names: [`key_hash`], or in tests one that
/// collides on purpose.
pub trait HashName {
    fn hash(name: &[u8]) -> u64;
}

/// [`key_hash`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KeyHash;

impl HashName for KeyHash {
    fn hash(name: &[u8]) -> u64 {
        key_hash(name)
    }
}

/// Levels 0 to 11 take five bits of the hash each, level 12 the last four.
const LAST_LEVEL: u32 = 12;

/// The child index of `hash` at `level`.
fn chunk(hash: u64, level: u32) -> u32 {
    debug_assert!(level <= LAST_LEVEL);
    if level < LAST_LEVEL {
        ((hash >> (59 - 5 * level)) & 31) as u32
    } else {
        (hash & 15) as u32
    }
}

/// Keys and their values, by name, ordered by hash.
pub struct KeyMap<V, H = KeyHash> {
    root: Arc<Node<V>>,
    len: usize,
    hasher: PhantomData<H>,
}

/// A node: its 32 children by index, each absent, one key (kept in `data`)
/// or two or more keys (a [`Sub`]). Keys and sub-nodes are kept apart (as
/// in CHAMP) so that a child holding many keys costs a pointer's slot, not
/// a key's: a node near the leaves has a dozen keys and a few sub-nodes.
struct Node<V> {
    /// Bit `i` set: child `i` is one key, at `data[rank of i in datamap]`.
    datamap: u32,
    /// Bit `i` set: child `i` holds two or more keys, at `subs[rank of i in
    /// nodemap]`. Never set together with the same bit of `datamap`.
    nodemap: u32,
    /// Exactly as long as needed: a node is copied whole when a shared one
    /// changes, and a slice has no spare capacity to carry.
    data: Box<[(Key, V)]>,
    subs: Box<[Sub<V>]>,
}

/// A child holding two or more keys.
enum Sub<V> {
    /// The keys under this child's bits.
    Node(Arc<Node<V>>),
    /// Keys with one hash (below the last level only).
    Collision(Box<imbl::OrdMap<Key, V>>),
}

impl<V: Clone> Clone for Sub<V> {
    fn clone(&self) -> Self {
        match self {
            Sub::Node(n) => Sub::Node(n.clone()),
            Sub::Collision(m) => Sub::Collision(m.clone()),
        }
    }
}

impl<V: Clone> Clone for Node<V> {
    fn clone(&self) -> Self {
        Node { datamap: self.datamap, nodemap: self.nodemap, data: self.data.clone(), subs: self.subs.clone() }
    }
}

/// Where child `index` is (or would go) among the children marked in `map`.
fn rank(map: u32, index: u32) -> usize {
    (map & ((1u32 << index) - 1)).count_ones() as usize
}

/// The children marked in `map` after `index`.
fn after(map: u32, index: u32) -> u32 {
    map & !((2u64 << index) - 1) as u32
}

/// Inserts `item` at `at`, growing the slice by exactly one.
fn insert_at<T>(slice: &mut Box<[T]>, at: usize, item: T) {
    let mut v = std::mem::take(slice).into_vec();
    v.reserve_exact(1);
    v.insert(at, item);
    *slice = v.into_boxed_slice();
}

/// Removes and returns the item at `at`, shrinking the slice by one.
fn remove_at<T>(slice: &mut Box<[T]>, at: usize) -> T {
    let mut v = std::mem::take(slice).into_vec();
    let item = v.remove(at);
    *slice = v.into_boxed_slice();
    item
}

impl<V> Node<V> {
    fn empty() -> Node<V> {
        Node { datamap: 0, nodemap: 0, data: Box::default(), subs: Box::default() }
    }

    fn children(&self) -> u32 {
        self.datamap | self.nodemap
    }
}

impl<V, H> Clone for KeyMap<V, H> {
    fn clone(&self) -> Self {
        KeyMap { root: self.root.clone(), len: self.len, hasher: PhantomData }
    }
}

impl<V, H> Default for KeyMap<V, H> {
    fn default() -> Self {
        KeyMap { root: Arc::new(Node::empty()), len: 0, hasher: PhantomData }
    }
}

impl<V: PartialEq, H: HashName> PartialEq for KeyMap<V, H> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<V: std::fmt::Debug, H: HashName> std::fmt::Debug for KeyMap<V, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V, H: HashName> KeyMap<V, H> {
    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn clear(&mut self) {
        *self = KeyMap::default();
    }

    pub fn get(&self, name: &[u8]) -> Option<&V> {
        self.get_key_value(name).map(|(_, v)| v)
    }

    pub fn contains_key(&self, name: &[u8]) -> bool {
        self.get_key_value(name).is_some()
    }

    pub fn get_key_value(&self, name: &[u8]) -> Option<(&Key, &V)> {
        let hash = H::hash(name);
        let mut node = &*self.root;
        let mut level = 0;
        loop {
            let index = chunk(hash, level);
            let bit = 1u32 << index;
            if node.datamap & bit != 0 {
                let (k, v) = &node.data[rank(node.datamap, index)];
                return (k.as_slice() == name).then_some((k, v));
            }
            if node.nodemap & bit == 0 {
                return None;
            }
            match &node.subs[rank(node.nodemap, index)] {
                Sub::Node(child) => {
                    node = child;
                    level += 1;
                }
                Sub::Collision(set) => return set.get_key_value(name),
            }
        }
    }

    /// Every key in hash order (names of one hash in name order).
    pub fn iter(&self) -> Iter<'_, V> {
        Iter { stack: vec![Frame { node: &self.root, rest: self.root.children() }], collision: None }
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    /// The keys whose hash is `from` or more, in hash order; each step costs
    /// what a step of [`KeyMap::iter`] does, and finding the first what a
    /// lookup does.
    pub fn iter_from(&self, from: u64) -> Iter<'_, V> {
        let mut stack = Vec::new();
        let mut node = &*self.root;
        let mut level = 0;
        loop {
            let index = chunk(from, level);
            let bit = 1u32 << index;
            // The children after `index` come after whatever `index` holds.
            let rest = after(node.children(), index);
            if node.nodemap & bit != 0 {
                match &node.subs[rank(node.nodemap, index)] {
                    Sub::Node(child) => {
                        stack.push(Frame { node, rest });
                        node = child;
                        level += 1;
                        continue;
                    }
                    Sub::Collision(set) => {
                        let hash = set.keys().next().map_or(0, |k| H::hash(k));
                        let here = if hash >= from { bit } else { 0 };
                        stack.push(Frame { node, rest: rest | here });
                        break;
                    }
                }
            }
            let here = if node.datamap & bit != 0 && H::hash(&node.data[rank(node.datamap, index)].0) >= from {
                bit
            } else {
                0
            };
            stack.push(Frame { node, rest: rest | here });
            break;
        }
        Iter { stack, collision: None }
    }
}

impl<V: Clone, H: HashName> KeyMap<V, H> {
    pub fn get_mut(&mut self, name: &[u8]) -> Option<&mut V> {
        self.get_key_value_mut(name).map(|(_, v)| v)
    }

    /// The key and its value, for changing the value. Copies the shared
    /// nodes on the way only if the key is there.
    pub fn get_key_value_mut(&mut self, name: &[u8]) -> Option<(&Key, &mut V)> {
        if !self.contains_key(name) {
            return None;
        }
        let hash = H::hash(name);
        let mut node = Arc::make_mut(&mut self.root);
        let mut level = 0;
        loop {
            let index = chunk(hash, level);
            if node.datamap & (1 << index) != 0 {
                let (k, v) = &mut node.data[rank(node.datamap, index)];
                return Some((&*k, v));
            }
            match &mut node.subs[rank(node.nodemap, index)] {
                Sub::Node(child) => {
                    node = Arc::make_mut(child);
                    level += 1;
                }
                Sub::Collision(set) => return set.get_key_value_mut(name),
            }
        }
    }

    /// Stores `value` under `key`; the value it replaces, if any (the key
    /// already held is kept: its bytes are equal).
    pub fn insert(&mut self, key: Key, value: V) -> Option<V> {
        let hash = H::hash(&key);
        let old = Self::insert_into(Arc::make_mut(&mut self.root), key, value, hash, 0);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    fn insert_into(node: &mut Node<V>, key: Key, value: V, hash: u64, level: u32) -> Option<V> {
        let index = chunk(hash, level);
        let bit = 1u32 << index;
        if node.nodemap & bit != 0 {
            return match &mut node.subs[rank(node.nodemap, index)] {
                Sub::Node(child) => Self::insert_into(Arc::make_mut(child), key, value, hash, level + 1),
                Sub::Collision(set) => set.insert(key, value),
            };
        }
        let at = rank(node.datamap, index);
        if node.datamap & bit == 0 {
            insert_at(&mut node.data, at, (key, value));
            node.datamap |= bit;
            return None;
        }
        if node.data[at].0 == key {
            return Some(std::mem::replace(&mut node.data[at].1, value));
        }
        // Two keys under this child now: a sub-node (or a collision set).
        let (k, v) = remove_at(&mut node.data, at);
        node.datamap &= !bit;
        let other = H::hash(&k);
        insert_at(&mut node.subs, rank(node.nodemap, index), Self::pair((k, v, other), (key, value, hash), level + 1));
        node.nodemap |= bit;
        None
    }

    /// The child at `level` for two keys whose hashes agree above it.
    fn pair(a: (Key, V, u64), b: (Key, V, u64), level: u32) -> Sub<V> {
        if level > LAST_LEVEL {
            let mut set = imbl::OrdMap::new();
            set.insert(a.0, a.1);
            set.insert(b.0, b.1);
            return Sub::Collision(Box::new(set));
        }
        let (ia, ib) = (chunk(a.2, level), chunk(b.2, level));
        let node = if ia == ib {
            Node { datamap: 0, nodemap: 1 << ia, data: Box::default(), subs: Box::new([Self::pair(a, b, level + 1)]) }
        } else {
            let (first, second) = if ia < ib { (a, b) } else { (b, a) };
            Node {
                datamap: (1 << ia) | (1 << ib),
                nodemap: 0,
                data: Box::new([(first.0, first.1), (second.0, second.1)]),
                subs: Box::default(),
            }
        };
        Sub::Node(Arc::new(node))
    }

    /// Removes `name`, returning the key and value it had. Copies the shared
    /// nodes on the way only if the key is there.
    pub fn remove_with_key(&mut self, name: &[u8]) -> Option<(Key, V)> {
        if !self.contains_key(name) {
            return None;
        }
        let hash = H::hash(name);
        let removed = Self::remove_from(Arc::make_mut(&mut self.root), name, hash, 0);
        debug_assert!(removed.is_some(), "the key was found just above");
        if removed.is_some() {
            self.len -= 1;
        }
        removed
    }

    pub fn remove(&mut self, name: &[u8]) -> Option<V> {
        self.remove_with_key(name).map(|(_, v)| v)
    }

    fn remove_from(node: &mut Node<V>, name: &[u8], hash: u64, level: u32) -> Option<(Key, V)> {
        let index = chunk(hash, level);
        let bit = 1u32 << index;
        if node.datamap & bit != 0 {
            let at = rank(node.datamap, index);
            if node.data[at].0.as_slice() != name {
                return None;
            }
            node.datamap &= !bit;
            return Some(remove_at(&mut node.data, at));
        }
        if node.nodemap & bit == 0 {
            return None;
        }
        let at = rank(node.nodemap, index);
        let (removed, one_left) = match &mut node.subs[at] {
            Sub::Node(child) => {
                let child = Arc::make_mut(child);
                let removed = Self::remove_from(child, name, hash, level + 1)?;
                // Sub-nodes hold two or more keys, so one key left is in data.
                (removed, child.nodemap == 0 && child.data.len() == 1)
            }
            Sub::Collision(set) => {
                let removed = set.remove_with_key(name)?;
                (removed, set.len() == 1)
            }
        };
        if one_left {
            // A child left with one key becomes that key, here.
            let only = match remove_at(&mut node.subs, at) {
                Sub::Node(child) => match Arc::try_unwrap(child) {
                    Ok(child) => child.data.into_vec().pop(),
                    Err(shared) => shared.data.first().cloned(),
                },
                Sub::Collision(set) => set.iter().next().map(|(k, v)| (k.clone(), v.clone())),
            }
            .expect("one key left");
            node.nodemap &= !bit;
            insert_at(&mut node.data, rank(node.datamap, index), only);
            node.datamap |= bit;
        }
        Some(removed)
    }
}

/// A node on an [`Iter`]'s way down and the children it has still to visit.
struct Frame<'a, V> {
    node: &'a Node<V>,
    rest: u32,
}

/// Keys and values in hash order ([`KeyMap::iter`]).
pub struct Iter<'a, V> {
    /// The nodes on the way down, each with the children still to visit.
    stack: Vec<Frame<'a, V>>,
    collision: Option<imbl::ordmap::Iter<'a, Key, V, imbl::shared_ptr::DefaultSharedPtr>>,
}

impl<'a, V> Iterator for Iter<'a, V> {
    type Item = (&'a Key, &'a V);

    fn next(&mut self) -> Option<(&'a Key, &'a V)> {
        loop {
            if let Some(set) = &mut self.collision {
                if let Some(item) = set.next() {
                    return Some(item);
                }
                self.collision = None;
            }
            let frame = self.stack.last_mut()?;
            if frame.rest == 0 {
                self.stack.pop();
                continue;
            }
            let index = frame.rest.trailing_zeros();
            frame.rest &= frame.rest - 1;
            let node = frame.node;
            if node.datamap & (1 << index) != 0 {
                let (k, v) = &node.data[rank(node.datamap, index)];
                return Some((k, v));
            }
            match &node.subs[rank(node.nodemap, index)] {
                Sub::Node(child) => self.stack.push(Frame { node: child, rest: child.children() }),
                Sub::Collision(set) => self.collision = Some(set.iter()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A hash that keeps only the first byte and the length: most names
    /// collide, and the rest share long prefixes of bits.
    #[derive(Clone, Copy, Default, PartialEq, Debug)]
    struct Poor;
    impl HashName for Poor {
        fn hash(name: &[u8]) -> u64 {
            (name.first().copied().unwrap_or(0) as u64) << 56 | name.len() as u64
        }
    }

    fn key(n: u64) -> Key {
        Key::new(format!("key:{n}").as_bytes())
    }

    /// The model's order: by hash, then by name.
    fn ordered<H: HashName>(model: &BTreeMap<Vec<u8>, u64>) -> Vec<(Vec<u8>, u64)> {
        let mut all: Vec<(Vec<u8>, u64)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
        all.sort_by(|a, b| (H::hash(&a.0), &a.0).cmp(&(H::hash(&b.0), &b.0)));
        all
    }

    fn contents<H: HashName>(map: &KeyMap<u64, H>) -> Vec<(Vec<u8>, u64)> {
        map.iter().map(|(k, v)| (k.to_vec(), *v)).collect()
    }

    /// Random inserts, removals, changes and clones against a `BTreeMap`:
    /// every lookup, the length, the order and every `iter_from` agree, and
    /// a clone taken earlier never sees a later change.
    fn agrees_with_a_model<H: HashName>(names: u64, steps: usize, seed: u64) {
        let mut rng = crate::keyspace::Rng::new(seed);
        let mut map: KeyMap<u64, H> = KeyMap::default();
        let mut model = BTreeMap::new();
        let mut frozen: Vec<(KeyMap<u64, H>, BTreeMap<Vec<u8>, u64>)> = Vec::new();
        for step in 0..steps {
            let n = rng.below(names as usize) as u64;
            let k = key(n);
            match rng.below(10) {
                0..=4 => assert_eq!(map.insert(k.clone(), step as u64), model.insert(k.to_vec(), step as u64)),
                5..=7 => assert_eq!(map.remove_with_key(&k).map(|(k, v)| (k.to_vec(), v)), model.remove_entry(&k.to_vec())),
                8 => {
                    if let Some(v) = map.get_mut(&k) {
                        *v += 1_000_000;
                    }
                    if let Some(v) = model.get_mut(&k.to_vec()) {
                        *v += 1_000_000;
                    }
                }
                _ => {
                    if frozen.len() < 8 {
                        frozen.push((map.clone(), model.clone()));
                    }
                }
            }
            assert_eq!(map.get(&k), model.get(&k.to_vec()));
            assert_eq!(map.len(), model.len());
        }
        let want = ordered::<H>(&model);
        assert_eq!(contents(&map), want);
        for n in 0..names {
            assert_eq!(map.get(&key(n)), model.get(&key(n).to_vec()));
        }
        // From every key's own hash, one below and one above it, and a few
        // random points: exactly the model's keys at or after the point.
        let mut points: Vec<u64> = want.iter().flat_map(|(k, _)| {
            let h = H::hash(k);
            [h, h.wrapping_sub(1), h.wrapping_add(1)]
        }).collect();
        points.extend((0..64).map(|_| rng.next_u64()));
        points.extend([0, u64::MAX]);
        for from in points {
            let got: Vec<(Vec<u8>, u64)> = map.iter_from(from).map(|(k, v)| (k.to_vec(), *v)).collect();
            let expected: Vec<(Vec<u8>, u64)> = want.iter().filter(|(k, _)| H::hash(k) >= from).cloned().collect();
            assert_eq!(got, expected, "iter_from({from:#x})");
        }
        for (old, old_model) in frozen {
            assert_eq!(contents(&old), ordered::<H>(&old_model));
        }
    }

    #[test]
    fn agrees_with_an_ordered_map_under_random_changes() {
        for seed in 1..4 {
            agrees_with_a_model::<KeyHash>(3_000, 20_000, seed);
        }
    }

    #[test]
    fn names_sharing_a_hash_are_kept_apart_and_in_order() {
        for seed in 1..4 {
            agrees_with_a_model::<Poor>(500, 10_000, seed);
        }
    }

    /// Removing every key leaves the empty map's shape: no branch is left
    /// holding one key, so equal contents have equal shapes.
    #[test]
    fn removing_keys_leaves_the_shape_of_the_keys_left() {
        fn depth<V>(node: &Node<V>) -> usize {
            node.subs.iter().map(|s| if let Sub::Node(c) = s { 1 + depth(c) } else { 0 }).max().unwrap_or(0)
        }
        fn branches_hold_two<V>(node: &Node<V>) -> usize {
            // Keys under `node`; panics if a sub-node holds fewer than two
            // or a node's maps disagree with what it holds.
            assert_eq!(node.datamap & node.nodemap, 0);
            assert_eq!(node.datamap.count_ones() as usize, node.data.len());
            assert_eq!(node.nodemap.count_ones() as usize, node.subs.len());
            let under: usize = node
                .subs
                .iter()
                .map(|s| match s {
                    Sub::Collision(set) => set.len(),
                    Sub::Node(c) => {
                        let n = branches_hold_two(c);
                        assert!(n >= 2, "a sub-node holds {n} key");
                        n
                    }
                })
                .sum();
            node.data.len() + under
        }
        let mut grown: KeyMap<u64> = KeyMap::default();
        let mut direct: KeyMap<u64> = KeyMap::default();
        for n in 0..5_000 {
            grown.insert(key(n), n);
        }
        for n in (0..5_000).filter(|n| n % 7 != 0) {
            grown.remove(&key(n));
        }
        for n in (0..5_000).filter(|n| n % 7 == 0) {
            direct.insert(key(n), n);
        }
        assert_eq!(branches_hold_two(&grown.root), grown.len());
        assert_eq!(depth(&grown.root), depth(&direct.root));
        assert_eq!(grown, direct);
        for n in 0..5_000 {
            grown.remove(&key(n));
        }
        assert!(grown.is_empty());
        assert_eq!((grown.root.datamap, grown.root.nodemap, grown.root.data.len(), grown.root.subs.len()), (0, 0, 0, 0));
    }

    /// Names with one hash cost a logarithm each: 20,000 of them, inserted
    /// and looked up, finish (a list scanned per insert would take 2 x 10^8
    /// comparisons), and the map holds them all.
    #[test]
    fn many_names_with_one_hash_are_a_tree_not_a_list() {
        #[derive(Clone, Copy, Default, PartialEq, Debug)]
        struct Zero;
        impl HashName for Zero {
            fn hash(_: &[u8]) -> u64 {
                0
            }
        }
        let mut map: KeyMap<u64, Zero> = KeyMap::default();
        for n in 0..20_000 {
            map.insert(key(n), n);
        }
        assert_eq!(map.len(), 20_000);
        assert_eq!(map.get(&key(12_345)), Some(&12_345));
        assert_eq!(map.iter().count(), 20_000);
        assert_eq!(map.iter_from(1).count(), 0);
        assert_eq!(map.iter_from(0).count(), 20_000);
    }

    /// What the layout is for: a sub-node's slot is two words, a node's
    /// header fits jemalloc's 64-byte class with `Arc`'s counts.
    #[test]
    fn a_sub_node_costs_a_pointer_not_a_key() {
        assert_eq!(std::mem::size_of::<Sub<crate::keyspace::Entry>>(), 16);
        assert!(std::mem::size_of::<Node<crate::keyspace::Entry>>() + 16 <= 64);
    }

    /// The hash is fixed: these values are what every node and every
    /// version computes (computed apart from this code, from FNV-1a's and
    /// SplitMix64's definitions); a change would reorder `SCAN` and
    /// `RANDOMKEY` across an upgrade.
    #[test]
    fn the_hash_is_fixed() {
        assert_eq!(key_hash(b""), 0xc381_7c01_6ba4_ff30);
        assert_eq!(key_hash(b"a"), 0x5f29_c2aa_dd9b_8527);
        assert_eq!(key_hash(b"lock:1"), 0xb021_17f9_5a7b_9093);
        assert_eq!(key_hash(b"lock:2"), 0x22b8_406b_e0b3_2d42);
    }
}
