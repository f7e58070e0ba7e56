//! `dirlock status`: a lock's state for people (one field per line) and for programs (JSON).

use crate::args::{Selector, EX_TEMPFAIL};
use crate::say::{emit, Failure};
use crate::select::{open, select};
use dirlock::text::{escape, path as shown};
use dirlock::{GuardState, State, Status};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) fn ago(t: SystemTime) -> String {
    match SystemTime::now().duration_since(t) {
        Ok(d) => format!("{} s ago", d.as_secs()),
        Err(e) => format!("{} s in the future", e.duration().as_secs()),
    }
}

pub(crate) fn unix_ms(t: SystemTime) -> Option<u64> {
    t.duration_since(UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as u64)
}

pub(crate) fn status(
    sel: &Selector,
    all: bool,
    quiet: bool,
    json: bool,
    grace: Option<Duration>,
) -> Result<ExitCode, Failure> {
    let statuses = if all {
        open(&sel.place)?.statuses()?
    } else {
        let mut req = select(sel)?;
        if let Some(g) = grace {
            req = req.grace(g);
        }
        vec![req.status()?]
    };
    let text = if json {
        let value = if all {
            json!({ "schema": 1, "locks": statuses.iter().map(to_json).collect::<Vec<_>>() })
        } else {
            to_json(&statuses[0])
        };
        format!("{value}\n")
    } else if statuses.is_empty() {
        "no locks are held or left over\n".to_owned()
    } else {
        statuses.iter().map(describe).collect::<Vec<_>>().join("\n")
    };
    if !quiet {
        emit(&text)?;
    }
    // One lock: whether the next acquisition would get it.
    let takeable = |st: &Status| match &st.state {
        State::Free | State::DeadByProof => true,
        State::DeadByEvidence { remaining } => remaining.is_zero(),
        _ => false,
    };
    if !all && !statuses.iter().all(takeable) {
        return Ok(ExitCode::from(EX_TEMPFAIL));
    }
    Ok(ExitCode::SUCCESS)
}

/// A path in JSON: `path` is always a string (lossy where the path is not Unicode); a path
/// that is not also gets its exact bytes in `path_bytes` (Unix) or its UTF-16 code units in
/// `path_utf16` (Windows).
pub(crate) fn json_path(value: &mut Value, path: &Path) {
    value["path"] = json!(path.to_string_lossy());
    if path.to_str().is_none() {
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            value["path_bytes"] = json!(path.as_os_str().as_bytes());
        }
        #[cfg(windows)]
        {
            use std::os::windows::ffi::OsStrExt;
            value["path_utf16"] = json!(path.as_os_str().encode_wide().collect::<Vec<u16>>());
        }
    }
}

pub(crate) fn to_json(st: &Status) -> Value {
    let remaining = match &st.state {
        State::DeadByEvidence { remaining } => Some(remaining.as_millis() as u64),
        _ => None,
    };
    let guard = match &st.guard {
        GuardState::Leftover { marked, age } => {
            json!({ "state": st.guard.name(), "marked": marked, "age_ms": age.as_millis() as u64 })
        }
        g => json!({ "state": g.name(), "marked": null, "age_ms": null }),
    };
    let mut value = json!({
        "schema": 1,
        "path": null,
        "name": st.name,
        "state": st.state.name(),
        "reason": st.reason,
        "since_unix_ms": st.since.and_then(unix_ms),
        "grace_remaining_ms": remaining,
        "owner": st.owner,
        "guard": guard,
        "candidates": st.candidates.iter().map(|c| json!({
            "name": c.name, "age_ms": c.age.as_millis() as u64, "creator_alive": c.creator_alive,
        })).collect::<Vec<_>>(),
        "tombstones": st.tombstones.iter().map(|t| json!({
            "name": t.name, "age_ms": t.age.as_millis() as u64,
        })).collect::<Vec<_>>(),
    });
    json_path(&mut value, &st.path);
    value
}

/// A lock's status for people: one field per line, everything read from disk escaped.
pub(crate) fn describe(st: &Status) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "lock:       {}", shown(&st.path));
    let state = match &st.state {
        State::DeadByEvidence { remaining } if remaining.is_zero() => {
            "dead by evidence (past the grace period: the next acquisition reclaims it)".to_owned()
        }
        State::DeadByEvidence { remaining } => format!(
            "dead by evidence ({} s left in the grace period)",
            remaining.as_secs_f64().ceil()
        ),
        State::DeadByProof => "dead by proof (the next acquisition reclaims it at once)".to_owned(),
        State::Malformed { .. } => "malformed (never removed automatically)".to_owned(),
        s => s.name().to_owned(),
    };
    let _ = writeln!(out, "state:      {state}");
    if let Some(r) = &st.reason {
        let _ = writeln!(out, "why:        {}", escape(r));
    }
    if let Some(o) = &st.owner {
        let mut line = o.to_string();
        if let Some(t) = st.since {
            let _ = write!(line, ", since {}", ago(t));
        }
        line.push_str(match o.beacon {
            Some(true) => ", holds a beacon",
            Some(false) => ", no beacon (judged by pid)",
            None => ", reference-format record (judged by pid)",
        });
        if let Some(w) = &o.writer {
            let _ = write!(line, ", written by {}", escape(w));
        }
        if let Some(os) = &o.os {
            let _ = write!(line, " on {}", escape(os));
        }
        let _ = writeln!(out, "owner:      {line}");
    }
    let guard = match &st.guard {
        GuardState::Leftover { marked: true, age } => format!(
            "left by a crashed reclaimer {} s ago (reused at once by the next one)",
            age.as_secs()
        ),
        GuardState::Leftover { marked: false, age } => format!(
            "left by another implementation {} s ago (respected for the grace period)",
            age.as_secs()
        ),
        GuardState::Busy => "busy: a process is reclaiming the lock".to_owned(),
        g => g.name().to_owned(),
    };
    let _ = writeln!(out, "guard:      {guard}");
    let list = |v: &[dirlock::Leftover]| {
        if v.is_empty() {
            "none".to_owned()
        } else {
            v.iter()
                .map(|l| {
                    let who = match l.creator_alive {
                        Some(true) => ", creator alive",
                        Some(false) => ", creator gone",
                        None => "",
                    };
                    format!("{} ({} s old{who})", escape(&l.name), l.age.as_secs())
                })
                .collect::<Vec<_>>()
                .join("\n            ")
        }
    };
    let _ = writeln!(out, "candidates: {}", list(&st.candidates));
    let _ = writeln!(out, "tombstones: {}", list(&st.tombstones));
    out
}
