import { pino, type Logger } from 'pino';
import type { LogLevel } from './config.js';

/** Paths that may hold key material or Secret data: never written to a log. */
const REDACTED = ['keyPem', '*.keyPem', 'tls.key', '*.tls.key', 'data', '*.data', 'stringData', '*.stringData', 'caKey', '*.caKey'];

export function createLogger(level: LogLevel, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      name: 'rollguard',
      level,
      redact: { paths: REDACTED, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination,
  );
}
