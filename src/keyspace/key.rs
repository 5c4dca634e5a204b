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

/// Up to [`INLINE`] bytes held in place, zero-padded (a [`Key`]'s and a
/// [`Str`]'s short form).
#[derive(Clone)]
struct Inline {
    len: u8,
    bytes: [u8; INLINE],
}

impl Inline {
    /// `bytes` in place, if they fit.
    fn new(bytes: &[u8]) -> Option<Inline> {
        if bytes.len() > INLINE {
            return None;
        }
        let mut inline = Inline { len: bytes.len() as u8, bytes: [0; INLINE] };
        inline.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(inline)
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

#[derive(Clone)]
pub struct Key(Repr);

#[derive(Clone)]
enum Repr {
    Inline(Inline),
    Shared(Arc<[u8]>),
}

impl Key {
    pub fn new(name: &[u8]) -> Key {
        Key(Inline::new(name).map_or_else(|| Repr::Shared(Arc::from(name)), Repr::Inline))
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline(name) => name.as_slice(),
            Repr::Shared(name) => name,
        }
    }

    /// The name as `Bytes` (a copy), for replies and events.
    pub fn to_bytes(&self) -> Bytes {
        Bytes::copy_from_slice(self.as_slice())
    }
}

/// A string value as the keyspace holds it: up to [`INLINE`] bytes inside
/// it (a counter, a short owner), a longer one in a block of its exact size
/// (lock tokens are mostly 24 to 40 bytes: one block with no header), a
/// value of [`SHARED`] bytes or more in a reference-counted block that
/// replies share instead of copying. 24 bytes, where a `Bytes` takes 32
/// plus its block (and a header block once it is cloned). Equal when its
/// bytes are, and serialises as they do (as `Bytes` does), so snapshots
/// keep their format.
#[derive(Clone)]
pub struct Str(StrRepr);

#[derive(Clone)]
enum StrRepr {
    Inline(Inline),
    Owned(Box<[u8]>),
    Shared(Arc<[u8]>),
}

/// Length from which a [`Str`] is shared by the replies that read it (a
/// `Bytes` over a shared block costs an allocation of its own; below this
/// a copy is as cheap).
const SHARED: usize = 4096;

impl Str {
    pub fn new(bytes: &[u8]) -> Str {
        Str(match Inline::new(bytes) {
            Some(inline) => StrRepr::Inline(inline),
            None if bytes.len() < SHARED => StrRepr::Owned(Box::from(bytes)),
            None => StrRepr::Shared(Arc::from(bytes)),
        })
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            StrRepr::Inline(bytes) => bytes.as_slice(),
            StrRepr::Owned(bytes) => bytes,
            StrRepr::Shared(bytes) => bytes,
        }
    }

    /// The value as `Bytes`, for replies: a copy, or a view of the shared
    /// block of a long one.
    pub fn to_bytes(&self) -> Bytes {
        match &self.0 {
            StrRepr::Shared(bytes) => Bytes::from_owner(bytes.clone()),
            _ => Bytes::copy_from_slice(self.as_slice()),
        }
    }
}

/// What [`Key`] and [`Str`] have as the bytes they hold: a slice of them
/// (`Deref`), equality, `Bytes`'s `Debug`, and `Bytes`'s serde form (a byte
/// buffer; read from a buffer, a string or a sequence of bytes, as `Bytes`
/// reads it).
macro_rules! held_as_bytes {
    ($t:ident, $what:literal) => {
        impl std::ops::Deref for $t {
            type Target = [u8];

            fn deref(&self) -> &[u8] {
                self.as_slice()
            }
        }

        impl From<Bytes> for $t {
            fn from(bytes: Bytes) -> $t {
                $t::new(&bytes)
            }
        }

        impl PartialEq for $t {
            fn eq(&self, other: &$t) -> bool {
                self.as_slice() == other.as_slice()
            }
        }

        impl Eq for $t {}

        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                // As `Bytes` prints: b"..." with escapes.
                std::fmt::Debug::fmt(&Bytes::copy_from_slice(self.as_slice()), f)
            }
        }

        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(self.as_slice())
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                d.deserialize_byte_buf(BytesOf($t::new, $what))
            }
        }
    };
}

held_as_bytes!(Key, "a key name (bytes)");
held_as_bytes!(Str, "a string value (bytes)");

/// Deserialises bytes (a byte buffer, a string, a sequence of bytes) into a
/// `T` built by its function.
struct BytesOf<T>(fn(&[u8]) -> T, &'static str);

impl<'de, T> serde::de::Visitor<'de> for BytesOf<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.1)
    }

    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<T, E> {
        Ok((self.0)(v))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
        Ok((self.0)(v.as_bytes()))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
        let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(b) = seq.next_element::<u8>()? {
            bytes.push(b);
        }
        Ok((self.0)(&bytes))
    }
}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

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
        assert!(matches!(Key::new(&[7; INLINE]).0, Repr::Inline(_)));
        assert!(matches!(Key::new(&[7; INLINE + 1]).0, Repr::Shared(_)));
    }

    #[test]
    fn a_string_value_holds_its_bytes_and_serialises_as_bytes_do() {
        let mut values = names();
        values.push(vec![b'v'; SHARED - 1]);
        values.push(vec![b'v'; SHARED]);
        values.push(vec![b'v'; 3 * SHARED + 1]);
        for value in values {
            let bytes = Bytes::from(value.clone());
            let s = Str::from(bytes.clone());
            assert_eq!(&s[..], &value[..]);
            assert_eq!(s.to_bytes(), bytes);
            assert_eq!(s.clone().to_bytes(), bytes, "a clone holds the same bytes");
            let encoded = bincode::serialize(&s).unwrap();
            assert_eq!(encoded, bincode::serialize(&bytes).unwrap());
            assert_eq!(bincode::deserialize::<Str>(&encoded).unwrap(), s);
            assert_eq!(format!("{s:?}"), format!("{bytes:?}"));
        }
        assert_eq!(std::mem::size_of::<Str>(), 24);
    }

    #[test]
    fn a_long_value_is_replied_from_its_block_without_a_copy() {
        let s = Str::new(&[9; SHARED]);
        let (a, b) = (s.to_bytes(), s.to_bytes());
        assert_eq!(a.as_ptr(), b.as_ptr(), "both views are of the one block");
        assert_eq!(a.as_ptr(), s.as_ptr());
        drop(s);
        assert_eq!(a, vec![9; SHARED], "a view keeps the block alive after the value is gone");
        let short = Str::new(&[9; SHARED - 1]);
        assert_ne!(short.to_bytes().as_ptr(), short.as_ptr(), "a short one is copied");
        assert!(matches!(Str::new(&[7; INLINE]).0, StrRepr::Inline(_)));
        assert!(matches!(Str::new(&[7; INLINE + 1]).0, StrRepr::Owned(_)));
        assert!(matches!(Str::new(&[7; SHARED - 1]).0, StrRepr::Owned(_)));
        assert!(matches!(Str::new(&[7; SHARED]).0, StrRepr::Shared(_)));
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
