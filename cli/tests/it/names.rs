//! Lock names: golden values from the reference implementation's formula
//! (`sha256("repository\0" + realpath)` in Node.js), and the per-user layout.

use crate::common::*;
use crate::BIN;
use dirlock::paths::repository_lock_name;
use std::path::Path;
use std::process::Command;

#[test]
fn the_app_namespace_is_the_reference_layout_and_uses_the_real_path() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    std::os::unix::fs::symlink(&repo, tmp.path().join("alias")).unwrap();
    let temp = tmp.path().join("t");
    std::fs::create_dir(&temp).unwrap();
    let run = |root: &Path| {
        let out = Command::new(BIN)
            .args(["path", "--app", "apnea", "--repository"])
            .arg(root)
            .env("TMPDIR", format!("{}/", temp.display())) // Node strips the slash
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
    };
    let real = std::fs::canonicalize(&repo).unwrap();
    let uid = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap();
    let want = format!(
        "{}/apnea-{uid}/operation-locks/{}",
        temp.display(),
        repository_lock_name(&real)
    );
    assert_eq!(run(&repo), want);
    assert_eq!(
        run(&tmp.path().join("alias")),
        want,
        "symlinked roots share the lock"
    );
    // `path` made nothing; the first acquisition makes the namespace, private.
    assert!(!temp.join(format!("apnea-{uid}")).exists());
    let out = Command::new(BIN)
        .args(["run", "--app", "apnea", "--repository"])
        .arg(&repo)
        .arg("true")
        .env("TMPDIR", &temp)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(&temp.join(format!("apnea-{uid}"))), 0o700);
    assert_eq!(
        mode(&temp.join(format!("apnea-{uid}/operation-locks"))),
        0o700
    );
}
