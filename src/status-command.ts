/** `rollguard status`: a person's view of GET /status. */
export async function printStatus(baseUrl: string): Promise<number> {
  const url = new URL('/status', baseUrl);
  let body: unknown;
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
    if (!res.ok) {
      console.error(`rollguard status: ${url} answered ${res.status}`);
      return 1;
    }
    body = await res.json();
  } catch (err) {
    console.error(`rollguard status: cannot read ${url}: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  }
  console.log(JSON.stringify(body, null, 2));
  return 0;
}
