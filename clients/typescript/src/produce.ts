/**
 * produce: sends a TaskSubmitted or ReservationBid built from flags, or the events of a JSON
 * file (an object, an array, or one object per line) of one --kind.
 *
 *   node dist/produce.js --task-id t-1 --cell openb --gpu-count 1 --gpu-milli 500 --gpu-model V100M16
 *   node dist/produce.js --bid-id b-1 --gpu-count 8 --gpu-milli 1000 --price 2.5
 *   node dist/produce.js --bid-id b-2 --gpu-count 4 --start-at MS --latest-start MS --gang false --price 1.5
 *   node dist/produce.js --kind TaskSubmitted --file tasks.json --topic suanli.raw.tasks
 *
 * A broker that requires SASL/SCRAM over TLS is configured by the environment only (never
 * flags, which show in `ps`): SUANLI_KAFKA_SECURITY_PROTOCOL=SASL_SSL, SUANLI_KAFKA_USERNAME,
 * SUANLI_KAFKA_PASSWORD, SUANLI_KAFKA_CA (PEM), SUANLI_KAFKA_SASL_MECHANISM (default
 * SCRAM-SHA-512); see security.ts.
 *
 * --timeout-ms (default 90000) bounds the whole run: past it, produce says what it was
 * waiting on (the brokers, the registry) and exits 1, instead of waiting for ever.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { SuanliProducer } from './producer.js';
import { kafkaSecurityFromEnv } from './security.js';

const { values: o } = parseArgs({
  options: {
    brokers: { type: 'string', default: '127.0.0.1:19092' },
    registry: { type: 'string', default: 'http://127.0.0.1:18081/apis/ccompat/v7' },
    topic: { type: 'string', default: 'suanli.raw.tasks' },
    kind: { type: 'string' },
    file: { type: 'string' },
    schema: { type: 'string' },
    'task-id': { type: 'string' },
    'bid-id': { type: 'string' },
    'event-id': { type: 'string' },
    tenant: { type: 'string', default: 'default' },
    cell: { type: 'string', default: 'openb' },
    'cpu-milli': { type: 'string', default: '1000' },
    'memory-mib': { type: 'string', default: '1024' },
    'gpu-count': { type: 'string', default: '0' },
    'gpu-milli': { type: 'string', default: '0' },
    'gpu-memory-mib': { type: 'string', default: '0' },
    'gpu-model': { type: 'string', multiple: true, default: [] },
    qos: { type: 'string', default: 'SILVER' },
    priority: { type: 'string', default: '0' },
    label: { type: 'string', multiple: true, default: [] },
    'duration-ms': { type: 'string' },
    at: { type: 'string' },
    'start-at': { type: 'string' },
    'latest-start': { type: 'string' },
    gang: { type: 'string' },
    price: { type: 'string', default: '0' },
    'timeout-ms': { type: 'string', default: '90000' },
  },
});

function int(name: string, text: string): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new Error(`--${name} ${text}: want an integer`);
  return n;
}

function num(name: string, text: string): number {
  const n = Number(text);
  if (text.trim() === '' || !Number.isFinite(n)) throw new Error(`--${name} ${text}: want a number`);
  return n;
}

function readEvents(path: string): Record<string, unknown>[] {
  const text = readFileSync(path === '-' ? 0 : path, 'utf8').trim();
  if (text.startsWith('[')) return JSON.parse(text);
  return text.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
}

async function main(): Promise<number> {
  // SUANLI_KAFKA_* (SASL_SSL): refused here, before anything else, if incomplete.
  const security = kafkaSecurityFromEnv();
  const now = Date.now();
  const at = o.at ? int('at', o.at) : now;
  const resources = {
    cpu_milli: int('cpu-milli', o['cpu-milli']!), memory_mib: int('memory-mib', o['memory-mib']!),
    gpu_count: int('gpu-count', o['gpu-count']!), gpu_milli: int('gpu-milli', o['gpu-milli']!),
    gpu_models: o['gpu-model'], gpu_memory_mib: int('gpu-memory-mib', o['gpu-memory-mib']!), accelerators: [],
  };
  let kind = o.kind;
  let events: Record<string, unknown>[];
  if (o.file) {
    if (!kind) throw new Error('--file needs --kind');
    events = readEvents(o.file);
  } else if (o['task-id']) {
    kind = 'TaskSubmitted';
    const id = o['task-id'];
    const labels: Record<string, string> = {};
    for (const kv of o.label!) {
      const eq = kv.indexOf('=');
      if (eq < 0) throw new Error(`--label ${kv}: want key=value`);
      labels[kv.slice(0, eq)] = kv.slice(eq + 1);
    }
    events = [{
      event_id: o['event-id'] ?? `submit/${id}`, task_id: id, tenant: o.tenant, cell: o.cell, submitted_at: at,
      resources, qos_tier: o.qos!.toUpperCase(), priority: int('priority', o.priority!), labels, deadline: null,
      duration_estimate_ms: o['duration-ms'] ? int('duration-ms', o['duration-ms']) : null, command: null, profile: null,
    }];
  } else if (o['bid-id']) {
    kind = 'ReservationBid';
    const id = o['bid-id'];
    const start = o['start-at'] ? int('start-at', o['start-at']) : now + 3_600_000;
    const bid: Record<string, unknown> = {
      event_id: o['event-id'] ?? `bid/${id}`, bid_id: id, tenant: o.tenant, cell: o.cell, resources,
      start_at: start,
      duration_ms: o['duration-ms'] ? int('duration-ms', o['duration-ms']) : 3_600_000, price: num('price', o.price!), at,
    };
    // Left out unless given: the schema's defaults (null: a fixed window; true: all or nothing).
    if (o['latest-start'] !== undefined) {
      const latest = int('latest-start', o['latest-start']);
      if (latest < start) throw new Error(`--latest-start ${latest} is before the start ${start}`);
      bid.latest_start_at = latest;
    }
    if (o.gang !== undefined) {
      if (o.gang !== 'true' && o.gang !== 'false') throw new Error(`--gang ${o.gang}: want true or false`);
      bid.gang = o.gang === 'true';
    }
    events = [bid];
  } else {
    console.error('give --task-id, --bid-id or --kind with --file (see the README)');
    return 2;
  }

  const producer = new SuanliProducer({ brokers: o.brokers!.split(','), registry: o.registry!, security });
  const timeoutMs = int('timeout-ms', o['timeout-ms']!);
  // unref: the watchdog alone never keeps the process alive.
  setTimeout(() => {
    console.error(`produce: gave up after ${timeoutMs} ms (--timeout-ms), still ${producer.phase}`);
    process.exit(1);
  }, timeoutMs).unref();
  await producer.connect();
  try {
    if (o.schema) await producer.useSchema(kind, readFileSync(o.schema, 'utf8').trim());
    await producer.send(o.topic!, kind, events);
  } finally {
    await producer.disconnect();
  }
  console.log(`produced ${events.length} ${kind} to ${o.topic}`);
  return 0;
}

main().then((code) => process.exit(code), (err) => {
  console.error(`produce: ${err instanceof Error ? err.message : err}`);
  if (err && typeof err === 'object' && 'paths' in err) console.error('invalid paths:', JSON.stringify((err as { paths: unknown }).paths));
  process.exit(1);
});
