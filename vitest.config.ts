import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          environment: 'node',
        },
      },
      {
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          environment: 'node',
          globalSetup: ['test/env/global-setup.ts'],
          testTimeout: 120_000,
          hookTimeout: 180_000,
          // every file makes its own namespace in one shared control plane
          fileParallelism: true,
          maxWorkers: 2,
        },
      },
    ],
  },
});
