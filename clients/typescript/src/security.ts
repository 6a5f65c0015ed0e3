/**
 * The broker's security, from the environment shared by every producer under clients/ (never
 * from flags: a command line shows in `ps` and in logs):
 *
 * - SUANLI_KAFKA_SECURITY_PROTOCOL: PLAINTEXT (default) or SASL_SSL
 * - SUANLI_KAFKA_SASL_MECHANISM: SCRAM-SHA-512 (default) or SCRAM-SHA-256
 * - SUANLI_KAFKA_USERNAME, SUANLI_KAFKA_PASSWORD: the SCRAM credentials
 * - SUANLI_KAFKA_CA: PEM file of the CA that signed the broker's certificate
 *
 * SASL_SSL becomes kafkajs' `ssl: { ca }` (only that CA is trusted; Node checks the broker's
 * certificate against the host dialled, DNS name or IP) and `sasl: { mechanism, username,
 * password }`. No error message shows the password.
 */
import { readFileSync } from 'node:fs';
import type { KafkaConfig, SASLOptions } from 'kafkajs';

export const ENV = {
  protocol: 'SUANLI_KAFKA_SECURITY_PROTOCOL',
  mechanism: 'SUANLI_KAFKA_SASL_MECHANISM',
  username: 'SUANLI_KAFKA_USERNAME',
  password: 'SUANLI_KAFKA_PASSWORD',
  ca: 'SUANLI_KAFKA_CA',
} as const;

export type KafkaSecurity = Pick<KafkaConfig, 'ssl' | 'sasl'>;

/** kafkajs' `ssl` and `sasl` for `env` (default: process.env); `{}` for PLAINTEXT. An empty
 * value counts as unset. Throws an Error naming the variable at fault. */
export function kafkaSecurityFromEnv(env: NodeJS.ProcessEnv = process.env): KafkaSecurity {
  const get = (name: string): string | undefined => env[name] || undefined;
  const protocol = get(ENV.protocol);
  switch ((protocol ?? 'PLAINTEXT').toUpperCase()) {
    case 'PLAINTEXT':
      return {};
    case 'SASL_SSL':
      break;
    default:
      throw new Error(`${ENV.protocol} ${JSON.stringify(protocol)} is not supported: use PLAINTEXT or SASL_SSL`);
  }
  const missing = [ENV.username, ENV.password, ENV.ca].filter((name) => get(name) === undefined);
  if (missing.length > 0) {
    throw new Error(`${ENV.protocol} is SASL_SSL but ${missing.join(', ')} ${missing.length === 1 ? 'is' : 'are'} not set`);
  }
  const mechanism = (get(ENV.mechanism) ?? 'SCRAM-SHA-512').toUpperCase();
  if (mechanism !== 'SCRAM-SHA-512' && mechanism !== 'SCRAM-SHA-256') {
    throw new Error(`${ENV.mechanism} ${JSON.stringify(get(ENV.mechanism))} is not supported: use SCRAM-SHA-512 or SCRAM-SHA-256`);
  }
  const caFile = get(ENV.ca)!;
  let ca: string;
  try {
    ca = readFileSync(caFile, 'utf8');
  } catch (e) {
    throw new Error(`${ENV.ca}: cannot read the CA file: ${e instanceof Error ? e.message : e}`);
  }
  if (!ca.includes('-----BEGIN CERTIFICATE-----')) throw new Error(`${ENV.ca} ${caFile}: no PEM certificate in it`);
  const credentials = { username: get(ENV.username)!, password: get(ENV.password)! };
  const sasl: SASLOptions = mechanism === 'SCRAM-SHA-512'
    ? { mechanism: 'scram-sha-512', ...credentials }
    : { mechanism: 'scram-sha-256', ...credentials };
  return { ssl: { ca: [ca] }, sasl };
}
