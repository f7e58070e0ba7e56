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
    let lost_private = !found.private.holds();
    let code = if lost_private {
        1
    } else if found.all_hold() {
        0
    } else {
        2
    };
    let text = if json {
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
            "usable": !lost_private,
            "private": finding(&found.private),
            "exclusive_rename": finding(&found.exclusive_rename),
            "kernel_proof": finding(&found.kernel_proof),
            "local": finding(&found.local),
        });
        crate::status::json_path(&mut value, &dir);
        format!("{value}\n")
    } else {
        describe(&dir, &found, not_yet)
    };
    emit(&text)?;
    Ok(ExitCode::from(code))
}

fn describe(dir: &std::path::Path, found: &Diagnosis, not_yet: bool) -> String {
    let mut out = String::new();
    let head = if !found.private.holds() {
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
        "  filesystem:                   {}",
        found
            .filesystem
            .as_deref()
            .map_or_else(|| "not told by this system".into(), escape)
    );
    for (label, finding) in [
        ("only you can write it:       ", &found.private),
        ("renames never replace:       ", &found.exclusive_rename),
        ("crashed holders seen at once:", &found.kernel_proof),
        ("this machine's own:          ", &found.local),
    ] {
        let said = match finding {
            Finding::Holds => "yes".to_owned(),
            Finding::Lost(why) => format!("no: {}", escape(why)),
            Finding::Untold(why) => format!("cannot tell: {}", escape(why)),
            _ => "cannot tell".to_owned(),
        };
        let _ = writeln!(out, "  {label} {said}");
    }
    out
}
