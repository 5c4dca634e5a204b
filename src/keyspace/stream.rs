//! A stream's value (`XADD`, `XREADGROUP`, ...): its entries by ID, its
//! consumer groups and their pending entries, as Redis 7 keeps them.
//!
//! Times (a pending entry's delivery, a consumer's last sight) are Unix
//! milliseconds as the log entry that set them stamped them, the same on
//! every node.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// An entry's ID: milliseconds and a sequence number, ordered as a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId { ms: u64::MAX, seq: u64::MAX };

    pub fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    /// The next ID up, if there is one.
    pub fn next(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (_, seq) if seq < u64::MAX => Some(StreamId::new(self.ms, seq + 1)),
            (ms, _) if ms < u64::MAX => Some(StreamId::new(ms + 1, 0)),
            _ => None,
        }
    }

    /// The next ID down, if there is one.
    pub fn prev(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (_, seq) if seq > 0 => Some(StreamId::new(self.ms, seq - 1)),
            (ms, _) if ms > 0 => Some(StreamId::new(ms - 1, u64::MAX)),
            _ => None,
        }
    }

    pub fn is_zero(self) -> bool {
        self == StreamId::MIN
    }
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// An entry delivered to a consumer of a group and not yet acknowledged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    pub consumer: Bytes,
    /// When it was last delivered (Unix ms).
    pub delivered_ms: u64,
    pub deliveries: u64,
}

/// A consumer of a group.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Consumer {
    /// The last time it read or claimed (Unix ms): `XINFO CONSUMERS` idle.
    pub seen_ms: u64,
    /// The last time it was given an entry (Unix ms): `inactive`.
    pub active_ms: Option<u64>,
    pub pending: BTreeSet<StreamId>,
}

/// A consumer group.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Group {
    pub last_delivered: StreamId,
    /// How many entries the group has read (Redis's `entries_read`), when
    /// known.
    pub entries_read: Option<u64>,
    pub pending: BTreeMap<StreamId, Pending>,
    pub consumers: BTreeMap<Bytes, Consumer>,
}

/// Entries in one of Redis's stream nodes at most (`stream-node-max-entries`).
pub const NODE_ENTRIES: u64 = 100;

/// Bytes in one of Redis's stream nodes at most (`stream-node-max-bytes`),
/// counted here as the fields' and values' bytes and a few per element.
pub const NODE_BYTES: u64 = 4096;

/// An entry of a stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamEntry {
    /// The node Redis would have put it in (see [`Stream::append`]): `~`
    /// trims whole nodes.
    pub node: u64,
    /// Its fields and values, alternating.
    pub fields: Vec<Bytes>,
}

/// A stream.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Stream {
    pub entries: BTreeMap<StreamId, StreamEntry>,
    /// The node entries are added to, and the entries (deleted ones too)
    /// and bytes it has had.
    pub tail_node: u64,
    pub tail_entries: u64,
    pub tail_bytes: u64,
    /// The highest ID ever added (or set by `XSETID`).
    pub last_id: StreamId,
    /// The highest ID deleted by `XDEL` (0-0 if none).
    pub max_deleted: StreamId,
    /// Entries ever added.
    pub added: u64,
    pub groups: BTreeMap<Bytes, Group>,
}

impl Stream {
    /// Adds an entry (its ID above every other), in the tail node while that
    /// node has room as Redis counts it (entries and bytes), else a new one.
    pub fn append(&mut self, id: StreamId, fields: Vec<Bytes>) {
        let bytes: u64 = fields.iter().map(|f| f.len() as u64 + 2).sum::<u64>() + 4;
        let tail_live = self.entries.values().next_back().is_some_and(|e| e.node == self.tail_node);
        if !tail_live || self.tail_entries >= NODE_ENTRIES || self.tail_bytes + bytes >= NODE_BYTES {
            self.tail_node += 1;
            self.tail_entries = 0;
            self.tail_bytes = 0;
        }
        self.tail_entries += 1;
        self.tail_bytes += bytes;
        self.entries.insert(id, StreamEntry { node: self.tail_node, fields });
    }

    /// The nodes holding entries.
    pub fn nodes(&self) -> usize {
        let mut nodes: Vec<u64> = self.entries.values().map(|e| e.node).collect();
        nodes.dedup();
        nodes.len()
    }

    pub fn first_id(&self) -> Option<StreamId> {
        self.entries.keys().next().copied()
    }

    /// The elements a command reading or rewriting the whole stream touches.
    pub fn weight(&self) -> usize {
        self.entries.len() + self.groups.values().map(|g| g.pending.len() + g.consumers.len()).sum::<usize>()
    }

    /// Whether an `XDEL` left a gap between `from` and the end of the stream
    /// (Redis's `streamRangeHasTombstones` with no end).
    pub fn has_tombstones_from(&self, from: StreamId) -> bool {
        let Some(first) = self.first_id() else { return false };
        if self.max_deleted.is_zero() || first > self.max_deleted {
            return false;
        }
        from <= self.max_deleted
    }

    /// How many entries came before and at `id` in the stream's history,
    /// where that can be told (Redis's
    /// `streamEstimateDistanceFromFirstEverEntry`).
    pub fn entries_up_to(&self, id: StreamId) -> Option<u64> {
        if self.added == 0 {
            return Some(0);
        }
        if self.entries.is_empty() && id <= self.last_id {
            return Some(self.added);
        }
        if id == self.last_id {
            return Some(self.added);
        }
        if id > self.last_id {
            return None;
        }
        let first = self.first_id()?;
        if self.max_deleted.is_zero() || self.max_deleted < first {
            let before_first = self.added.saturating_sub(self.entries.len() as u64);
            if id < first {
                return Some(before_first);
            }
            if id == first {
                return Some(before_first + 1);
            }
        }
        None
    }

    /// A group's lag: entries added that it has not read, when known.
    /// (Below 0 when `XGROUP SETID ... ENTRIESREAD` set more than were added,
    /// as Redis shows it.)
    pub fn lag(&self, group: &Group) -> Option<i64> {
        if self.added == 0 {
            return Some(0);
        }
        let lag = |read: u64| (self.added as i64).wrapping_sub(read as i64);
        if let Some(read) = group.entries_read.filter(|_| !self.has_tombstones_from(group.last_delivered)) {
            return Some(lag(read));
        }
        self.entries_up_to(group.last_delivered).map(lag)
    }

    /// The group has been given `id` (above its last delivered ID): its
    /// counters move on (Redis's `streamReplyWithRange` with a group).
    pub fn advance_group(&mut self, name: &Bytes, id: StreamId) {
        let known = self.groups.get(name).and_then(|g| g.entries_read);
        let tombstones = self.has_tombstones_from(id);
        let added = self.added;
        let estimate = self.entries_up_to(id);
        let Some(group) = self.groups.get_mut(name) else { return };
        if id <= group.last_delivered {
            return;
        }
        match known {
            Some(read) if !tombstones => group.entries_read = Some(read + 1),
            _ if added > 0 => group.entries_read = estimate,
            _ => {}
        }
        group.last_delivered = id;
    }
}
