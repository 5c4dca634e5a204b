//! The hot locks of the last minute, for `LOCK.TOP`, in memory that does not
//! grow with the number of keys.
//!
//! Three rankings: refused attempts (a `LOCK.ACQUIRE` answered nil, or a
//! `SET ... NX` that found the key set), owners queued (`LOCK.ACQUIRE ...
//! WAIT` that had to wait) and time held (at each release or expiry). Each is
//! kept per 10-second period in a Space-Saving summary of [`CAPACITY`]
//! counters (Metwally, Agrawal, El Abbadi, 2005): a key that is hot in a
//! period is always among them, with its count overestimated by at most the
//! smallest count, which the reply leaves out. The last six periods make the
//! minute. Keys longer than [`MAX_KEY_BYTES`] are counted under their first
//! bytes.
//!
//! What a node counts is what it sees: denials of the clients connected to
//! it, and the waits and holds of every entry it applies (the same on every
//! node).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use bytes::Bytes;

/// Counters per ranking and period.
pub const CAPACITY: usize = 64;
/// The longest key name kept whole.
pub const MAX_KEY_BYTES: usize = 256;
const PERIOD_SECS: u64 = 10;
const PERIODS: usize = 6;

/// What a ranking counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranking {
    Denials = 0,
    Waits = 1,
    HoldMs = 2,
}

impl Ranking {
    pub const ALL: [Ranking; 3] = [Ranking::Denials, Ranking::Waits, Ranking::HoldMs];

    pub fn name(self) -> &'static str {
        match self {
            Ranking::Denials => "denials",
            Ranking::Waits => "waits",
            Ranking::HoldMs => "hold-ms",
        }
    }
}

#[derive(Debug, Clone)]
struct Counter {
    key: Bytes,
    count: u64,
    /// How much of `count` may belong to keys this counter replaced.
    error: u64,
}

/// A Space-Saving summary: the heavy hitters of a stream in `capacity` counters.
#[derive(Debug, Default)]
struct Summary {
    counters: Vec<Counter>,
    index: HashMap<Bytes, usize>,
}

impl Summary {
    fn add(&mut self, key: &[u8], weight: u64) {
        if let Some(&i) = self.index.get(key) {
            self.counters[i].count = self.counters[i].count.saturating_add(weight);
            return;
        }
        let key = Bytes::copy_from_slice(key);
        if self.counters.len() < CAPACITY {
            self.index.insert(key.clone(), self.counters.len());
            self.counters.push(Counter { key, count: weight, error: 0 });
            return;
        }
        // The smallest counter goes to the new key, which may have been
        // counted there before it was replaced: so much may be overcounted.
        let (i, min) = self.counters.iter().enumerate().map(|(i, c)| (i, c.count)).min_by_key(|&(_, c)| c).unwrap_or((0, 0));
        self.index.remove(&self.counters[i].key);
        self.index.insert(key.clone(), i);
        self.counters[i] = Counter { key, count: min.saturating_add(weight), error: min };
    }

    fn clear(&mut self) {
        self.counters.clear();
        self.index.clear();
    }
}

#[derive(Debug, Default)]
struct Period {
    /// Which 10-second period since the start this slot holds.
    number: u64,
    rankings: [Summary; 3],
}

/// The last minute's rankings.
#[derive(Debug)]
pub struct Top {
    start: Instant,
    periods: Vec<Period>,
}

impl Default for Top {
    fn default() -> Top {
        Top { start: Instant::now(), periods: (0..PERIODS).map(|_| Period::default()).collect() }
    }
}

impl Top {
    fn period_now(&self, now: Instant) -> u64 {
        // Numbered from 1, so that a slot never used (0) is never current.
        now.saturating_duration_since(self.start).as_secs() / PERIOD_SECS + 1
    }

    pub fn add_at(&mut self, now: Instant, ranking: Ranking, key: &[u8], weight: u64) {
        let number = self.period_now(now);
        let slot = &mut self.periods[(number % PERIODS as u64) as usize];
        if slot.number != number {
            slot.number = number;
            slot.rankings.iter_mut().for_each(Summary::clear);
        }
        let key = &key[..key.len().min(MAX_KEY_BYTES)];
        slot.rankings[ranking as usize].add(key, weight);
    }

    /// The `count` highest keys of `ranking` over the last minute, highest
    /// first (ties by key), each with its count less what may be another
    /// key's (a lower bound of its true count).
    pub fn top_at(&self, now: Instant, ranking: Ranking, count: usize) -> Vec<(Bytes, u64)> {
        let number = self.period_now(now);
        let mut sums: HashMap<&Bytes, u64> = HashMap::new();
        for period in &self.periods {
            if period.number == 0 || period.number + (PERIODS as u64) <= number {
                continue;
            }
            for c in &period.rankings[ranking as usize].counters {
                let sure = c.count - c.error;
                *sums.entry(&c.key).or_default() += sure;
            }
        }
        let mut out: Vec<(Bytes, u64)> = sums.into_iter().filter(|(_, n)| *n > 0).map(|(k, n)| (k.clone(), n)).collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out.truncate(count);
        out
    }

    /// Counters held, over every period and ranking (at most
    /// `PERIODS * 3 * CAPACITY`).
    #[cfg(test)]
    pub fn counters(&self) -> usize {
        self.periods.iter().flat_map(|p| p.rankings.iter()).map(|s| s.counters.len()).sum()
    }
}

fn global() -> &'static Mutex<Top> {
    static TOP: OnceLock<Mutex<Top>> = OnceLock::new();
    TOP.get_or_init(|| Mutex::new(Top::default()))
}

/// Counts `weight` for `key` in `ranking`, now.
pub fn record(ranking: Ranking, key: &[u8], weight: u64) {
    let mut top = global().lock().unwrap_or_else(|p| p.into_inner());
    top.add_at(Instant::now(), ranking, key, weight);
}

/// The `count` hottest keys of every ranking, over the last minute.
pub fn report(count: usize) -> Vec<(Ranking, Vec<(Bytes, u64)>)> {
    let top = global().lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    Ranking::ALL.iter().map(|&r| (r, top.top_at(now, r, count))).collect()
}

/// Counts a denial if `reply` refused the lock attempt on `key` (see
/// [`crate::commands::attempted_lock`]).
pub fn record_if_refused(key: Option<&Bytes>, reply: &crate::protocol::Reply) {
    if let (Some(key), crate::protocol::Reply::Nil) = (key, reply) {
        record(Ranking::Denials, key, 1);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_hot_key_tops_a_million_cold_ones_in_bounded_memory() {
        let mut top = Top::default();
        let t0 = top.start;
        for i in 0..1_000_000u64 {
            let now = t0 + Duration::from_micros(i * 50); // 50 s in all
            top.add_at(now, Ranking::HoldMs, format!("cold:{i}").as_bytes(), 5);
            if i % 100 == 0 {
                top.add_at(now, Ranking::HoldMs, b"hot", 40);
            }
            if i % 20 == 0 {
                top.add_at(now, Ranking::Denials, b"hot", 1);
            }
            if i % 50 == 0 {
                top.add_at(now, Ranking::Denials, b"warm", 1);
            }
            if i % 2 == 0 {
                top.add_at(now, Ranking::Denials, format!("once:{i}").as_bytes(), 1);
            }
        }
        assert!(top.counters() <= PERIODS * 3 * CAPACITY, "{} counters", top.counters());
        let now = t0 + Duration::from_secs(50);
        let holds = top.top_at(now, Ranking::HoldMs, 3);
        assert_eq!(holds[0].0, Bytes::from("hot"), "{holds:?}");
        assert!(holds[0].1 <= 10_000 * 40, "{holds:?}");
        let denials = top.top_at(now, Ranking::Denials, 2);
        assert_eq!(denials.iter().map(|d| d.0.clone()).collect::<Vec<_>>(), vec![Bytes::from("hot"), Bytes::from("warm")]);
        // A lower bound: never more than was counted (50,000 and 20,000).
        assert!(denials[0].1 <= 50_000 && denials[0].1 > 25_000, "{denials:?}");
        assert!(denials[1].1 <= 20_000 && denials[1].1 > 5_000, "{denials:?}");
        assert!(top.top_at(now, Ranking::Waits, 5).is_empty());
    }

    #[test]
    fn a_minute_later_it_is_forgotten() {
        let mut top = Top::default();
        let t0 = top.start;
        top.add_at(t0, Ranking::Waits, b"k", 3);
        top.add_at(t0 + Duration::from_secs(25), Ranking::Waits, b"k", 4);
        assert_eq!(top.top_at(t0 + Duration::from_secs(30), Ranking::Waits, 10), vec![(Bytes::from("k"), 7)]);
        assert_eq!(top.top_at(t0 + Duration::from_secs(65), Ranking::Waits, 10), vec![(Bytes::from("k"), 4)]);
        assert!(top.top_at(t0 + Duration::from_secs(95), Ranking::Waits, 10).is_empty());
        // A slot reused for a new period starts empty.
        top.add_at(t0 + Duration::from_secs(61), Ranking::Waits, b"j", 1);
        assert_eq!(top.top_at(t0 + Duration::from_secs(61), Ranking::Waits, 10), vec![(Bytes::from("k"), 4), (Bytes::from("j"), 1)]);
    }

    #[test]
    fn long_keys_are_counted_by_their_start() {
        let mut top = Top::default();
        let long = vec![b'x'; 10_000];
        top.add_at(top.start, Ranking::Denials, &long, 1);
        let got = top.top_at(top.start, Ranking::Denials, 1);
        assert_eq!(got[0].0.len(), MAX_KEY_BYTES);
    }
}
