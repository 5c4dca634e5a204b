//! Typed access to hash, list and sorted-set values, with `WRONGTYPE` for a key
//! of another type and Redis's rule that an emptied container is deleted.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use crate::keyspace::{Entry, ExecCtx, Keyspace, LogTime, Value};

use super::CmdError;

/// A container value type.
pub(super) trait Container: Sized {
    fn empty() -> Value;
    fn of(v: &Value) -> Option<&Self>;
    fn of_mut(v: &mut Value) -> Option<&mut Self>;
}

impl Container for BTreeMap<Bytes, Bytes> {
    fn empty() -> Value {
        Value::Hash(BTreeMap::new())
    }
    fn of(v: &Value) -> Option<&Self> {
        if let Value::Hash(h) = v { Some(h) } else { None }
    }
    fn of_mut(v: &mut Value) -> Option<&mut Self> {
        if let Value::Hash(h) = v { Some(h) } else { None }
    }
}

impl Container for VecDeque<Bytes> {
    fn empty() -> Value {
        Value::List(VecDeque::new())
    }
    fn of(v: &Value) -> Option<&Self> {
        if let Value::List(l) = v { Some(l) } else { None }
    }
    fn of_mut(v: &mut Value) -> Option<&mut Self> {
        if let Value::List(l) = v { Some(l) } else { None }
    }
}

impl Container for BTreeMap<Bytes, f64> {
    fn empty() -> Value {
        Value::ZSet(BTreeMap::new())
    }
    fn of(v: &Value) -> Option<&Self> {
        if let Value::ZSet(z) = v { Some(z) } else { None }
    }
    fn of_mut(v: &mut Value) -> Option<&mut Self> {
        if let Value::ZSet(z) = v { Some(z) } else { None }
    }
}

/// The live container under `key` for reading.
pub(super) fn read<'a, T: Container>(ks: &'a Keyspace, now: LogTime, key: &[u8]) -> Result<Option<&'a T>, CmdError> {
    match ks.get(key, now) {
        None => Ok(None),
        Some(e) => T::of(&e.value).map(Some).ok_or(CmdError::WrongType),
    }
}

/// The live container under `key` for writing; created empty (with a new
/// version) when missing and `create` is set.
pub(super) fn write<'a, T: Container>(
    ks: &'a mut Keyspace,
    ctx: &mut ExecCtx,
    key: &Bytes,
    create: bool,
) -> Result<Option<&'a mut T>, CmdError> {
    if ks.get_mut(key, ctx).is_none() {
        if !create {
            return Ok(None);
        }
        ks.insert(key.clone(), Entry::new(T::empty(), ctx.version, ctx.log_time));
    }
    match ks.get_mut(key, ctx) {
        None => Ok(None),
        Some(e) => {
            if T::of(&e.value).is_none() {
                return Err(CmdError::WrongType);
            }
            // The caller is about to change the value in place.
            e.rewritten(ctx.version, ctx.log_time);
            T::of_mut(&mut e.value).map(Some).ok_or(CmdError::WrongType)
        }
    }
}

/// Checks the type of `key` without creating it.
pub(super) fn check<T: Container>(ks: &mut Keyspace, ctx: &mut ExecCtx, key: &Bytes) -> Result<(), CmdError> {
    match ks.get_mut(key, ctx) {
        Some(e) if T::of(&e.value).is_none() => Err(CmdError::WrongType),
        _ => Ok(()),
    }
}

/// Deletes `key` if its container became empty, with the `del` event.
pub(super) fn drop_if_empty(ks: &mut Keyspace, ctx: &mut ExecCtx, key: &Bytes) {
    if ks.get_mut(key, ctx).is_some_and(|e| e.value.is_empty_container()) {
        ks.remove(key);
        ctx.key_event('g', "del", key);
    }
}
