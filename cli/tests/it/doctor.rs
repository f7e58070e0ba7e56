//! `dirlock doctor` on the filesystems locks meet: tmpfs, ext4, a FUSE mount without
//! no-replace renames, and a directory others can write. Each verdict is the one that
//! filesystem earns, the exit status says it, and nothing is left behind.

use crate::common::{have, is_root, lacks, Fuse};
use crate::faults::Tmpfs;
use crate::BIN;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn doctor(dir: &Path) -> Output {
    Command::new(BIN).arg("doctor").arg(dir).output().unwrap()
}

fn said(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// What `doctor --json` says of `dir`.
fn json(dir: &Path) -> serde_json::Value {
    let o = Command::new(BIN)
        .args(["doctor", "--json"])
        .arg(dir)
        .output()
        .unwrap();
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A directory where every guarantee holds: exit 0, the filesystem named, every line "yes".
fn every_guarantee_holds(dir: &Path, fs: &str) {
    std::fs::write(dir.join("work"), "x").unwrap();
    let o = doctor(dir);
    assert_eq!(o.status.code(), Some(0), "{}", said(&o));
    let text = said(&o);
    assert!(
        text.starts_with(&format!(
            "{}: locks can live here, and every guarantee holds\n",
            dir.display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("filesystem:                   {fs}\n")),
        "{text}"
    );
    assert_eq!(text.matches(" yes\n").count(), 5, "{text}");
    let v = json(dir);
    assert_eq!(v["filesystem"], fs);
    for g in [
        "private",
        "writable",
        "exclusive_rename",
        "kernel_proof",
        "local",
    ] {
        assert_eq!(v[g]["state"], "holds", "{g}: {v}");
    }
    assert_eq!(entries(dir), ["work"], "the probe is removed");
}

#[test]
fn on_tmpfs_every_guarantee_holds() {
    if is_root() {
        let fs = Tmpfs::mount("size=1m,mode=0700");
        every_guarantee_holds(fs.path(), "tmpfs");
    } else if Path::new("/dev/shm").is_dir() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        every_guarantee_holds(dir.path(), "tmpfs");
    } else {
        lacks(
            "doctor::on_tmpfs_every_guarantee_holds",
            "root, or /dev/shm",
            false,
        );
    }
}

/// An ext4 filesystem in a file, loop-mounted; unmounted on drop.
struct Ext4 {
    dir: tempfile::TempDir,
}

impl Ext4 {
    fn mount() -> Ext4 {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("image");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        std::fs::write(&image, vec![0u8; 0]).unwrap();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&image)
            .unwrap();
        f.set_len(8 << 20).unwrap();
        let ok = Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&image)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mkfs.ext4 failed");
        let ok = Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mnt)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount -o loop failed");
        std::fs::set_permissions(&mnt, PermissionsExt::from_mode(0o755)).unwrap();
        Ext4 { dir }
    }

    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("mnt")
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.path()).status();
    }
}

#[test]
fn on_ext4_every_guarantee_holds() {
    let usable = is_root()
        && have("mkfs.ext4")
        && have("losetup")
        && Path::new("/dev/loop-control").exists();
    if lacks(
        "doctor::on_ext4_every_guarantee_holds",
        "root, mkfs.ext4 and loop devices",
        usable,
    ) {
        return;
    }
    let fs = Ext4::mount();
    let dir = fs.path().join("project");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o755)).unwrap();
    every_guarantee_holds(&dir, "ext4");
}

/// A FUSE filesystem that refuses no-replace renames: locks still live there (renamed plainly
/// and checked), the lost guarantee is said with what it means, and the exit status is 2.
#[test]
fn on_fuse_without_no_replace_renames_a_guarantee_is_lost() {
    let Some(fuse) = Fuse::mount("doctor::on_fuse_without_no_replace_renames_a_guarantee_is_lost")
    else {
        return;
    };
    let dir = fuse.path();
    let o = doctor(&dir);
    let text = said(&o);
    assert_eq!(o.status.code(), Some(2), "{text}");
    assert!(
        text.contains("locks can live here, with a guarantee lost")
            && text.contains("renames never replace:        no: ")
            && text.contains("an empty directory someone puts at a lock's path is replaced")
            && text.contains("filesystem:                   fuse"),
        "{text}"
    );
    let v = json(&dir);
    assert_eq!(v["exclusive_rename"]["state"], "lost", "{v}");
    assert_eq!(v["kernel_proof"]["state"], "holds", "{v}");
    assert_eq!(entries(&dir), Vec::<String>::new(), "the probe is removed");
}

/// A directory others can write cannot host locks: exit 1, and who can write it.
#[test]
fn a_directory_others_can_write_cannot_host_locks() {
    let tmp = tempfile::tempdir().unwrap();
    for (mode, who) in [(0o777, "anyone"), (0o775, "its group"), (0o1777, "anyone")] {
        let dir = tmp.path().join(format!("d{mode:o}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, PermissionsExt::from_mode(mode)).unwrap();
        let o = doctor(&dir);
        let text = said(&o);
        assert_eq!(o.status.code(), Some(1), "{mode:o}: {text}");
        assert!(
            text.starts_with(&format!("{}: locks cannot live here\n", dir.display()))
                && text.contains(&format!(
                    "only you can write it:        no: {}: it has mode {mode:o}: {who}",
                    dir.display()
                ))
                && text.contains("may write it"),
            "{mode:o}: {text}"
        );
        assert_eq!(json(&dir)["usable"], false);
        assert_eq!(
            entries(&dir),
            Vec::<String>::new(),
            "{mode:o}: the probe is removed"
        );
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777,
            mode,
            "left as it was"
        );
    }
    // A directory that does not exist is an error naming it, and is not made.
    let missing = tmp.path().join("missing");
    let o = doctor(&missing);
    assert_eq!(o.status.code(), Some(1));
    assert!(said(&o).contains("missing"), "{}", said(&o));
    assert!(!missing.exists());
}

/// Where nothing can be made (a read-only filesystem), locks cannot live, whatever else
/// holds: exit 1. And the probes of an examination killed a while ago are removed; a fresh
/// one (another examination's, running) is left alone.
#[test]
fn where_nothing_can_be_made_locks_cannot_live_and_old_probes_go() {
    let tmp = tempfile::tempdir().unwrap();
    let old = tmp.path().join(".dirlock-doctor.killed");
    let fresh = tmp.path().join(".dirlock-doctor.running");
    std::fs::create_dir_all(old.join("b")).unwrap();
    std::fs::create_dir(&fresh).unwrap();
    crate::common::set_age(&old, std::time::Duration::from_secs(3600));
    let o = doctor(tmp.path());
    assert_eq!(o.status.code(), Some(0), "{}", said(&o));
    assert_eq!(entries(tmp.path()), [".dirlock-doctor.running"]);
    if lacks(
        "doctor::where_nothing_can_be_made_locks_cannot_live_and_old_probes_go (read-only part)",
        "root (to mount a read-only tmpfs)",
        is_root(),
    ) {
        return;
    }
    let fs = Tmpfs::mount("size=1m,mode=0700,ro");
    let o = doctor(fs.path());
    let text = said(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("locks cannot live here")
            && text.contains("you can make locks in it:     no: ")
            && text.contains("Read-only"),
        "{text}"
    );
    assert_eq!(json(fs.path())["writable"]["state"], "lost");
}
