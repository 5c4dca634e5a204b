//! Redis's glob patterns (`KEYS`, `SCAN MATCH`, `PSUBSCRIBE`): `*`, `?`,
//! `[abc]`, `[^a-z]`, and `\` to escape.
//!
//! Matching backtracks to the last `*`, so a long pattern against a long text
//! can take |pattern| x |text| steps (Redis's own matcher can too). A client
//! chooses both, and a match may run inside a log entry on every node, so
//! matching is budgeted: one match gets steps linear in the two lengths
//! ([`glob_match_within`]); a command that matches one pattern against many
//! keys ([`Glob`]) gets steps linear in the pattern plus all the keys, so a
//! long pattern cannot cost its length once per key. A match that needs more
//! gives up (`None`). Ordinary patterns never come near it.

/// Steps a match may take per byte of pattern and text.
const STEPS_PER_BYTE: u64 = 64;
/// Steps granted per match on top of the bytes.
const STEPS_PER_MATCH: u64 = 1024;

/// Whether `text` matches `pattern`, as Redis's `stringmatchlen` decides; a
/// match that gives up counts as no match.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    glob_match_within(pattern, text) == Some(true)
}

/// Whether `text` matches `pattern`, or `None` if deciding it takes more than
/// the budget of a match (see the module doc).
pub fn glob_match_within(pattern: &[u8], text: &[u8]) -> Option<bool> {
    Glob::new(pattern).matches(text)
}

/// One pattern matched against many texts under one budget (see the module
/// doc); what depends on the pattern alone is worked out once.
pub struct Glob<'p> {
    pattern: &'p [u8],
    /// Every element but `*` takes one byte of text: a text shorter than
    /// this cannot match.
    min_len: usize,
    steps_left: u64,
}

impl<'p> Glob<'p> {
    pub fn new(pattern: &'p [u8]) -> Glob<'p> {
        let steps_left = STEPS_PER_BYTE.saturating_mul(pattern.len() as u64);
        Glob { pattern, min_len: min_text_len(pattern), steps_left }
    }

    /// Whether `text` matches, or `None` once the budget is spent (and from
    /// then on).
    pub fn matches(&mut self, text: &[u8]) -> Option<bool> {
        if self.min_len > text.len() {
            return Some(false);
        }
        let grant = STEPS_PER_BYTE.saturating_mul(text.len() as u64).saturating_add(STEPS_PER_MATCH);
        self.steps_left = self.steps_left.saturating_add(grant);
        match_budgeted(self.pattern, text, &mut self.steps_left)
    }
}

fn match_budgeted(pattern: &[u8], text: &[u8], budget: &mut u64) -> Option<bool> {
    let mut spend = |steps: u64| -> Option<()> {
        *budget = budget.checked_sub(steps)?;
        Some(())
    };
    let (mut p, mut t) = (0usize, 0usize);
    // Backtracking point for the last `*`: (pattern index after it, text index).
    let mut star: Option<(usize, usize)> = None;
    loop {
        spend(1)?;
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    while p < pattern.len() && pattern[p] == b'*' {
                        spend(1)?;
                        p += 1;
                    }
                    if p == pattern.len() {
                        return Some(true);
                    }
                    star = Some((p, t));
                    continue;
                }
                b'?' if t < text.len() => {
                    p += 1;
                    t += 1;
                    continue;
                }
                b'[' if t < text.len() => {
                    if let Some((matched, next)) = class_match(pattern, p, text[t]) {
                        spend((next - p) as u64)?;
                        if matched {
                            p = next;
                            t += 1;
                            continue;
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() && t < text.len() => {
                    if pattern[p + 1] == text[t] {
                        p += 2;
                        t += 1;
                        continue;
                    }
                }
                c if t < text.len() && c == text[t] && c != b'?' && c != b'[' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                _ => {}
            }
        } else if t == text.len() {
            return Some(true);
        }
        // Mismatch: let the last `*` swallow one more byte, if there is one.
        match star {
            Some((sp, st)) if st < text.len() => {
                star = Some((sp, st + 1));
                p = sp;
                t = st + 1;
            }
            _ => return Some(false),
        }
    }
}

/// How many bytes of text `pattern` needs at least: one per element other
/// than `*`.
fn min_text_len(pattern: &[u8]) -> usize {
    let (mut i, mut n) = (0, 0);
    while i < pattern.len() {
        match pattern[i] {
            b'*' => i += 1,
            b'[' => {
                n += 1;
                i = class_match(pattern, i, 0).map_or(pattern.len(), |(_, next)| next);
            }
            b'\\' if i + 1 < pattern.len() => {
                n += 1;
                i += 2;
            }
            _ => {
                n += 1;
                i += 1;
            }
        }
    }
    n
}

/// Matches `c` against the class starting at `pattern[start] == b'['`.
/// Returns (matched, index after the class).
fn class_match(pattern: &[u8], start: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    loop {
        match pattern.get(i) {
            // Unterminated class: Redis treats the end of pattern as its end.
            None => break,
            Some(b']') => {
                i += 1;
                break;
            }
            Some(b'\\') if i + 1 < pattern.len() => {
                matched |= pattern[i + 1] == c;
                i += 2;
            }
            Some(&lo) if pattern.get(i + 1) == Some(&b'-') && i + 2 < pattern.len() && pattern[i + 2] != b']' => {
                let hi = pattern[i + 2];
                let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
                matched |= (lo..=hi).contains(&c);
                i += 3;
            }
            Some(&x) => {
                matched |= x == c;
                i += 1;
            }
        }
    }
    Some((matched != negate, i))
}

#[cfg(test)]
mod tests {
    use super::{glob_match, glob_match_within, Glob};

    #[test]
    fn hostile_patterns_give_up_instead_of_running_for_hours() {
        let text = vec![b'a'; 1 << 20];
        let mut pattern = b"*".to_vec();
        pattern.extend(std::iter::repeat_n(b'a', 1 << 19));
        pattern.push(b'b');
        assert_eq!(glob_match_within(&pattern, &text), None);
        // A class scanned at every step counts its length.
        let mut class = b"*[".to_vec();
        class.extend(std::iter::repeat_n(b'x', 1 << 19));
        class.extend(b"]b");
        assert_eq!(glob_match_within(&class, &text), None);
        // Too long a pattern for the text is decided at once.
        assert_eq!(glob_match_within(&pattern, b"short"), Some(false));
        // Ordinary patterns over long texts are decided.
        assert_eq!(glob_match_within(b"*a*b", &text), Some(false));
        assert_eq!(glob_match_within(b"a*a", &text), Some(true));
        assert_eq!(glob_match_within(b"*[a-c]?", &text), Some(true));
    }

    #[test]
    fn redis_glob_cases() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "anything", true),
            ("*", "", true),
            ("h?llo", "hello", true),
            ("h?llo", "hllo", false),
            ("h*llo", "heeeello", true),
            ("h[ae]llo", "hallo", true),
            ("h[ae]llo", "hillo", false),
            ("h[^e]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("h\\*llo", "h*llo", true),
            ("h\\*llo", "hello", false),
            ("lock:*:a", "lock:x:y:a", true),
            ("lock:*:a", "lock:x:y:b", false),
            ("a*b*c", "abbbc", true),
            ("", "", true),
            ("", "a", false),
        ];
        for (p, t, want) in cases {
            assert_eq!(glob_match(p.as_bytes(), t.as_bytes()), *want, "{p} vs {t}");
        }
    }

    /// One command's budget covers the pattern once, not once per key: a
    /// pattern that costs its length at every key (a long run of `*`) gives
    /// up after a few keys, while ordinary patterns match any number.
    #[test]
    fn a_long_pattern_does_not_cost_its_length_per_key() {
        let mut pattern = vec![b'*'; 1 << 20];
        pattern.push(b'z');
        let mut glob = Glob::new(&pattern);
        let gave_up_at = (0..1_000_000).position(|_| glob.matches(b"key:000000").is_none());
        assert!(gave_up_at.is_some_and(|n| n < 1000), "gave up at {gave_up_at:?}");
        let mut star = Glob::new(b"key:*");
        assert!((0..100_000).all(|i| star.matches(format!("key:{i:06}").as_bytes()) == Some(true)));
    }
}
