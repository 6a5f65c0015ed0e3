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

  constructor(opts: ProducerOptions) {
    this.registry = new SchemaRegistry({ host: opts.registry }, { [SchemaType.AVRO]: AVSC_OPTIONS });
    const security = opts.security ?? kafkaSecurityFromEnv();
    this.kafka = new Kafka({ clientId: opts.clientId ?? 'suanli-ts-producer', brokers: opts.brokers, logLevel: logLevel.WARN, ...security });
  }

  async connect(): Promise<void> {
    // The Java-compatible murmur2 partitioner (kafkajs' v2 default; set to silence its notice).
    this.producer = this.kafka.producer({ idempotent: true, maxInFlightRequests: 1, createPartitioner: Partitioners.DefaultPartitioner });
    await this.producer.connect();
  }

  async disconnect(): Promise<void> {
    await this.producer?.disconnect();
  }

  /** Registers `schema` under the kind's subject (idempotent) and uses it for that kind. */
  async useSchema(kind: string, schema: string): Promise<number> {
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
    await this.producer.send({ topic, acks: -1, messages });
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
