/**
 * Compacts etcd at its current revision through its v3 JSON gateway (no etcdctl is built);
 * returns that revision: every resourceVersion below it is gone from etcd.
 */
export async function compactEtcd(etcdUrl: string): Promise<number> {
  const post = async (call: string, body: unknown): Promise<Record<string, unknown>> => {
    const res = await fetch(`${etcdUrl}/v3/kv/${call}`, { method: 'POST', body: JSON.stringify(body), signal: AbortSignal.timeout(10_000) });
    const answer = (await res.json()) as Record<string, unknown>;
    if (!res.ok) throw new Error(`etcd ${call}: ${res.status} ${JSON.stringify(answer)}`);
    return answer;
  };
  const range = await post('range', { key: Buffer.from('/registry/').toString('base64'), count_only: true });
  const revision = Number((range.header as { revision?: unknown } | undefined)?.revision);
  if (!Number.isInteger(revision) || revision <= 0) throw new Error(`etcd range: no revision in ${JSON.stringify(range)}`);
  await post('compaction', { revision: String(revision), physical: true });
  return revision;
}
