import http from 'node:http';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { freePort } from '../env/ports.js';
import { startBalancer, type Balancer } from '../env/tcp-balancer.js';
import { waitUntil } from '../env/wait.js';

/** A backend on loopback: answers each chunk with `name:chunk`, `name:bye` on the client's FIN; /readyz as told. */
interface FakeBackend {
  name: string;
  port: number;
  checkPort: number;
  ready: boolean;
  close(): Promise<void>;
}

async function listen(server: net.Server, port: number): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
}

async function fakeBackend(name: string, ready: boolean): Promise<FakeBackend> {
  const sockets = new Set<net.Socket>();
  const traffic = net.createServer({ allowHalfOpen: true }, (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('data', (chunk: Buffer) => socket.write(`${name}:${chunk.toString()}\n`));
    socket.on('end', () => socket.end(`${name}:bye\n`));
    socket.on('error', () => undefined);
  });
  const backend: FakeBackend = {
    name,
    port: await freePort(),
    checkPort: await freePort(),
    ready,
    async close() {
      for (const s of sockets) s.destroy();
      await Promise.all([new Promise((r) => traffic.close(r)), new Promise((r) => checks.close(r))]);
    },
  };
  const checks = http.createServer((req, res) => {
    res.writeHead(req.url === '/readyz' && backend.ready ? 200 : 503).end();
  });
  await listen(traffic, backend.port);
  await listen(checks, backend.checkPort);
  return backend;
}

/** A client connection through the balancer that says something and collects every line it hears. */
interface Client {
  socket: net.Socket;
  lines: string[];
  /** Resolves when the balancer's side is done: its FIN came (or the socket closed). */
  ended: Promise<void>;
  /** Sends `text` and resolves with the answer's line. */
  say(text: string): Promise<string>;
}

async function connect(port: number): Promise<Client> {
  const socket = net.connect({ host: '127.0.0.1', port, allowHalfOpen: true });
  const lines: string[] = [];
  let buffered = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    buffered += chunk;
    const parts = buffered.split('\n');
    buffered = parts.pop()!;
    lines.push(...parts);
  });
  socket.on('error', () => undefined);
  const ended = new Promise<void>((resolve) => socket.on('end', resolve).on('close', resolve));
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  return {
    socket,
    lines,
    ended,
    async say(text) {
      const before = lines.length;
      socket.write(text);
      await waitUntil(`an answer to ${text}`, () => lines.length > before || `heard ${JSON.stringify(lines)}`, { timeoutMs: 5_000, intervalMs: 10 });
      return lines[before]!;
    },
  };
}

/** Which backend answered a new connection. */
async function whoAnswers(port: number): Promise<string> {
  const client = await connect(port);
  try {
    return (await client.say('hello')).split(':')[0]!;
  } finally {
    client.socket.destroy();
  }
}

describe('test/env tcp-balancer', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  async function setUp(...readiness: boolean[]): Promise<{ balancer: Balancer; backends: FakeBackend[] }> {
    const backends: FakeBackend[] = [];
    for (const [i, ready] of readiness.entries()) {
      const backend = await fakeBackend(String.fromCharCode(97 + i), ready);
      cleanups.push(() => backend.close());
      backends.push(backend);
    }
    const balancer = await startBalancer(backends);
    cleanups.push(() => balancer.stop());
    return { balancer, backends };
  }

  const statesAre = (balancer: Balancer, want: Record<string, string>) => async (): Promise<true | string> => {
    const states = await balancer.serverStates();
    return JSON.stringify(states) === JSON.stringify(want) || JSON.stringify(states);
  };

  it('sends new connections only to backends whose /readyz answers, round robin among them', async () => {
    const { balancer, backends } = await setUp(true, false);
    await waitUntil('a UP, b DOWN', statesAre(balancer, { a: 'UP', b: 'DOWN' }));
    const first: string[] = [];
    for (let i = 0; i < 6; i++) first.push(await whoAnswers(balancer.port));
    expect(first).toEqual(Array(6).fill('a'));

    backends[1]!.ready = true;
    await waitUntil('both UP', statesAre(balancer, { a: 'UP', b: 'UP' }));
    const second: string[] = [];
    for (let i = 0; i < 6; i++) second.push(await whoAnswers(balancer.port));
    expect(second.filter((n) => n === 'a').length).toBe(3);
    expect(second.filter((n) => n === 'b').length).toBe(3);
  });

  it('keeps a connection open on a backend that goes DOWN, and sends new ones elsewhere', async () => {
    const { balancer, backends } = await setUp(true, false);
    await waitUntil('a UP', statesAre(balancer, { a: 'UP', b: 'DOWN' }));
    const held = await connect(balancer.port);
    cleanups.push(async () => void held.socket.destroy());
    expect(await held.say('one')).toBe('a:one');

    backends[1]!.ready = true;
    backends[0]!.ready = false;
    await waitUntil('a DOWN, b UP', statesAre(balancer, { a: 'DOWN', b: 'UP' }));
    expect(await whoAnswers(balancer.port)).toBe('b');
    // the connection made while a was UP still reaches a, both ways
    expect(await held.say('two')).toBe('a:two');
    // and a half-close passes through: the backend hears the FIN and still gets its last word out
    held.socket.end();
    await held.ended;
    expect(held.lines).toEqual(['a:one', 'a:two', 'a:bye']);
  });

  it('closes a new connection when no backend is ready, and routes again once one is', async () => {
    const { balancer, backends } = await setUp(false, false);
    await waitUntil('both checked', statesAre(balancer, { a: 'DOWN', b: 'DOWN' }));
    const refused = await connect(balancer.port);
    refused.socket.write('anyone?');
    await refused.ended;
    expect(refused.lines).toEqual([]);

    backends[0]!.ready = true;
    await waitUntil('a UP', statesAre(balancer, { a: 'UP', b: 'DOWN' }));
    expect(await whoAnswers(balancer.port)).toBe('a');
  });

  it('counts a check port that is not listening as a failed check', async () => {
    const { balancer, backends } = await setUp(true);
    await waitUntil('a UP', statesAre(balancer, { a: 'UP' }));
    await backends[0]!.close();
    await waitUntil('a DOWN', statesAre(balancer, { a: 'DOWN' }));
  });

  it('stop() ends the connections it carries and stops listening', async () => {
    const { balancer } = await setUp(true);
    await waitUntil('a UP', statesAre(balancer, { a: 'UP' }));
    const open = await connect(balancer.port);
    expect(await open.say('x')).toBe('a:x');
    await balancer.stop();
    await open.ended;
    await expect(connect(balancer.port)).rejects.toThrow(/ECONNREFUSED/);
  });
});
