//! Redis's glob patterns (`KEYS`, `SCAN MATCH`, `PSUBSCRIBE`): `*`, `?`,
//! `[abc]`, `[^a-z]`, and `\` to escape.

/// Whether `text` matches `pattern`, as Redis's `stringmatchlen` decides.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    // Backtracking point for the last `*`: (pattern index after it, text index).
    let mut star: Option<(usize, usize)> = None;
    loop {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    while p < pattern.len() && pattern[p] == b'*' {
                        p += 1;
                    }
                    if p == pattern.len() {
                        return true;
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
            return true;
        }
        // Mismatch: let the last `*` swallow one more byte, if there is one.
        match star {
            Some((sp, st)) if st < text.len() => {
                star = Some((sp, st + 1));
                p = sp;
                t = st + 1;
            }
            _ => return false,
        }
    }
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
    use super::glob_match;

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
