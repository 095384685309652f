import { isJsonObject } from '../kube/json.js';

/** The pod's default when the template sets none. */
export const DEFAULT_TERMINATION_GRACE_SECONDS = 30;
const UNIT_SECONDS: Record<string, number> = { '': 1, s: 1, m: 60, h: 3600, d: 86_400 };
const SLEEP_BINARIES = new Set(['sleep', '/bin/sleep', '/usr/bin/sleep']);
const SHELLS = new Set(['sh', 'bash', '/bin/sh', '/bin/bash', '/usr/bin/sh', '/usr/bin/bash', '/bin/ash', '/bin/dash']);
/** Words after which a shell script's sleeps may run any number of times, or not at all. */
const NOT_STRAIGHT = /\b(while|until|for|if|case|then|else|do|function)\b|[|(){}`$<>]|(?<!&)&(?!&)/;

/** `30`, `30s`, `1.5m`: what coreutils' sleep takes; undefined for anything else. */
function sleepArgument(text: string): number | undefined {
  const m = /^(\d+(?:\.\d+)?)([smhd]?)$/.exec(text.trim());
  return m ? Number(m[1]) * UNIT_SECONDS[m[2]!]! : undefined;
}

/** The seconds a straight-line script sleeps at least (`sleep 5; nginx -s quit`); undefined when it has loops or branches. */
function scriptSleepSeconds(script: string): number | undefined {
  if (NOT_STRAIGHT.test(script)) return undefined;
  let total = 0;
  for (const command of script.split(/\n|;|&&/)) {
    const words = command.trim().split(/\s+/);
    if (words.length === 2 && SLEEP_BINARIES.has(words[0]!)) total += sleepArgument(words[1]!) ?? 0;
  }
  return total > 0 ? total : undefined;
}

/**
 * The seconds a preStop handler surely takes: the `sleep` action, or an exec of `sleep N`
 * (directly or in a straight-line `sh -c` script). undefined when it cannot be told
 * (httpGet, a loop that waits for something): those are not checked.
 */
export function preStopSleepSeconds(handler: unknown): number | undefined {
  if (!isJsonObject(handler)) return undefined;
  if (isJsonObject(handler.sleep) && Number.isSafeInteger(handler.sleep.seconds)) return handler.sleep.seconds as number;
  const command = isJsonObject(handler.exec) ? handler.exec.command : undefined;
  if (!Array.isArray(command) || !command.every((w) => typeof w === 'string')) return undefined;
  const words = command as string[];
  if (words.length === 2 && SLEEP_BINARIES.has(words[0]!)) return sleepArgument(words[1]!);
  if (words.length === 3 && SHELLS.has(words[0]!) && words[1] === '-c') return scriptSleepSeconds(words[2]!);
  return undefined;
}

function containers(spec: Record<string, unknown>, field: 'containers' | 'initContainers'): Record<string, unknown>[] {
  const list = spec[field];
  return Array.isArray(list) ? list.filter(isJsonObject) : [];
}

/**
 * Warnings for a pod template of a handover-enabled set (wire JSON, unchecked) whose preStop
 * hooks cannot finish in terminationGracePeriodSeconds: the grace period runs from the
 * deletion, preStop first, so a hook that sleeps the whole of it leaves its container no time
 * to shut down (the kubelet kills it 2 s after the period), and a native sidecar that should
 * outlive it (the database) is killed with it.
 */
export function graceBudgetWarnings(podSpec: unknown): string[] {
  if (!isJsonObject(podSpec)) return [];
  // the API server has set the default before admission; a review from elsewhere may lack it
  const grace = Number.isSafeInteger(podSpec.terminationGracePeriodSeconds) ? (podSpec.terminationGracePeriodSeconds as number) : DEFAULT_TERMINATION_GRACE_SECONDS;
  const warnings: string[] = [];
  for (const field of ['initContainers', 'containers'] as const) {
    for (const container of containers(podSpec, field)) {
      // a regular init container has run to completion long before any preStop
      if (field === 'initContainers' && container.restartPolicy !== 'Always') continue;
      const lifecycle = isJsonObject(container.lifecycle) ? container.lifecycle : undefined;
      const seconds = preStopSleepSeconds(lifecycle?.preStop);
      if (seconds === undefined || seconds <= 0 || seconds < grace) continue;
      const name = typeof container.name === 'string' ? container.name.slice(0, 63) : '?';
      warnings.push(
        `rollguard: container ${name}: preStop sleeps ${seconds}s, terminationGracePeriodSeconds is ${grace}s: the kubelet kills the container before it can shut down; make the grace period longer than the preStop plus the shutdown`,
      );
    }
  }
  return warnings;
}
