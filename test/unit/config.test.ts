import { describe, expect, it } from 'vitest';
import { ConfigError, parseArgs, parseDuration } from '../../src/config.js';
import { DEFAULT_DEBOUNCE_MS, DEFAULT_MAX_RESTARTS_PER_SECOND, DEFAULT_RESYNC_PERIOD_MS, DEFAULT_WORKERS } from '../../src/restarter/controller.js';
import { DEFAULT_CA_VALIDITY_SECONDS, DEFAULT_SERVING_KEY_BITS, DEFAULT_SERVING_VALIDITY_SECONDS, renewalPolicy } from '../../src/tls/renewal.js';

const parse = (argv: string[], env: Record<string, string> = {}) => parseArgs(argv, env, 'serve').config;

describe('parseDuration', () => {
  it.each([
    ['500ms', 500],
    ['10s', 10_000],
    ['5m', 300_000],
    ['1h30m', 5_400_000],
    ['2', 2_000],
    ['1.5s', 1_500],
  ])('%s is %d ms', (text, ms) => expect(parseDuration(text)).toBe(ms));

  it.each(['', 'ten', '5x', '5s garbage', '-1s'])('%j is not a duration', (text) => expect(parseDuration(text)).toBeUndefined());
});

describe('parseArgs', () => {
  it('has working defaults', () => {
    const c = parse([]);
    expect(c.webhookPort).toBe(9443);
    expect(c.debounce).toBe(5_000);
    expect(c.leaderElection).toBe(true);
    expect(c.watchNamespaces).toEqual([]);
    expect(c.shutdownDelay).toBeLessThan(c.shutdownTimeout);
  });

  it('defaults every flag to what the part it configures does without it', () => {
    const c = parse([]);
    expect(c.caValidity).toBe(DEFAULT_CA_VALIDITY_SECONDS * 1000);
    expect(c.certValidity).toBe(DEFAULT_SERVING_VALIDITY_SECONDS * 1000);
    expect(c.keyBits).toBe(DEFAULT_SERVING_KEY_BITS);
    const policy = renewalPolicy({ serviceName: 's', namespace: 'n' });
    expect(policy.caKeyBits).toBe(c.keyBits);
    expect(c.debounce).toBe(DEFAULT_DEBOUNCE_MS);
    expect(c.maxRestartsPerSecond).toBe(DEFAULT_MAX_RESTARTS_PER_SECOND);
    expect(c.workers).toBe(DEFAULT_WORKERS);
    expect(c.resyncPeriod).toBe(DEFAULT_RESYNC_PERIOD_MS);
  });

  it('takes --flag value, --flag=value and bare booleans', () => {
    const c = parse(['--webhook-port', '8443', '--debounce=2s', '--leader-election', '--watch-namespaces', 'a, b']);
    expect(c).toMatchObject({ webhookPort: 8443, debounce: 2_000, leaderElection: true, watchNamespaces: ['a', 'b'] });
    expect(parse(['--leader-election=false']).leaderElection).toBe(false);
  });

  it('reads environment variables, and flags win over them', () => {
    expect(parse([], { ROLLGUARD_WEBHOOK_PORT: '7443' }).webhookPort).toBe(7443);
    expect(parse(['--webhook-port=6443'], { ROLLGUARD_WEBHOOK_PORT: '7443' }).webhookPort).toBe(6443);
  });

  it.each([
    [['--webhook-port', 'abc'], /--webhook-port="abc": expected a whole number/],
    [['--webhook-port', '70000'], /--webhook-port="70000": must be at most 65535/],
    [['--debounce', 'soon'], /--debounce="soon": expected a duration/],
    [['--log-level', 'loud'], /--log-level="loud": expected one of/],
    [['--leader-election=maybe'], /--leader-election="maybe": expected true or false/],
    [['--no-such-flag'], /unknown flag --no-such-flag/],
    [['--workers'], /flag --workers needs a value/],
    [['--tls-cert-file', '/x.crt'], /--tls-cert-file and --tls-key-file go together/],
    [['--renew-deadline', '20s'], /--renew-deadline .* must be shorter than --lease-duration/],
    [['--shutdown-delay', '30s'], /--shutdown-delay .* must be shorter than --shutdown-timeout/],
    [['--key-bits', '1024'], /--key-bits="1024": must be at least 2048/],
    [['--tls-extra-ips', 'not-an-ip'], /--tls-extra-ips entry "not-an-ip"/],
    [['--compat', 'reloader'], /--compat="reloader": expected stackable or empty/],
  ])('%j stops startup with a message naming the flag', (argv, message) => {
    expect(() => parse(argv)).toThrow(ConfigError);
    expect(() => parse(argv)).toThrow(message);
  });

  it('names the environment variable when that is what is wrong', () => {
    expect(() => parse([], { ROLLGUARD_WORKERS: '0' })).toThrow(/ROLLGUARD_WORKERS="0": must be at least 1/);
  });

  it('keeps positional arguments and help/version switches apart', () => {
    const r = parseArgs(['--help', 'extra', '--version'], {}, 'serve');
    expect(r).toMatchObject({ help: true, version: true, positional: ['extra'] });
  });

  it('knows which flags belong to which command', () => {
    expect(() => parseArgs(['--dev-dir', 'x'], {}, 'serve')).toThrow(/unknown flag --dev-dir/);
    expect(parseArgs(['--dev-dir', 'x'], {}, 'dev').config.devDir).toBe('x');
  });

  it('tells flags the user set (by flag or environment) from defaults', () => {
    const r = parseArgs(['--admin-port=8080', '--debounce', '2s'], { ROLLGUARD_WEBHOOK_HOST: '127.0.0.1' }, 'dev');
    expect([...r.given].sort()).toEqual(['admin-port', 'debounce', 'webhook-host']);
    expect(r.given.has('webhook-port')).toBe(false);
  });
});
