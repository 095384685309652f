import { defineConfig } from 'vitest/config';

// The e2e suite (`npm run test:e2e`): rollguard's image and chart on a real node. Not part of
// `npm test`, whose config does not name it: it needs Linux and root, and installs Debian packages.
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          environment: 'node',
          globalSetup: ['test/e2e/global-setup.ts'],
          testTimeout: 300_000,
          hookTimeout: 600_000,
          // one node, one release at a time
          fileParallelism: false,
        },
      },
    ],
  },
});
