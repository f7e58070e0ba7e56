//! From options to the library: the lock directory and the request they name.

use crate::args::{Acquire, Place, Selector, EX_USAGE};
use crate::say::Failure;
use dirlock::text::{escape, path as shown};
use dirlock::{Error, LockRequest, Locks, Wait};
use std::path::Path;

pub(crate) fn open(place: &Place) -> Result<Locks, Failure> {
    match (&place.app, &place.dir) {
        (_, Some(dir)) => own_dir(dir),
        (app, None) => Ok(Locks::new(app.as_deref().unwrap_or("dirlock"))?),
    }
}

/// A lock directory the user named (`--dir`, `--lock DIR/NAME`). When it cannot be used as
/// one (it is not private), say what to use instead, in this command's terms.
pub(crate) fn own_dir(dir: &Path) -> Result<Locks, Failure> {
    Locks::in_dir(dir).map_err(|e| match e {
        // The library's advice names its API: say it in this command's options instead.
        Error::Unsafe { path, problem, .. } => Failure(
            format!(
                "refusing {}: {}; lock directories must be private to you: use `--lock NAME` alone (your own namespace under the temporary directory), or `--dir DIR` with a new directory made only for your locks (dirlock creates it with mode 700)",
                shown(&path),
                escape(&problem)
            ),
            1,
        ),
        e => e.into(),
    })
}

/// The request for the lock the selector names, in the lock directory it names.
pub(crate) fn select(sel: &Selector) -> Result<LockRequest, Failure> {
    let usage = |m: &str| Failure(m.to_owned(), EX_USAGE);
    match (&sel.repository, &sel.global_setup, &sel.lock) {
        (Some(r), None, None) => Ok(open(&sel.place)?.repository_lock(r)),
        (None, Some(h), None) => Ok(open(&sel.place)?.global_setup_lock(h)),
        // DIR/NAME (on Windows DIR\NAME too): a lock name has no separator of either kind.
        (None, None, Some(l)) => match l
            .rfind(|c| c == '/' || (cfg!(windows) && c == '\\'))
            .map(|i| (&l[..i], &l[i + 1..]))
        {
            Some((dir, name)) => {
                if sel.place.app.is_some() || sel.place.dir.is_some() {
                    return Err(usage(
                        "--lock DIR/NAME names its own directory: drop --app/--dir",
                    ));
                }
                let dir = if dir.is_empty() { "/" } else { dir };
                Ok(own_dir(Path::new(dir))?.named_lock(name))
            }
            None => Ok(open(&sel.place)?.named_lock(l)),
        },
        _ => Err(usage(
            "give one of --repository ROOT, --global-setup HOME, --lock [DIR/]NAME",
        )),
    }
}

pub(crate) fn configure(mut req: LockRequest, acq: &Acquire) -> LockRequest {
    if acq.wait {
        req = req.wait(Wait::Forever);
    }
    if acq.nonblock {
        req = req.wait(Wait::Immediately);
    }
    if let Some(t) = acq.timeout {
        req = req.wait(Wait::Timeout(t));
    }
    if let Some(g) = acq.grace {
        req = req.grace(g);
    }
    if let Some(p) = &acq.purpose {
        req = req.purpose(p.clone());
    }
    req
}
