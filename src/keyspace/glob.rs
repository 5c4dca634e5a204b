//! Redis's glob patterns (`KEYS`, `SCAN MATCH`, `PSUBSCRIBE`): `*`, `?`,
//! `[abc]`, `[^a-z]`, and `\` to escape.
//!
//! Matching backtracks to the last `*`, so a long pattern against a long text
//! can take |pattern| x |text| steps (Redis's own matcher can too). A client
//! chooses both, and a match may run inside a log entry on every node, so
//! each match gets a budget linear in the two lengths; a match that needs more
//! gives up ([`glob_match_within`] returns `None`). Ordinary patterns never
//! come near it.

/// Steps one match may take per byte of pattern and text.
const STEPS_PER_BYTE: u64 = 64;

/// Whether `text` matches `pattern`, as Redis's `stringmatchlen` decides; a
/// match that gives up counts as no match.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    glob_match_within(pattern, text) == Some(true)
}

/// Whether `text` matches `pattern`, or `None` if deciding it takes more than
/// the budget of a match (see the module doc).
pub fn glob_match_within(pattern: &[u8], text: &[u8]) -> Option<bool> {
    // Every element but `*` takes one byte of text: a text shorter than that
    // cannot match. This also keeps the budget linear in the text alone.
    if min_text_len(pattern) > text.len() {
        return Some(false);
    }
    let mut budget = STEPS_PER_BYTE * (pattern.len() + text.len()) as u64 + 1024;
    let mut spend = |steps: u64| -> Option<()> {
        budget = budget.checked_sub(steps)?;
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
    use super::{glob_match, glob_match_within};

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
}
