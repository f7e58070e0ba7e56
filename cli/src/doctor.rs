//! `dirlock doctor`: whether a directory can host locks, and which guarantees hold there.

use crate::args::Place;
use crate::say::{emit, Failure};
use crate::select::open;
use dirlock::text::{escape, path as shown};
use dirlock::{Diagnosis, Finding};
use serde_json::json;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// `dirlock doctor [DIR]`.
pub(crate) fn doctor(dir: Option<PathBuf>, json: bool) -> Result<ExitCode, Failure> {
    let (dir, default) = match dir {
        Some(d) => (d, false),
        None => {
            let place = Place {
                app: None,
                dir: None,
            };
            (open(&place)?.dir().to_owned(), true)
        }
    };
    // Your lock directory before its first lock: its filesystem is that of the nearest
    // directory above it, and the first lock makes it private to you.
    let mut examined = dir.clone();
    if default {
        while !examined.exists() {
            match examined.parent() {
                Some(p) if !p.as_os_str().is_empty() => examined = p.to_owned(),
                _ => break,
            }
        }
    }
    let mut found = dirlock::diagnose(&examined)?;
    let not_yet = examined != dir;
    if not_yet {
        found.private = Finding::Holds;
    }
    // Locks cannot live where others may write or where nothing can be made.
    let cannot_live =
        matches!(found.private, Finding::Lost(_)) || matches!(found.writable, Finding::Lost(_));
    let code = if cannot_live {
        1
    } else if found.all_hold() {
        0
    } else {
        2
    };
    let text = if json {
        as_json(&dir, &found, not_yet, cannot_live)
    } else {
        describe(&dir, &found, not_yet, cannot_live)
    };
    emit(&text)?;
    Ok(ExitCode::from(code))
}

/// The findings for programs (`--json`).
fn as_json(dir: &std::path::Path, found: &Diagnosis, not_yet: bool, cannot_live: bool) -> String {
    let finding = |f: &Finding| match f {
        Finding::Holds => json!({ "state": "holds", "why": null }),
        Finding::Lost(why) => json!({ "state": "lost", "why": why }),
        Finding::Untold(why) => json!({ "state": "untold", "why": why }),
        _ => json!({ "state": "untold", "why": null }),
    };
    let mut value = json!({
        "schema": 1,
        "path": null,
        "exists": !not_yet,
        "filesystem": found.filesystem,
        "usable": !cannot_live,
        "shared_with_gid": found.shared_with,
        "private": finding(&found.private),
        "writable": finding(&found.writable),
        "exclusive_rename": finding(&found.exclusive_rename),
        "kernel_proof": finding(&found.kernel_proof),
        "local": finding(&found.local),
    });
    crate::status::json_path(&mut value, dir);
    format!("{value}\n")
}

fn describe(dir: &std::path::Path, found: &Diagnosis, not_yet: bool, cannot_live: bool) -> String {
    let mut out = String::new();
    let head = if cannot_live {
        "locks cannot live here"
    } else if found.all_hold() {
        "locks can live here, and every guarantee holds"
    } else {
        "locks can live here, with a guarantee lost (below)"
    };
    let _ = writeln!(out, "{}: {head}", shown(dir));
    if not_yet {
        let _ = writeln!(
            out,
            "  (it does not exist yet: the first lock makes it, private to you; what follows is\n  \
             its filesystem, tried in {})",
            shown(&found.path)
        );
    }
    let _ = writeln!(
        out,
        "  {:<29} {}",
        "filesystem:",
        found
            .filesystem
            .as_deref()
            .map_or_else(|| "not told by this system".into(), escape)
    );
    if let Some(gid) = found.shared_with {
        let _ = writeln!(
            out,
            "  {:<29} group {gid}: its members take, wait for and take over each other's locks",
            "shared with:"
        );
    }
    for (label, finding) in [
        (
            if found.shared_with.is_some() {
                "only the group can write it"
            } else {
                "only you can write it"
            },
            &found.private,
        ),
        ("you can make locks in it", &found.writable),
        ("renames never replace", &found.exclusive_rename),
        ("crashed holders seen at once", &found.kernel_proof),
        ("this machine's own", &found.local),
    ] {
        let said = match finding {
            Finding::Holds => "yes".to_owned(),
            Finding::Lost(why) => format!("no: {}", escape(why)),
            Finding::Untold(why) => format!("cannot tell: {}", escape(why)),
            _ => "cannot tell".to_owned(),
        };
        let _ = writeln!(out, "  {:<29} {said}", format!("{label}:"));
    }
    out
}
