import { describe, expect, it } from 'vitest';
import { againOnConflict, isKubectlConflict, REPLACE_ATTEMPTS } from '../env/conflict-retry.js';

const conflict = Object.assign(new Error('Command failed: kubectl replace -f set.json'), { stderr: 'Error from server (Conflict): Operation cannot be fulfilled on statefulsets.apps "db"' });

describe('againOnConflict (test/env)', () => {
  it("tells kubectl's Conflict by its stderr or its message, and nothing else", () => {
    expect(isKubectlConflict(conflict)).toBe(true);
    expect(isKubectlConflict(new Error('kubectl replace: Error from server (Conflict): …'))).toBe(true);
    expect(isKubectlConflict(Object.assign(new Error('Command failed'), { stderr: 'Error from server (NotFound)' }))).toBe(false);
    expect(isKubectlConflict(undefined)).toBe(false);
  });

  it('runs a write again while it conflicts, at most REPLACE_ATTEMPTS times, and passes any other error at once', async () => {
    let calls = 0;
    await expect(againOnConflict(() => (++calls < 3 ? Promise.reject(conflict) : Promise.resolve('replaced')))).resolves.toBe('replaced');
    expect(calls).toBe(3);
    calls = 0;
    await expect(againOnConflict(() => { calls++; throw conflict; })).rejects.toBe(conflict);
    expect(calls).toBe(REPLACE_ATTEMPTS);
    calls = 0;
    const notFound = new Error('Error from server (NotFound)');
    await expect(againOnConflict(() => { calls++; throw notFound; })).rejects.toBe(notFound);
    expect(calls).toBe(1);
  });
});
