/**
 * Produces Suanli events to Kafka in the Confluent wire format with kafkajs and
 * @kafkajs/confluent-schema-registry (which talks to Apicurio's ccompat API as it is).
 */
import { COMPATIBILITY, SchemaRegistry, SchemaType } from '@kafkajs/confluent-schema-registry';
import { Kafka, logLevel, Partitioners, type Producer } from 'kafkajs';
import { AVSC_OPTIONS, toAvsc } from './avrojson.js';
import { kafkaSecurityFromEnv, type KafkaSecurity } from './security.js';

export const NAMESPACE = 'io.suanli.events';

/** Event kind -> the payload field used as record key (streams/topics.py RAW_ROUTES). */
export const KEY_FIELDS: Record<string, string> = {
  TaskSubmitted: 'task_id', TaskCancelled: 'task_id', ReservationBid: 'bid_id',
  NodeRegistered: 'node_id', NodeHeartbeat: 'node_id', NodeMetrics: 'node_id', NodeStatusChanged: 'node_id',
  TaskStatusChanged: 'task_id', DispatchAck: 'task_id', PolicyChanged: 'cell',
};

/**
 * How long one schema registry request may take. The registry client has no timeout of its
 * own, so a request whose answer never came would wait for ever, silently; with this it
 * fails, and is retried (below) like an answer of 5xx.
 */
export const REGISTRY_REQUEST_TIMEOUT_MS = 10_000;

/** A middleware of the registry client's HTTP layer (mappersmith) that sets each request's timeout. */
const registryTimeout = () => ({
  prepareRequest: async (next: () => Promise<{ enhance(extras: { timeout: number }): unknown }>) =>
    (await next()).enhance({ timeout: REGISTRY_REQUEST_TIMEOUT_MS }),
});

export const subject = (kind: string): string => (kind.includes('.') ? kind : `${NAMESPACE}.${kind}`);

export interface ProducerOptions {
  brokers: string[];
  registry: string;
  clientId?: string;
  /** kafkajs' `ssl` and `sasl`; default: the SUANLI_KAFKA_* environment (security.ts). */
  security?: KafkaSecurity;
}

export class SuanliProducer {
  readonly registry: SchemaRegistry;
  private readonly kafka: Kafka;
  private producer?: Producer;
  private readonly ids = new Map<string, number>();
  /** What the producer is waiting on now, for a caller's progress or timeout message. */
  phase = 'not connected';

  constructor(opts: ProducerOptions) {
    this.registry = new SchemaRegistry({
      host: opts.registry,
      middlewares: [registryTimeout as never],
      // The library retries a 5xx only; a timeout or a reset connection (no answer at all:
      // the response carries the client-side error) is as transient, so it is retried too.
      retry: { validateRetry: (r: { responseStatus: number; errors: unknown[] }) => r.responseStatus >= 500 || r.errors.length > 0 },
    }, { [SchemaType.AVRO]: AVSC_OPTIONS });
    const security = opts.security ?? kafkaSecurityFromEnv();
    this.kafka = new Kafka({
      clientId: opts.clientId ?? 'suanli-ts-producer', brokers: opts.brokers, logLevel: logLevel.WARN,
      connectionTimeout: 5_000, requestTimeout: 30_000, ...security,
    });
  }

  async connect(): Promise<void> {
    // The Java-compatible murmur2 partitioner (kafkajs' v2 default; set to silence its notice).
    this.producer = this.kafka.producer({ idempotent: true, maxInFlightRequests: 1, createPartitioner: Partitioners.DefaultPartitioner });
    this.phase = 'connecting to the brokers';
    await this.producer.connect();
    this.phase = 'connected';
  }

  async disconnect(): Promise<void> {
    this.phase = 'disconnecting from the brokers';
    await this.producer?.disconnect();
    this.phase = 'disconnected';
  }

  /** Registers `schema` under the kind's subject (idempotent) and uses it for that kind. */
  async useSchema(kind: string, schema: string): Promise<number> {
    this.phase = `registering the schema of ${kind}`;
    const { id } = await this.registry.register(
      { type: SchemaType.AVRO, schema },
      // The library refuses to register when the subject's rule differs from this one.
      { subject: subject(kind), compatibility: COMPATIBILITY.BACKWARD_TRANSITIVE },
    );
    this.ids.set(subject(kind), id);
    return id;
  }

  /** Schema id used for a kind: the registered one, else the subject's latest version. */
  async schemaId(kind: string): Promise<number> {
    const s = subject(kind);
    let id = this.ids.get(s);
    if (id === undefined) {
      id = await this.registry.getLatestSchemaId(s);
      this.ids.set(s, id);
    }
    return id;
  }

  /** Wire-format bytes of one event (JSON convention). */
  async encode(kind: string, event: unknown): Promise<Buffer> {
    this.phase = `reading the schema of ${kind} from the registry`;
    const id = await this.schemaId(kind);
    const type = await this.registry.getSchema(id);
    return this.registry.encode(id, toAvsc(type as never, event));
  }

  /** Produces events of one kind, keyed by the kind's key field; resolves once stored (acks=all). */
  async send(topic: string, kind: string, events: Record<string, unknown>[]): Promise<void> {
    if (!this.producer) throw new Error('connect() first');
    const keyField = KEY_FIELDS[kind.slice(kind.lastIndexOf('.') + 1)];
    if (!keyField) throw new Error(`${kind} is not a producer-side event (known: ${Object.keys(KEY_FIELDS).join(', ')})`);
    const messages = [];
    for (const event of events) {
      const key = event[keyField];
      if (typeof key !== 'string' || key === '') throw new Error(`${kind}: the key field ${keyField} must be a non-empty string`);
      messages.push({ key, value: await this.encode(kind, event), headers: laneHeaders(kind, event) });
    }
    this.phase = `sending ${messages.length} ${kind} to ${topic}`;
    await this.producer.send({ topic, acks: -1, messages });
    this.phase = 'sent';
  }
}

/**
 * The Kafka headers of a record of `kind` carrying `event`: `suanli-lane: urgent` for a task
 * labelled `scheduling: urgent`, none otherwise, as the control plane's own producers do
 * (streams/intake.lane_headers). The header only ends intake's micro-batch wait early;
 * urgency itself is read from the labels.
 */
export function laneHeaders(kind: string, event: Record<string, unknown>): Record<string, string> {
  const labels = event.labels as Record<string, unknown> | null | undefined;
  return kind.slice(kind.lastIndexOf('.') + 1) === 'TaskSubmitted' && labels?.scheduling === 'urgent'
    ? { 'suanli-lane': 'urgent' }
    : {};
}
