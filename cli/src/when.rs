//! Times as people read them: "14:02:33 (2 min ago)", in local time.

use crate::sys;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A span in the largest units that say it: `4 s`, `2 min`, `3 h 5 min`, `2 days`.
pub(crate) fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{:.1} s", d.as_secs_f64()),
        1..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s / 60),
        3600..=86_399 if s % 3600 / 60 == 0 => format!("{} h", s / 3600),
        3600..=86_399 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        86_400..=172_799 => "1 day".to_owned(),
        _ => format!("{} days", s / 86_400),
    }
}

/// How long ago `t` was: `just now`, `2 min ago`, or, for a time ahead of this clock, `in 5
/// min, by a clock ahead of this one`.
pub(crate) fn ago(t: SystemTime, now: SystemTime) -> String {
    match now.duration_since(t) {
        Ok(d) if d < Duration::from_secs(1) => "just now".to_owned(),
        Ok(d) => format!("{} ago", span(d)),
        Err(e) if e.duration() < Duration::from_secs(1) => "just now".to_owned(),
        Err(e) => format!("in {}, by a clock ahead of this one", span(e.duration())),
    }
}

/// When `t` was, in local time, with how long ago: `14:02:33 (2 min ago)` today, else
/// `2026-11-30 14:02 (1 day ago)`.
pub(crate) fn when(t: SystemTime) -> String {
    let now = SystemTime::now();
    let clock = |t: SystemTime| {
        let secs = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).ok()?,
            Err(e) => i64::try_from(e.duration().as_secs()).ok().map(|s| -s)?,
        };
        sys::local_time(secs)
    };
    let at = match (clock(t), clock(now)) {
        (Some((y, mo, d, h, mi, s)), Some((ny, nmo, nd, ..))) if (y, mo, d) == (ny, nmo, nd) => {
            format!("{h:02}:{mi:02}:{s:02}{}", sys::ZONE)
        }
        (Some((y, mo, d, h, mi, _)), _) => {
            format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}{}", sys::ZONE)
        }
        (None, _) => return ago(t, now),
    };
    format!("{at} ({})", ago(t, now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_as_people_say_them() {
        let s = Duration::from_secs;
        assert_eq!(span(Duration::from_millis(300)), "0.3 s");
        assert_eq!(span(s(4)), "4 s");
        assert_eq!(span(s(125)), "2 min");
        assert_eq!(span(s(7200)), "2 h");
        assert_eq!(span(s(3 * 3600 + 5 * 60)), "3 h 5 min");
        assert_eq!(span(s(90_000)), "1 day");
        assert_eq!(span(s(3 * 86_400)), "3 days");
        let now = UNIX_EPOCH + s(1_000_000);
        assert_eq!(ago(now, now), "just now");
        assert_eq!(ago(now - s(120), now), "2 min ago");
        assert!(ago(now + s(300), now).starts_with("in 5 min"));
    }

    #[test]
    fn times_today_are_clock_times_and_older_ones_dates() {
        let now = SystemTime::now();
        let today = when(now - Duration::from_secs(2));
        assert!(today.ends_with("(2 s ago)"), "{today}");
        assert_eq!(today.as_bytes()[2], b':', "{today}");
        let old = when(now - Duration::from_secs(10 * 86_400));
        assert!(old.ends_with("(10 days ago)"), "{old}");
        assert_eq!(old.as_bytes()[4], b'-', "{old}");
    }
}
