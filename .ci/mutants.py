#!/usr/bin/env python3
"""Deliberate breaks: apply each mutant, run the test that must catch it, restore the file.

Usage: python3 .ci/mutants.py [NAME...]   (run from the repository root)
Every mutant must make its test fail (or hang past the timeout); a mutant that passes means
the test has no teeth for it, and the script exits 1.
"""
import os, shutil, signal, subprocess, sys, tempfile, time

MUTANTS = [
    ("publish-treats-EEXIST-as-won", "src/protocol.rs",
     "Err(e) if is(&e, Errno::Exists) || is(&e, Errno::NotEmpty) => Ok(Publish::Contended),",
     "Err(e) if is(&e, Errno::Exists) || is(&e, Errno::NotEmpty) => Ok(Publish::Won),",
     "it", "contention::threads_exclude_each_other"),
    ("beacon-ignored", "src/liveness.rs",
     "if owner.has_beacon() {", "if false && owner.has_beacon() {",
     "it", "crash::a_killed_holder_is_reclaimed_at_once"),
    ("grace-skipped", "src/protocol.rs",
     "if !proven && age < options.grace {", "if false && !proven && age < options.grace {",
     "it", "reclaim::a_dead_reference_owner_waits_out_the_grace_period"),
    ("live-pid-judged-dead", "src/liveness.rs",
     "        Some(true) => {}\n        None => return Judgement::new(Live, format!(\"cannot tell",
     "        Some(true) => return Judgement::new(DeadByEvidence, \"mutant\"),\n        None => return Judgement::new(Live, format!(\"cannot tell",
     "it", "reclaim::live_owners_are_never_reclaimed_however_old"),
    ("release-skips-identity-check", "src/protocol.rs",
     "Ok(m) if m.id == held.id => {}\n        Ok(_) => {\n            return Err(lost(",
     "Ok(_) => {}\n        #[allow(unreachable_patterns)]\n        Ok(_) => {\n            return Err(lost(",
     "it", "release::a_stolen_lock_is_reported_and_the_new_owner_spared"),
    ("umask-not-corrected", "src/locks.rs",
     "        sys.set_mode(&dir, 0o700)\n", "        Ok::<(), std::io::Error>(())\n",
     "it", "safety::modes_are_exact_whatever_the_umask"),
    ("symlinks-followed", "src/sys/unix.rs",
     "libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,",
     "libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,",
     "it", "safety::a_symlinked_lock_directory_is_refused"),
    ("forked-child-releases", "src/protocol.rs",
     "if sp.sys.pid() != acquirer {", "if false && sp.sys.pid() != acquirer {",
     "fork", "forked_children_and_execd_programs_do_not_own_the_lock"),
    ("beacon-inherited-across-exec", "src/sys/unix.rs",
     "libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,",
     "libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,",
     "fork", "forked_children_and_execd_programs_do_not_own_the_lock"),
    ("host-rule-dropped", "src/liveness.rs",
     "if me.host.as_deref() != Some(host.as_str()) {", "if false && me.host.as_deref() != Some(host.as_str()) {",
     "it", "reclaim::other_hosts_and_namespaces_are_unknown_and_never_reclaimed"),
    ("start-time-rule-dropped", "src/liveness.rs",
     "Some(now) if now != recorded =>", "Some(now) if false && now != recorded =>",
     "it", "reclaim::a_reused_pid_is_dead_by_evidence"),
    ("foreign-guard-reused-at-once", "src/reclaim.rs",
     "if age < grace {\n            return Ok(Err(Reclaim::Busy {", "if false && age < grace {\n            return Ok(Err(Reclaim::Busy {",
     "it", "reclaim::a_fresh_foreign_guard_is_respected_and_an_old_one_reused"),
    ("marked-guard-not-trusted", "src/reclaim.rs",
     "let marked = flocked && sp.sys.meta_at(&guard, GUARD_MARKER).is_ok();", "let marked = false && flocked;",
     "it", "reclaim::our_own_crashed_guard_is_reused_at_once"),
    ("self-deadlock-not-refused", "src/guard.rs",
     "if r.dir == dir && r.name == name && r.thread == me {", "if false && r.dir == dir && r.name == name && r.thread == me {",
     "it", "contention::the_same_thread_is_refused_at_once"),
    ("cancel-ignored", "src/protocol.rs",
     "    let cancel = req.options.cancel.as_ref().map(|c| &*c.0);\n    if beacon && cancel",
     "    let cancel: Option<&crate::sys::CancelHandle> = None;\n    if beacon && cancel",
     "it", "waiting::a_cancelled_wait_leaves_nothing_behind"),
    ("candidate-left-on-timeout", "src/protocol.rs",
     "            drop(c.dir);\n            remove_tree(sp.sys, sp.dir, &c.name);",
     "            drop(c.dir);",
     "it", "waiting::a_timed_out_wait_leaves_nothing_behind"),
    ("malformed-lock-replaced", "src/protocol.rs",
     "Ok(now) if now.id == meta.id => Ok(Seen::Malformed(problem.unwrap_or_default())),",
     "Ok(now) if now.id == meta.id => { let _ = remove_tree(self.sys, self.dir, name); Ok(Seen::Gone) }",
     "it", "reclaim::malformed_locks_are_reported_and_never_removed"),
    ("lock-order-not-enforced", "src/guard.rs",
     "if family == Family::GlobalSetup && r.family == Family::Repository && r.thread == me {",
     "if false && family == Family::GlobalSetup && r.family == Family::Repository && r.thread == me {",
     "it", "contention::setup_after_repository_is_refused"),
    ("unknown-owner-beacon-reprobed", "src/protocol.rs",
     "let by_beacon = live && owner.has_beacon();", "let by_beacon = owner.has_beacon();",
     "it", "waiting::an_unknown_owner_is_waited_for_without_spinning"),
    ("no-plain-rename-fallback", "src/sys/unix.rs",
     "Some(libc::EINVAL) | Some(libc::ENOSYS) => {", "Some(libc::ENOSYS) => {",
     "it", "crash::publish_falls_back_to_plain_rename_where_renameat2_is_refused"),
    ("run-does-not-forward-signals", "src/bin/dirlock.rs",
     "    dirlock::__cli::forward_signals(child.id());\n", "",
     "it", "cli::sigint_is_forwarded_and_the_lock_released_after_the_command_exits"),
    ("beacon-not-kept-by-the-command", "src/guard.rs",
     "        crate::sys::keep_open_in_child(cmd, self.held().beacon.as_raw_fd());\n", "",
     "it", "cli::a_killed_wrapper_leaves_the_lock_held_until_its_command_exits"),
    ("nested-run-waits-for-its-parent", "src/locks.rs",
     "if let Some(pid) = held_by_parent(&lock_path) {", "if let Some(pid) = held_by_parent(&lock_path).filter(|_| false) {",
     "it", "cli::a_nested_run_of_the_same_lock_is_told_its_parent_holds_it"),
    ("sweep-ignores-the-candidate-beacon", "src/protocol.rs",
     "                    Ok(false) => {\n                        keep(\n                            &entry,\n                            \"its creator is alive (it holds the candidate's beacon)\",\n                        );\n                        continue;\n                    }",
     "                    Ok(false) => {}",
     "it", "cli::sweep_removes_only_what_it_may"),
    ("unlock-removes-the-living", "src/protocol.rs",
     "                if !judgement.liveness.is_dead() {\n                    return Err(Error::Locked {",
     "                if false {\n                    return Err(Error::Locked {",
     "it", "cli::unlock_removes_only_the_dead"),
    ("unlock-force-ignores-the-beacon", "src/protocol.rs",
     "if !sp.sys.try_lock(&dir, false).unwrap_or(false) {", "if false {",
     "it", "cli::unlock_force_refuses_a_malformed_lock_whose_beacon_is_held"),
    ("sweep-keeps-unprobeable-candidates", "src/protocol.rs",
     "Err(e) if is(&e, Errno::LockUnsupported) => {\n                        if let Ok(owner)",
     "Err(e) if false && is(&e, Errno::LockUnsupported) => {\n                        if let Ok(owner)",
     "lib", "sim::tests::random_schedules_of_three_and_four_processes"),
    ("chaos-publish-treats-EEXIST-as-won", "src/protocol.rs",
     "Err(e) if is(&e, Errno::Exists) || is(&e, Errno::NotEmpty) => Ok(Publish::Contended),",
     "Err(e) if is(&e, Errno::Exists) || is(&e, Errno::NotEmpty) => Ok(Publish::Won),",
     "it", "chaos::chaos_on_tmpfs"),
    ("chaos-beacon-ignored", "src/liveness.rs",
     "if owner.has_beacon() {", "if false && owner.has_beacon() {",
     "it", "chaos::chaos_on_disk"),
    ("record-read-blocks-on-a-fifo", "src/sys/unix.rs",
     "libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,",
     "libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,",
     "it", "hostile::a_fifo_record_without_a_writer_does_not_block_the_open"),
    ("record-owner-unchecked", "src/protocol.rs",
     "        if let Some(p) = self.private_problem(&meta, OWNER_FILE) {\n            return Err(p);\n        }\n",
     "",
     "it", "hostile::a_record_owned_by_another_user_is_refused"),
    ("pid-namespace-judged-by-pid", "src/liveness.rs",
     "if owner.has_beacon() {", "if owner.pid_namespace.is_none() && owner.has_beacon() {",
     "it", "crash::a_holder_in_another_pid_namespace_is_judged_by_its_beacon"),
    ("library-chaos-publish-treats-EEXIST-as-won", "src/protocol.rs",
     "Err(e) if is(&e, Errno::Exists) || is(&e, Errno::NotEmpty) => Ok(Publish::Contended),",
     "Err(e) if is(&e, Errno::Exists) || is(&e, Errno::NotEmpty) => Ok(Publish::Won),",
     "it", "chaos::library_chaos_short"),
    ("release-misses-a-reaped-tombstone", "src/protocol.rs",
     "                && sp.sys.meta(&held.beacon).is_ok_and(|m| m.nlink == 0) => {}",
     "                && false => {}",
     "lib", "sim::tests::regressions"),
    ("guard-made-in-place", "src/reclaim.rs",
     "    if sp.sys.rename_is_plain() {\n        return make_guard_in_place(sp, gname);",
     "    if true {\n        return make_guard_in_place(sp, gname);",
     "lib", "sim::tests::random_schedules_of_three_and_four_processes"),
    ("guard-removed-piecemeal", "src/reclaim.rs",
     "match sp.sys.rename_noreplace(sp.dir, &gname, &tomb) {",
     "match Err::<(), io::Error>(io::Error::other(tomb.clone())) {",
     "lib", "sim::tests::two_processes_exhaustively_within_bounds"),
    ("release-leaves-a-forked-copy-locked", "src/protocol.rs",
     "    let _ = sp.sys.unlock(&held.beacon);\n    match sp.sys.meta_at(sp.dir, &tomb) {",
     "    match sp.sys.meta_at(sp.dir, &tomb) {",
     "fork", "forked_children_and_execd_programs_do_not_own_the_lock"),
    ("unbounded-wait-spins", "src/sys/unix.rs",
     "retry(|| unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_SH) }).map(drop)",
     "Ok(())",
     "it", "waiting::a_live_holder_is_waited_for_without_spinning"),
]

def main():
    only = set(sys.argv[1:])
    survived = []
    for name, path, old, new, binary, test in MUTANTS:
        if only and name not in only:
            continue
        src = open(path).read()
        if src.count(old) != 1:
            print(f"{name}: pattern not found exactly once in {path}"); survived.append(name); continue
        open(path, "w").write(src.replace(old, new))
        try:
            # Its own process group, so that a hung test and everything it started die with it.
            target = ["--lib"] if binary == "lib" else ["--test", binary]
            # A broken test may fail or be killed before its temporary directories are
            # removed: give it a private TMPDIR, and remove what it left in /dev/shm.
            tmp = tempfile.mkdtemp(prefix="dirlock-mutant-")
            shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
            p = subprocess.Popen(["cargo", "test", "-q", *target, "--", "--exact", test],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True, env={**os.environ, "TMPDIR": tmp})
            try:
                _, err = p.communicate(timeout=60)
                how = "failed" if p.returncode != 0 else "PASSED"
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                _, err = p.communicate()
                how = "hung (killed after 60 s)"
            # Again, for anything forked while the group was being killed (or a caught test
            # left behind).
            time.sleep(0.5)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            shutil.rmtree(tmp, ignore_errors=True)
            for entry in set(os.listdir("/dev/shm")) - shm_before if shm_before else ():
                if entry.startswith(".tmp"):
                    shutil.rmtree(os.path.join("/dev/shm", entry), ignore_errors=True)
            caught = how != "PASSED"
            if "error[E" in err:
                how = "did not compile"; caught = False
            print(f"{name:34} -> {test}: {how}")
            if not caught:
                survived.append(name)
        finally:
            open(path, "w").write(src)
    if survived:
        print("survived:", ", ".join(survived)); sys.exit(1)
    print("every mutant was caught")

main()
