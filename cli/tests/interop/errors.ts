// Shim for the reference implementation's error module: plain classes with its fields.
export class ConfigError extends Error {
  readonly path: string
  constructor(props: { message: string; path: string }) {
    super(props.message)
    this.path = props.path
  }
}
export class OperationLocked extends Error {
  readonly reason: string
  readonly pid: number
  readonly lock_path: string
  constructor(props: { message: string; repository: string; lock_path: string; reason: string; pid: number }) {
    super(props.message)
    this.reason = props.reason
    this.pid = props.pid
    this.lock_path = props.lock_path
  }
}
