//! A key as the keyspace holds it: short keys in place, longer ones in one
//! shared allocation.
//!
//! The map and the expiry index each hold every key with an expiry. As
//! [`Bytes`] a key is 32 bytes in each, plus its own heap block, plus a
//! second block (the shared header) the first time it is cloned: about 130
//! bytes of a held lock key's cost for a key of 17 bytes. A [`Key`] is 24
//! bytes; up to [`INLINE`] bytes of name live inside it (no heap at all),
//! a longer name in one reference-counted block that every copy shares.
//! It compares, hashes and serialises exactly as the bytes it holds (as
//! `Bytes` does), so maps keyed by it iterate in the same order and
//! snapshots keep their format.

use std::borrow::Borrow;
use std::sync::Arc;

use bytes::Bytes;

/// Longest name kept inside the key itself.
pub const INLINE: usize = 22;

#[derive(Clone)]
pub struct Key(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Shared(Arc<[u8]>),
}

impl Key {
    pub fn new(name: &[u8]) -> Key {
        if name.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..name.len()].copy_from_slice(name);
            Key(Repr::Inline { len: name.len() as u8, bytes })
        } else {
            Key(Repr::Shared(Arc::from(name)))
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..*len as usize],
            Repr::Shared(name) => name,
        }
    }

    /// The name as `Bytes` (a copy), for replies and events.
    pub fn to_bytes(&self) -> Bytes {
        Bytes::copy_from_slice(self.as_slice())
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl From<Bytes> for Key {
    fn from(name: Bytes) -> Key {
        Key::new(&name)
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // As `Bytes` prints: b"..." with escapes.
        std::fmt::Debug::fmt(&Bytes::copy_from_slice(self.as_slice()), f)
    }
}

impl serde::Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.as_slice())
    }
}

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct Name;
        impl<'de> serde::de::Visitor<'de> for Name {
            type Value = Key;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a key name (bytes)")
            }

            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Key, E> {
                Ok(Key::new(v))
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(Key::new(v.as_bytes()))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Key, A::Error> {
                let mut name = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                while let Some(b) = seq.next_element::<u8>()? {
                    name.push(b);
                }
                Ok(Key::new(&name))
            }
        }
        // As `Bytes` does: a byte buffer.
        d.deserialize_byte_buf(Name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<Vec<u8>> {
        let mut names = vec![vec![], b"a".to_vec(), b"lock:000000000017".to_vec(), vec![0xff; INLINE], vec![0; INLINE]];
        names.push(vec![b'k'; INLINE + 1]);
        names.push([vec![b'k'; INLINE], vec![0]].concat());
        names.push(vec![0xff; 1000]);
        names.push(b"a\0".to_vec());
        names
    }

    #[test]
    fn a_key_holds_its_name_whatever_its_length() {
        for name in names() {
            let key = Key::new(&name);
            assert_eq!(&key[..], &name[..]);
            assert_eq!(key.to_bytes(), Bytes::from(name.clone()));
            assert_eq!(key.clone(), key);
        }
        assert_eq!(std::mem::size_of::<Key>(), 24);
        assert!(matches!(Key::new(&[7; INLINE]).0, Repr::Inline { .. }));
        assert!(matches!(Key::new(&[7; INLINE + 1]).0, Repr::Shared(_)));
    }

    #[test]
    fn keys_order_and_hash_as_their_bytes() {
        use std::hash::{BuildHasher, RandomState};
        let names = names();
        let hasher = RandomState::new();
        for a in &names {
            for b in &names {
                let (ka, kb) = (Key::new(a), Key::new(b));
                assert_eq!(ka.cmp(&kb), a.cmp(b), "{a:?} {b:?}");
                assert_eq!(ka == kb, a == b);
            }
            assert_eq!(hasher.hash_one(Key::new(a)), hasher.hash_one(&a[..]));
        }
    }

    #[test]
    fn a_key_serialises_as_bytes_do() {
        for name in names() {
            let bytes = Bytes::from(name.clone());
            let encoded = bincode::serialize(&Key::new(&name)).unwrap();
            assert_eq!(encoded, bincode::serialize(&bytes).unwrap());
            let back: Key = bincode::deserialize(&encoded).unwrap();
            assert_eq!(back, Key::new(&name));
            assert_eq!(format!("{:?}", Key::new(&name)), format!("{bytes:?}"));
        }
    }
}
