import http from 'node:http';
import https from 'node:https';

/**
 * Server-side latency with sub-millisecond buckets, the same in the Node servers and in the Go
 * peer (bench/peer-controller-runtime/latency.go): 5 µs wide up to 1 ms, 50 µs to 10 ms,
 * 500 µs to 100 ms, 5 ms to 1 s, one overflow bucket.
 */
export const BUCKET_COUNT = 200 + 180 + 180 + 180 + 1;

export function bucketOf(us: number): number {
  if (us < 1_000) return Math.floor(us / 5);
  if (us < 10_000) return 200 + Math.floor((us - 1_000) / 50);
  if (us < 100_000) return 380 + Math.floor((us - 10_000) / 500);
  if (us < 1_000_000) return 560 + Math.floor((us - 100_000) / 5_000);
  return BUCKET_COUNT - 1;
}

/** The upper bound of a bucket, in milliseconds. */
export function bucketUpperMs(bucket: number): number {
  if (bucket < 200) return ((bucket + 1) * 5) / 1000;
  if (bucket < 380) return (1_000 + (bucket - 199) * 50) / 1000;
  if (bucket < 560) return (10_000 + (bucket - 379) * 500) / 1000;
  if (bucket < 740) return (100_000 + (bucket - 559) * 5_000) / 1000;
  return Infinity;
}

export function percentileOfCounts(counts: readonly number[], p: number): number {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return NaN;
  const rank = Math.ceil((p / 100) * total);
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i]!;
    if (seen >= rank) return bucketUpperMs(i);
  }
  return Infinity;
}

/**
 * Times every request of every HTTPS server in this process, from the 'request' event (headers
 * read) to 'finish' (the response handed to the socket), and serves the counts (reset on each
 * read) on a plain HTTP port of loopback. Call before the servers are created.
 */
export async function serveLatencyHistogram(port: number): Promise<void> {
  let counts = new Array<number>(BUCKET_COUNT).fill(0);
  const emit = https.Server.prototype.emit;
  https.Server.prototype.emit = function (this: https.Server, event: string | symbol, ...args: unknown[]): boolean {
    if (event === 'request') {
      const started = process.hrtime.bigint();
      (args[1] as http.ServerResponse).once('finish', () => {
        counts[bucketOf(Number(process.hrtime.bigint() - started) / 1000)]!++;
      });
    }
    return emit.apply(this, [event, ...args] as Parameters<typeof emit>);
  };
  const admin = http.createServer((_req, res) => {
    const body = JSON.stringify({ counts });
    counts = new Array<number>(BUCKET_COUNT).fill(0);
    res.writeHead(200, { 'content-type': 'application/json' }).end(body);
  });
  await new Promise<void>((resolve) => admin.listen(port, '127.0.0.1', resolve));
}

/** Reads (and so resets) a server's histogram. */
export async function readLatencyHistogram(adminPort: number): Promise<number[]> {
  const res = await fetch(`http://127.0.0.1:${adminPort}/latency`);
  if (!res.ok) throw new Error(`latency histogram on port ${adminPort}: HTTP ${res.status}`);
  return ((await res.json()) as { counts: number[] }).counts;
}
