//! `dirlock status`: a lock's state for people (one field per line) and for programs (JSON).

use crate::args::{Selector, EX_TEMPFAIL};
use crate::say::{emit, Failure};
use crate::select::{open, select};
use crate::when::{span, when};
use dirlock::text::{escape, path as shown};
use dirlock::{GuardState, Liveness, Party, State, Status};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) fn unix_ms(t: SystemTime) -> Option<u64> {
    t.duration_since(UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as u64)
}

/// How `status` speaks.
pub(crate) struct Speech {
    pub(crate) quiet: bool,
    pub(crate) json: bool,
    pub(crate) verbose: bool,
}

pub(crate) fn status(
    sel: &Selector,
    all: bool,
    speech: &Speech,
    grace: Option<Duration>,
) -> Result<ExitCode, Failure> {
    let Speech {
        quiet,
        json,
        verbose,
    } = *speech;
    let mut what = None;
    let statuses = if all {
        open(&sel.place)?.statuses()?
    } else {
        let mut req = select(sel)?;
        if let Some(g) = grace {
            req = req.grace(g);
        }
        what = Some(req.resource()?);
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
        statuses
            .iter()
            .map(|st| describe(st, what.as_deref(), verbose))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if !quiet {
        emit(&text)?;
    }
    // One lock: whether the next acquisition would get it.
    if !all && !statuses.iter().all(Status::takeable) {
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
        GuardState::Unsafe { path, problem } => json!({
            "state": st.guard.name(), "marked": null, "age_ms": null,
            "path": path.to_string_lossy(), "problem": problem
        }),
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
        "shared": st.shared,
        "readers": st.readers.iter().map(party_json).collect::<Vec<_>>(),
        "writers": st.writers.iter().map(party_json).collect::<Vec<_>>(),
        "queue": st.queue.iter().map(party_json).collect::<Vec<_>>(),
        "departed": st.departed.iter().map(party_json).collect::<Vec<_>>(),
        "stranger": st.stranger,
    });
    json_path(&mut value, &st.path);
    value
}

/// A stable name for a judgement: `live`, `unknown`, `dead-by-proof`, `dead-by-evidence` (as
/// a lock's `state` names them).
fn liveness_name(l: Liveness) -> &'static str {
    match l {
        Liveness::Live => "live",
        Liveness::DeadByProof => "dead-by-proof",
        Liveness::DeadByEvidence => "dead-by-evidence",
        _ => "unknown",
    }
}

/// A reader or waiting writer of a shared lock, for programs: who (its pid and purpose, and
/// its whole record), since when, and how it was judged.
fn party_json(p: &Party) -> Value {
    let o = p.owner.as_ref();
    json!({
        "role": p.role.name(),
        "entry": p.entry,
        "pid": o.map(|o| o.pid),
        "purpose": o.and_then(|o| o.purpose.as_deref()),
        "host": o.and_then(|o| o.host.as_deref()),
        "since_unix_ms": p.since.and_then(unix_ms),
        "state": liveness_name(p.liveness),
        "reason": p.reason,
        "owner": o,
    })
}

/// What a lock found in a listing is for, from its name alone: `named lock deploy`, or, for
/// the hashed names of repository and setup locks, whose lock it is with the name.
pub(crate) fn words_for(name: &str) -> String {
    let hashed = |prefix: &str| {
        name.strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(".lock"))
            .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    if hashed("repository-") {
        format!("a repository's lock ({name})")
    } else if hashed("global-setup-") {
        format!("an account's setup lock ({name})")
    } else if hashed("path-") {
        format!("a path's lock ({name})")
    } else {
        format!(
            "named lock {}",
            escape(name.strip_suffix(".lock").unwrap_or(name))
        )
    }
}

/// A lock's status for people: what the lock is for, whether it can be taken and who holds
/// it since when, in plain words; `verbose` adds the protocol's details, one per line
/// (everything read from disk escaped).
pub(crate) fn describe(st: &Status, what: Option<&str>, verbose: bool) -> String {
    let what = what.map_or_else(|| words_for(&st.name), str::to_owned);
    let mut out = String::new();
    let _ = writeln!(out, "{}", summary(st, &what));
    parties(st, &mut out);
    let _ = writeln!(out, "  path: {}", shown(&st.path));
    if verbose {
        details(st, &mut out);
    }
    out
}

/// Why no run can take over a lock whose holder has ended (the library's takeability says so,
/// for the reclaim guard's sake), in words; `None` when one can, or the holder has not ended.
fn takeover_blocked(st: &Status) -> Option<String> {
    let ended = matches!(st.state, State::DeadByProof)
        || matches!(st.state, State::DeadByEvidence { remaining } if remaining.is_zero());
    if !ended || st.takeable() {
        return None;
    }
    Some(match &st.guard {
        GuardState::Unsafe { path, problem } => format!(
            "no run can take it over: {} ({}); remove that by hand once no process uses this lock",
            shown(path),
            escape(problem)
        ),
        GuardState::Leftover { .. } => {
            "another program's interrupted takeover is respected for a while".to_owned()
        }
        _ => "another process is taking it over right now".to_owned(),
    })
}

/// The first line of [`describe`]: whether `what` can be taken, and who holds it since when.
fn summary(st: &Status, what: &str) -> String {
    let holder = || {
        let mut h = st.owner.as_ref().map_or_else(
            || "an unknown process".to_owned(),
            |o| crate::say::held_by(o, st.owner_exited),
        );
        if let Some(t) = st.since {
            let _ = write!(h, " since {}", when(t));
        }
        h
    };
    if let Some(why) = takeover_blocked(st) {
        return format!("{what} was held by {}, which has ended: {why}", holder());
    }
    if let Some(line) = shared_summary(st, what) {
        return line;
    }
    match &st.state {
        State::Free => format!("{what} is free"),
        State::Held => format!("{what} is held by {}", holder()),
        State::DeadByProof => format!(
            "{what} was held by {}, which ended without releasing it: the next run takes it over at once",
            holder()
        ),
        State::DeadByEvidence { remaining } if remaining.is_zero() => format!(
            "{what} was held by {}, which seems to have ended: the next run takes it over",
            holder()
        ),
        State::DeadByEvidence { remaining } => format!(
            "{what} was held by {}, which seems to have ended: it can be taken over in {} (or now with `dirlock unlock`)",
            holder(),
            span(*remaining)
        ),
        State::Unknown => format!(
            "{what} is held by {}, which cannot be checked from here{}: it is never taken over automatically: check that process where it ran, and once it is gone remove the lock by hand",
            holder(),
            st.reason
                .as_deref()
                .map(|r| format!(" ({})", escape(r)))
                .unwrap_or_default()
        ),
        State::Malformed { .. } if st.stranger.is_some() => format!(
            "{what} is damaged{}, and holds {}, which a lock never holds: it may be a directory of yours rather than a lock; look at what it holds, and if it is a lock, remove it by hand",
            st.reason
                .as_deref()
                .map(|r| format!(" ({})", escape(r)))
                .unwrap_or_default(),
            escape(st.stranger.as_deref().unwrap_or_default())
        ),
        State::Malformed { .. } => format!(
            "{what} is damaged{}: it is never taken over automatically; once no process uses it, remove it with `dirlock unlock --force`",
            st.reason
                .as_deref()
                .map(|r| format!(" ({})", escape(r)))
                .unwrap_or_default()
        ),
        s => format!("{what}: {}", s.name()),
    }
}

/// The first line for a shared lock, where it says more than an exclusive one's: how many
/// processes read it and whether one waits to write it, or that its readers all ended.
fn shared_summary(st: &Status, what: &str) -> Option<String> {
    if !st.shared {
        return None;
    }
    let mut line = match st.state {
        State::Held => match processes(&st.readers) {
            0 => format!("{what} is held by readers coming in or leaving"),
            1 => format!("{what} is read by 1 process"),
            n => format!("{what} is read by {n} processes"),
        },
        State::DeadByProof => {
            return Some(format!(
                "{what} was read by processes that all ended without releasing it: the next run takes it over at once"
            ))
        }
        _ => return None,
    };
    match st.writers.len() {
        0 => {}
        1 => line.push_str("; a process waits to write it, and new readers wait for it"),
        n => {
            let _ = write!(
                line,
                "; {n} processes wait to write it, and new readers wait for them"
            );
        }
    }
    Some(line)
}

/// How many processes the readers are (threads of one process each read with a record of
/// their own, naming the same pid).
fn processes(readers: &[Party]) -> usize {
    let mut seen = std::collections::BTreeSet::new();
    readers
        .iter()
        .filter(|p| {
            p.owner
                .as_ref()
                .is_none_or(|o| seen.insert((o.pid, o.host.clone())))
        })
        .count()
}

/// A shared lock's readers, waiting writers, the queue and those that ended without leaving,
/// a line each, in words (under [`describe`]'s first line): a writer in the queue once, in its
/// place there.
fn parties(st: &Status, out: &mut String) {
    fn token(p: &Party) -> Option<&str> {
        p.owner.as_ref().map(|o| o.token.as_str())
    }
    let among = |list: &[Party], p: &Party| {
        token(p).is_some_and(|t| list.iter().any(|q| token(q) == Some(t)))
    };
    let lines = st.readers.iter().map(|p| ("reader", p));
    let lines = lines.chain(
        st.writers
            .iter()
            .filter(|p| !among(&st.queue, p))
            .map(|p| ("waiting to write", p)),
    );
    let lines = lines.chain(st.queue.iter().map(|p| match among(&st.writers, p) {
        true => ("waiting to write", p),
        false if p.owner.is_none() => ("in the queue", p),
        false => ("waiting", p),
    }));
    let lines = lines.chain(st.departed.iter().map(|p| match p.role {
        dirlock::Role::Writer => ("ended while waiting to write", p),
        dirlock::Role::Queued => ("ended while waiting", p),
        _ => ("ended without releasing it", p),
    }));
    for (label, p) in lines {
        let _ = writeln!(out, "  {label}: {}", party_words(p));
    }
}

/// Who a reader or writer is, since when: `pid 42 on host h (purpose: sync) since 14:02:33
/// (2 s ago)`, and whether it cannot be checked from here.
fn party_words(p: &Party) -> String {
    let mut words = match (&p.owner, p.liveness) {
        (Some(o), _) => o.to_string(),
        // Something in the queue that cannot be read, named (runs pass it over).
        (None, _) if p.role == dirlock::Role::Queued => return escape(&p.reason).into_owned(),
        (None, Liveness::Live) => "a process coming in (its record is not written yet)".into(),
        (None, _) => "a process whose record cannot be read".into(),
    };
    if let Some(t) = p.since {
        let _ = write!(words, " since {}", when(t));
    }
    if p.liveness == Liveness::Unknown {
        words.push_str(", which cannot be checked from here");
    }
    words
}

/// The protocol's details of [`describe`]'s verbose form, one per line.
fn details(st: &Status, out: &mut String) {
    let _ = writeln!(out, "  state:      {}", st.state.name());
    if let Some(r) = &st.reason {
        let _ = writeln!(out, "  why:        {}", escape(r));
    }
    if let Some(o) = &st.owner {
        let _ = writeln!(out, "  owner:      {}", owner_line(o));
    }
    if st.shared {
        let _ = writeln!(out, "  shared:     yes (a read lock)");
        let _ = writeln!(out, "  readers:    {}", party_details(&st.readers));
        let _ = writeln!(out, "  writers:    {}", party_details(&st.writers));
        let _ = writeln!(out, "  departed:   {}", party_details(&st.departed));
    }
    let _ = writeln!(out, "  queue:      {}", party_details(&st.queue));
    let _ = writeln!(out, "  guard:      {}", guard_words(&st.guard));
    let _ = writeln!(out, "  candidates: {}", leftovers(&st.candidates));
    let _ = writeln!(out, "  tombstones: {}", leftovers(&st.tombstones));
}

/// Readers or writers of a shared lock, as [`details`] shows them: each entry, its record
/// and its judgement.
fn party_details(v: &[Party]) -> String {
    if v.is_empty() {
        return "none".to_owned();
    }
    v.iter()
        .map(|p| {
            let who = p
                .owner
                .as_ref()
                .map_or_else(|| "no record".into(), owner_line);
            format!(
                "{}: {who}; {}: {}",
                escape(&p.entry),
                liveness_name(p.liveness),
                escape(&p.reason)
            )
        })
        .collect::<Vec<_>>()
        .join("\n              ")
}

/// The owner record, as [`details`] shows it.
fn owner_line(o: &dirlock::Owner) -> String {
    let mut line = format!("pid {}, token {}", o.pid, escape(&o.token));
    line.push_str(match (o.is_shared(), o.beacon) {
        (true, _) => ", shared: names one reader (judged by its readers' beacons)",
        (false, Some(true)) => ", judged by its beacon",
        (false, Some(false)) => ", no beacon (judged by its pid)",
        (false, None) => ", reference-format record (judged by its pid)",
    });
    if let Some(w) = &o.writer {
        let _ = write!(line, ", written by {}", escape(w));
    }
    if let Some(os) = &o.os {
        let _ = write!(line, " on {}", escape(os));
    }
    line
}

/// The reclaim guard, as [`details`] shows it.
fn guard_words(guard: &GuardState) -> String {
    match guard {
        GuardState::Leftover { marked: true, age } => format!(
            "left by a crashed reclaimer {} ago (reused at once by the next one)",
            span(*age)
        ),
        GuardState::Leftover { marked: false, age } => format!(
            "left by another implementation {} ago (respected for the grace period)",
            span(*age)
        ),
        GuardState::Busy => "busy: a process is reclaiming the lock".to_owned(),
        GuardState::Unsafe { path, problem } => {
            format!("unsafe, never used: {} ({})", shown(path), escape(problem))
        }
        g => g.name().to_owned(),
    }
}

/// Leftover candidates or tombstones, as [`details`] shows them.
fn leftovers(v: &[dirlock::Leftover]) -> String {
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
                format!("{} ({} old{who})", escape(&l.name), span(l.age))
            })
            .collect::<Vec<_>>()
            .join("\n              ")
    }
}
