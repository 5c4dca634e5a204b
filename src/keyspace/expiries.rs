//! The expiry index: every key that has an expiry, in (time, key) order, as
//! a persistent structure (a clone costs O(1), like the keyspace's maps).
//!
//! Keys are grouped by their expiry millisecond: a map from time to the keys
//! that expire then. Under load many keys share a millisecond (50 clients
//! taking leases of one TTL put tens of keys in each), and a flat set of
//! (time, key) compares keys, which live elsewhere in memory, at every step
//! of every insert whenever the times tie. Grouped, a lookup compares times
//! (integers) down the map and keys only inside one group. A group of up to
//! [`FEW`] keys is one sorted array (copied on write, as a persistent map's
//! node is), so a snapshot's index is rebuilt from its sorted pairs without
//! comparing keys at all, and each key costs one pointer's worth of memory;
//! a bigger group (many keys given one absolute expiry, say) is a persistent
//! set, so that no insert copies more than [`FEW`] keys. The order, and so
//! the order in which keys expire, is a flat set's: by time, then by key.

use std::sync::Arc;

use super::{Key, LogTime};

/// Most keys a group keeps as one sorted array.
const FEW: usize = 128;

/// Keys by expiry time.
#[derive(Debug, Clone, Default)]
pub struct Expiries {
    by_time: imbl::OrdMap<LogTime, Group>,
    len: usize,
}

/// The keys that expire in one millisecond, never empty.
#[derive(Debug, Clone)]
enum Group {
    One(Key),
    /// Sorted, 2 to [`FEW`] keys.
    Few(Arc<Vec<Key>>),
    /// More than [`FEW`] when it became a set (it stays one until a single
    /// key is left).
    Many(imbl::OrdSet<Key>),
}

/// Equal contents, whatever the groups' shapes.
impl PartialEq for Expiries {
    fn eq(&self, other: &Expiries) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Expiries {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn clear(&mut self) {
        *self = Expiries::default();
    }

    /// Adds `key` at `at`; false if it was there already.
    pub fn insert(&mut self, at: LogTime, key: Key) -> bool {
        let Some(group) = self.by_time.get_mut(&at) else {
            self.by_time.insert(at, Group::One(key));
            self.len += 1;
            return true;
        };
        let added = match group {
            Group::One(k) => match (*k).cmp(&key) {
                std::cmp::Ordering::Equal => false,
                std::cmp::Ordering::Less => {
                    *group = Group::Few(Arc::new(vec![k.clone(), key]));
                    true
                }
                std::cmp::Ordering::Greater => {
                    *group = Group::Few(Arc::new(vec![key, k.clone()]));
                    true
                }
            },
            Group::Few(keys) => match keys.binary_search(&key) {
                Ok(_) => false,
                Err(pos) if keys.len() < FEW => {
                    // Exactly one more: a group mostly fills while one entry
                    // applies and is then only read, so the room doubling
                    // leaves (up to half the array) would stay unused: 1 M
                    // lock keys took 10 MB less (benches/HISTORY.md).
                    let keys = Arc::make_mut(keys);
                    keys.reserve_exact(1);
                    keys.insert(pos, key);
                    true
                }
                Err(_) => {
                    let mut set: imbl::OrdSet<Key> = keys.iter().cloned().collect();
                    set.insert(key);
                    *group = Group::Many(set);
                    true
                }
            },
            Group::Many(set) => set.insert(key).is_none(),
        };
        self.len += added as usize;
        added
    }

    /// Removes `key` from `at`; false if it was not there.
    pub fn remove(&mut self, at: LogTime, key: &[u8]) -> bool {
        let Some(group) = self.by_time.get_mut(&at) else { return false };
        let last = match group {
            Group::One(k) if k[..] == *key => None,
            Group::One(_) => return false,
            Group::Few(keys) => {
                let Ok(pos) = keys.binary_search_by(|k| k[..].cmp(key)) else { return false };
                let keys = Arc::make_mut(keys);
                keys.remove(pos);
                keys.first().filter(|_| keys.len() == 1).cloned()
            }
            Group::Many(set) => {
                if set.remove(key).is_none() {
                    return false;
                }
                set.get_min().filter(|_| set.len() == 1).cloned()
            }
        };
        match last {
            Some(k) => *group = Group::One(k),
            None if matches!(group, Group::One(_)) => {
                self.by_time.remove(&at);
            }
            None => {}
        }
        self.len -= 1;
        true
    }

    /// The earliest (time, key).
    pub fn first(&self) -> Option<(LogTime, &Key)> {
        let (at, group) = self.by_time.get_min()?;
        let key = match group {
            Group::One(k) => k,
            Group::Few(keys) => keys.first()?,
            Group::Many(set) => set.get_min()?,
        };
        Some((*at, key))
    }

    /// Every (time, key), in order.
    pub fn iter(&self) -> impl Iterator<Item = (LogTime, &Key)> + '_ {
        self.by_time.iter().flat_map(|(at, group)| {
            let keys = match group {
                Group::One(k) => GroupIter::Few(std::slice::from_ref(k).iter()),
                Group::Few(keys) => GroupIter::Few(keys.iter()),
                Group::Many(set) => GroupIter::Many(set.iter()),
            };
            keys.map(move |k| (*at, k))
        })
    }

    /// The index of `pairs`, which must be sorted by (time, key), each pair
    /// once (as a snapshot's keys give them, once sorted): no key is
    /// compared, unless a millisecond has more than [`FEW`].
    pub fn from_sorted(pairs: Vec<(LogTime, Key)>) -> Expiries {
        let len = pairs.len();
        let mut by_time = imbl::OrdMap::new();
        let mut pairs = pairs.into_iter().peekable();
        while let Some((at, key)) = pairs.next() {
            let mut keys = vec![key];
            while let Some((_, key)) = pairs.next_if(|(next, _)| *next == at) {
                keys.push(key);
            }
            let group = match keys.len() {
                1 => Group::One(keys.pop().expect("one key")),
                n if n <= FEW => Group::Few(Arc::new(keys)),
                _ => Group::Many(keys.into_iter().collect()),
            };
            by_time.insert(at, group);
        }
        let index = Expiries { by_time, len };
        debug_assert_eq!(index.iter().count(), len, "pairs given twice");
        index
    }
}

enum GroupIter<'a> {
    Few(std::slice::Iter<'a, Key>),
    Many(imbl::ordset::Iter<'a, Key, imbl::shared_ptr::DefaultSharedPtr>),
}

impl<'a> Iterator for GroupIter<'a> {
    type Item = &'a Key;

    fn next(&mut self) -> Option<&'a Key> {
        match self {
            GroupIter::Few(it) => it.next(),
            GroupIter::Many(it) => it.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Key {
        Key::new(s.as_bytes())
    }

    /// The index against a flat ordered set of (time, key), through random
    /// inserts and removes, some of them repeated or of absent pairs.
    #[test]
    fn it_keeps_the_order_and_contents_of_a_flat_set() {
        // Groups that stay small arrays, then groups that grow into sets
        // (and shrink again).
        for (times, names) in [(40, 60), (6, 300)] {
            let mut index = Expiries::default();
            let mut flat = std::collections::BTreeSet::new();
            let mut x: u64 = 12345;
            for step in 0..60_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let at = x % times;
                let key = b(&format!("k{}", (x >> 8) % names));
                // Removes win in some stretches, so groups shrink back.
                let removing = if (step / 5000) % 2 == 1 { x % 3 != 0 } else { x % 3 == 0 };
                if removing {
                    assert_eq!(index.remove(at, &key), flat.remove(&(at, key.clone())), "step {step}");
                } else {
                    assert_eq!(index.insert(at, key.clone()), flat.insert((at, key)), "step {step}");
                }
                assert_eq!(index.len(), flat.len());
                if step % 500 == 0 {
                    let got: Vec<(LogTime, Key)> = index.iter().map(|(t, k)| (t, k.clone())).collect();
                    let want: Vec<(LogTime, Key)> = flat.iter().cloned().collect();
                    assert_eq!(got, want, "step {step}");
                    assert_eq!(index.first().map(|(t, k)| (t, k.clone())), flat.first().cloned());
                    assert_eq!(Expiries::from_sorted(want), index, "rebuilt from its pairs");
                }
            }
        }
        // A group shrunk to one key equals a group built with one.
        let mut a = Expiries::default();
        a.insert(5, b("x"));
        a.insert(5, b("y"));
        a.remove(5, b"x");
        assert_eq!(a, Expiries::from_sorted(vec![(5, b("y"))]));
        assert!(!a.remove(5, b"x"));
        assert!(!a.remove(6, b"y"));
        a.clear();
        assert!(a.len() == 0 && a.first().is_none());
    }
}
