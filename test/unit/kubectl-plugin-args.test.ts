import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { UsageError, parsePluginArgs } from '../../src/kubectl-plugin/args.js';
import { propertyRuns } from '../env/property-runs.js';

describe('kubectl rollguard arguments (kubectl passes everything after the plugin name through)', () => {
  it.each([
    [['why', 'sts/web'], { command: 'why', kind: 'StatefulSet', name: 'web', output: 'text', allNamespaces: false }],
    [['why', 'statefulset.apps/web', '-n', 'shop'], { command: 'why', kind: 'StatefulSet', name: 'web', namespace: 'shop' }],
    [['why', '-nshop', 'deploy/api', '-ojson'], { command: 'why', kind: 'Deployment', name: 'api', namespace: 'shop', output: 'json' }],
    [['why', 'DaemonSet/agent', '--namespace=kube-system', '--output', 'json', '--context', 'prod', '--kubeconfig=/k'], { kind: 'DaemonSet', name: 'agent', namespace: 'kube-system', output: 'json', context: 'prod', kubeconfig: '/k' }],
    [['list', '-A'], { command: 'list', allNamespaces: true }],
    [['list', '--namespace', 'shop', '-o', 'json'], { command: 'list', namespace: 'shop', output: 'json' }],
    [[], { command: 'help' }],
    [['why', 'sts/web', '--help'], { command: 'help' }],
    [['--version'], { command: 'version' }],
  ])('%j', (argv, want) => {
    expect(parsePluginArgs(argv)).toMatchObject(want);
  });

  it.each([
    [['restart', 'sts/web'], 'unknown command "restart"'],
    [['why'], 'why takes one <kind>/<name>, got none'],
    [['why', 'web'], '"web" is not <kind>/<name>'],
    [['why', 'pod/web-0'], '"pod" is not a kind rollguard restarts'],
    [['why', 'rollout/web'], "Argo Rollouts' Rollouts are restarted with --argo-rollouts but not explained by why or list yet (docs/argo-rollouts.md): kubectl describe rollout web"],
    [['why', 'ro.argoproj.io/web'], 'not explained by why or list yet'],
    [['why', 'sts/web', 'sts/db'], 'why takes one <kind>/<name>, got sts/web sts/db'],
    [['why', 'sts/web', '-n'], '-n needs a value'],
    [['why', 'sts/web', '-o', 'yaml'], '-o yaml: the output is json or text'],
    [['why', 'sts/web', '-A'], '-A is for list'],
    [['why', 'sts/web', '--watch'], 'unknown flag --watch'],
    [['list', 'extra'], 'list takes no argument'],
    [['list', '-A', '-n', 'x'], '-n and -A exclude each other'],
  ])('%j is a usage error naming what is wrong', (argv, message) => {
    expect(() => parsePluginArgs(argv)).toThrow(UsageError);
    expect(() => parsePluginArgs(argv)).toThrow(message);
  });

  it('never fails with anything but a usage error', () => {
    const word = fc.oneof(fc.constantFrom('why', 'list', '-n', '-o', '-A', '--namespace', '--output=json', 'sts/web', 'json', '--context', '-h'), fc.string({ maxLength: 12 }));
    fc.assert(
      fc.property(fc.array(word, { maxLength: 6 }), (argv) => {
        try {
          const parsed = parsePluginArgs(argv);
          expect(['why', 'list', 'help', 'version']).toContain(parsed.command);
          if (parsed.command === 'why') expect(parsed.name).toBeTruthy();
        } catch (err) {
          expect(err).toBeInstanceOf(UsageError);
        }
      }),
      propertyRuns(5_000),
    );
  });
});
