import fs from 'node:fs';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { candidatePort, freePort } from '../../src/dev/ports.js';

const ephemeralLow = (): number =>
  fs.existsSync('/proc/sys/net/ipv4/ip_local_port_range') ? Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) : 32768;

describe('freePort', () => {
  it('maps [0, 1) onto the ports from 10000 up to the one below the ephemeral range', () => {
    expect(candidatePort(0, 32768)).toBe(10000);
    expect(candidatePort(0.999999, 32768)).toBe(32767);
    expect(candidatePort(0.5, 20000)).toBe(15000);
  });

  it('hands out ports below the ephemeral range that can be listened on', async () => {
    const low = ephemeralLow();
    for (let i = 0; i < 5; i++) {
      const port = await freePort();
      expect(port).toBeGreaterThanOrEqual(10000);
      expect(port).toBeLessThan(low);
      await new Promise<void>((resolve, reject) => {
        const srv = net.createServer().once('error', reject);
        srv.listen(port, '127.0.0.1', () => srv.close(() => resolve()));
      });
    }
  });
});
