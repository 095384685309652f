import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ProcessGroup, processAlive } from '../../src/dev/process-group.js';

/** The process group of `pid`, from /proc (field 5 of stat, after the command in parentheses). */
function processGroupOf(pid: number | 'self'): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
}

describe.runIf(process.platform === 'linux')('the local cluster\'s process group', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
  });

  // A terminal's Ctrl-C signals its whole foreground group: a containerd of that group died before
  // `rollguard dev --real-node` had removed the pods, and left their shims and containers running.
  it('runs each process in a group of its own, which a Ctrl-C to rollguard dev\'s group does not reach, and stops it', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollguard-group-'));
    dirs.push(dir);
    const group = new ProcessGroup(dir, path.join(dir, 'pids'));
    const p = group.launch('sleeper', '/bin/sleep', ['30']);
    const pid = p.child.pid!;
    expect(processGroupOf(pid)).toBe(pid);
    expect(processGroupOf(pid)).not.toBe(processGroupOf('self'));
    await group.stopAll();
    expect(processAlive(pid)).toBe(false);
    expect(fs.readFileSync(path.join(dir, 'pids'), 'utf8').trim()).toBe(String(pid));
  });
});
