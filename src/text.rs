//! Text that came from disk or the environment, made safe to print: a record's purpose, host
//! or writer, a directory entry's name, a path built from `TMPDIR`. Control characters (C0,
//! DEL, C1: escape sequences, newlines, carriage returns) and the invisible Unicode controls
//! that reorder text are shown as `\u{..}` escapes, so nothing read from a lock can move the
//! cursor, rewrite the screen or forge a line of output. And a time left, as messages say it.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::path::Path;

/// Whether `c` must not reach a terminal as itself.
fn hazardous(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every hazardous character escaped as `\u{..}` (and `\` itself left alone: the
/// escapes are for reading, not for parsing back).
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(hazardous) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if hazardous(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The UTC calendar date and clock time of `secs` seconds since the Unix epoch (negative
/// before it): (year, month, day, hour, minute, second), without a date crate (Howard
/// Hinnant's days-to-civil algorithm).
pub fn civil_utc(secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    // Each part is in its calendar range, so the narrowing never loses anything.
    let (h, m, s) = (rem / 3600, rem / 60 % 60, rem % 60);
    (year, month as u32, day as u32, h as u32, m as u32, s as u32)
}

/// A path for a message: lossy where it is not UTF-8, escaped where it holds hazards.
pub fn path(p: &Path) -> String {
    escape(&p.to_string_lossy()).into_owned()
}

/// A path as a shell word, for a command a message suggests: as it is when it holds only
/// characters no shell reads specially, else single-quoted (with `'` as `'\''`), and with
/// hazardous characters escaped (such a path cannot be pasted as it is, but it cannot touch
/// the terminal either).
pub fn shell_word(p: &Path) -> String {
    let s = p.to_string_lossy();
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@%=".contains(&b));
    if plain {
        return s.into_owned();
    }
    escape(&format!("'{}'", s.replace('\'', "'\\''"))).into_owned()
}

/// A time left, rounded up (never promise less than there is): `59 s`, `7200 s`, `250 ms`.
pub fn time_left(d: std::time::Duration) -> String {
    if d.as_secs() >= 1 {
        format!("{:.0} s", d.as_secs_f64().ceil())
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hazards_are_escaped_and_the_rest_kept() {
        assert_eq!(escape("sync é 日本"), "sync é 日本");
        assert_eq!(
            escape("\u{1b}[2J\n\r\u{7}\u{9b}\u{7f}x"),
            "\\u{1b}[2J\\u{a}\\u{d}\\u{7}\\u{9b}\\u{7f}x"
        );
        assert_eq!(escape("a\u{202e}b"), "a\\u{202e}b");
        // Line and paragraph separators end a line in some terminals and viewers.
        assert_eq!(escape("a\u{2028}b\u{2029}"), "a\\u{2028}b\\u{2029}");
    }

    #[test]
    fn shell_words_are_quoted() {
        assert_eq!(shell_word(Path::new("/srv/locks")), "/srv/locks");
        assert_eq!(shell_word(Path::new("/a b/c")), "'/a b/c'");
        assert_eq!(shell_word(Path::new("/it's")), "'/it'\\''s'");
        assert_eq!(shell_word(Path::new("/x\u{1b}y")), "'/x\\u{1b}y'");
    }

    proptest::proptest! {
        #[test]
        fn escaped_text_has_no_control_characters(s in ".*") {
            proptest::prop_assert!(!escape(&s).chars().any(hazardous));
        }
    }
}
