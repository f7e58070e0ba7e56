// Drives the reference implementation for dirlock's interoperability tests.
//   path <root>                         print its repository lock path
//   setup-path <home>                   print its global setup lock path
//   try <root>                          take the repository lock once: "ran" or "error <reason>"
//   hold <root> <ready> <release>       hold it, create <ready>, wait for <release>
//   sections <home> <work> <n>          n global-setup sections (waiting), logged in <work>
//   setup-turn <home>                   one global-setup section, waiting as the reference
//                                       does (a poll every 25 ms): prints how long, in ms
//   repo-sections <root> <work> <n>     n repository-lock sections, each retried until it runs
//   rw-sections <root> <work> <n>       n repository-lock sections as a writer beside readers
//                                       (markers in <work>/w and <work>/r), each retried
import * as fs from "node:fs"
import { Effect } from "effect"
import {
  globalSetupLockPath,
  repositoryLockPath,
  withGlobalSetupLock,
  withRepositoryLock,
} from "./extension/services/operation-lock.ts"

const [mode, a, b, c] = process.argv.slice(2)
const report = (e: unknown) => {
  const err = e as { reason?: string; message?: string }
  console.log(`error ${err.reason ?? "other"} ${err.message ?? String(e)}`)
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

if (mode === "path") {
  console.log(repositoryLockPath(a))
} else if (mode === "setup-path") {
  console.log(globalSetupLockPath(a))
} else if (mode === "try") {
  await Effect.runPromise(withRepositoryLock(a, Effect.succeed("ran"))).then(console.log, report)
} else if (mode === "hold") {
  const body = Effect.promise(async () => {
    fs.writeFileSync(b, String(process.pid))
    while (!fs.existsSync(c)) await sleep(5)
    return "released"
  })
  await Effect.runPromise(withRepositoryLock(a, body)).then(console.log, report)
} else if (mode === "setup-turn") {
  const start = Date.now()
  // (An error, such as a record it read while it was being written, is tried again.)
  while (!(await Effect.runPromise(withGlobalSetupLock(a, Effect.succeed(true))).catch(() => false))) {
    await sleep(25)
  }
  console.log(Date.now() - start)
} else if (mode === "rw-sections") {
  const live = (pid: string) => {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
      return !stat.slice(stat.lastIndexOf(")") + 1).trim().startsWith("Z")
    } catch {
      return false
    }
  }
  const section = Effect.sync(() => {
    const me = String(process.pid)
    fs.mkdirSync(`${b}/w`, { recursive: true })
    fs.mkdirSync(`${b}/r`, { recursive: true })
    fs.writeFileSync(`${b}/w/${me}`, me)
    for (const kind of ["w", "r"]) {
      for (const p of fs.readdirSync(`${b}/${kind}`)) {
        if (p === me) continue
        // A dying process may take a moment; a live one stays alive.
        const until = Date.now() + 1000
        while (live(p) && Date.now() < until) {}
        if (live(p)) fs.appendFileSync(`${b}/log`, `overlap write ${me} ${kind}/${p}\n`)
        else fs.rmSync(`${b}/${kind}/${p}`, { force: true })
      }
    }
    fs.appendFileSync(`${b}/log`, `write reference ${me}\n`)
    fs.rmSync(`${b}/w/${me}`, { force: true })
  })
  for (let i = 0; i < Number(c); i++) {
    for (;;) {
      const ran = await Effect.runPromise(withRepositoryLock(a, section)).then(
        () => true,
        () => false,
      )
      if (ran) break
      await sleep(5)
    }
  }
} else if (mode === "sections" || mode === "repo-sections") {
  const section = Effect.sync(() => {
    const log = `${b}/log`
    fs.appendFileSync(log, `enter ${process.pid}\n`)
    try {
      fs.writeFileSync(`${b}/occupied`, String(process.pid), { flag: "wx" })
    } catch {
      // A marker is there: fine only if its section is dead (killed inside, with its
      // wrapper). A dying process may take a moment; a live one stays alive.
      const other = fs.readFileSync(`${b}/occupied`, "utf8").trim()
      const alive = () => {
        try {
          const stat = fs.readFileSync(`/proc/${other}/stat`, "utf8")
          return !stat.slice(stat.lastIndexOf(")") + 1).trim().startsWith("Z")
        } catch {
          return false
        }
      }
      const until = Date.now() + 1000
      while (alive() && Date.now() < until) {}
      if (alive()) fs.appendFileSync(log, `overlap ${process.pid} ${other}\n`)
      fs.writeFileSync(`${b}/occupied`, String(process.pid))
    }
    let n = 0
    try { n = Number(fs.readFileSync(`${b}/counter`, "utf8")) } catch {}
    fs.writeFileSync(`${b}/counter.${process.pid}`, String(n + 1))
    fs.renameSync(`${b}/counter.${process.pid}`, `${b}/counter`)
    fs.appendFileSync(log, `exit ${process.pid} ${n + 1}\n`)
    fs.rmSync(`${b}/occupied`)
  })
  for (let i = 0; i < Number(c); i++) {
    if (mode === "sections") {
      await Effect.runPromise(withGlobalSetupLock(a, section, Effect.sleep(2))).catch(report)
      continue
    }
    // The repository lock fails fast (and reclaims a dead owner's past its grace period):
    // retry until this section has run.
    for (;;) {
      const ran = await Effect.runPromise(withRepositoryLock(a, section)).then(
        () => true,
        () => false,
      )
      if (ran) break
      await sleep(5)
    }
  }
}
