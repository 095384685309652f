import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/** One process of a group, its output in `logFile`; `exitCode` is set once it exited (-1: killed by a signal, or never started). */
export interface GroupProcess {
  name: string;
  child: ChildProcess;
  logFile: string;
  exited: Promise<void>;
  exitCode?: number | null;
}

/**
 * The processes a local cluster starts (etcd, the API server, a node's daemons): each logs to
 * `<dir>/<name>.log` and has its pid appended to `pidsFile` (so a later run can reap them); all are
 * SIGKILLed if this process exits without stopping them.
 */
export class ProcessGroup {
  readonly procs: GroupProcess[] = [];
  private readonly killAll = (): void => {
    for (const p of this.procs) if (p.exitCode === undefined) p.child.kill('SIGKILL');
  };

  constructor(
    private readonly dir: string,
    private readonly pidsFile: string,
  ) {
    process.on('exit', this.killAll);
  }

  launch(name: string, binary: string, args: string[]): GroupProcess {
    const logFile = path.join(this.dir, `${name}.log`);
    const fd = fs.openSync(logFile, 'a');
    // a session of its own: a terminal's Ctrl-C goes to the whole foreground group, and containerd
    // killed by it before the stop has removed the pods left their shims and containers running
    const child = spawn(binary, args, { stdio: ['ignore', fd, fd], detached: true });
    fs.closeSync(fd);
    const proc: GroupProcess = { name, child, logFile, exited: Promise.resolve() };
    proc.exited = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        proc.exitCode = code ?? (signal ? -1 : null);
        resolve();
      });
      child.on('error', () => {
        proc.exitCode = -1;
        resolve();
      });
    });
    this.procs.push(proc);
    fs.appendFileSync(this.pidsFile, `${child.pid}\n`);
    return proc;
  }

  byName(name: string): GroupProcess | undefined {
    return this.procs.find((p) => p.name === name);
  }

  /** The last `lines` of every process's log, for a failure's message. */
  logTail(lines = 40): string {
    return this.procs
      .map((p) => {
        const text = fs.existsSync(p.logFile) ? fs.readFileSync(p.logFile, 'utf8') : '';
        return `--- ${p.name} (${p.logFile}) ---\n${text.split('\n').slice(-lines).join('\n')}`;
      })
      .join('\n');
  }

  /** Throws, with the logs' tails, when `p` has exited. */
  alive(p: GroupProcess): void {
    if (p.exitCode !== undefined) throw new Error(`${p.name} exited with ${p.exitCode}\n${this.logTail(30)}`);
  }

  /** SIGTERM, then SIGKILL after 10 s. */
  async terminate(p: GroupProcess): Promise<void> {
    if (p.exitCode !== undefined) return;
    p.child.kill('SIGTERM');
    const timer = setTimeout(() => p.child.kill('SIGKILL'), 10_000);
    await p.exited;
    clearTimeout(timer);
  }

  /** Every process, the last started first; the exit hook is released. */
  async stopAll(): Promise<void> {
    for (const p of [...this.procs].reverse()) await this.terminate(p);
    process.off('exit', this.killAll);
  }
}

/** Whether a process with this pid exists (signal 0). */
export function processAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
