package io.suanli.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Sends Suanli events (JSON convention) to Kafka as Avro in the Confluent wire format:
 * byte 0x00, the 4-byte big-endian schema id, the Avro binary body. Idempotent, acks=all.
 */
public final class SuanliProducer implements AutoCloseable {
  public static final String NAMESPACE = "io.suanli.events";

  /** Event kind -> the payload field used as record key (streams/topics.py RAW_ROUTES). */
  public static final Map<String, String> KEY_FIELDS = Map.of(
      "TaskSubmitted", "task_id", "TaskCancelled", "task_id", "ReservationBid", "bid_id",
      "NodeRegistered", "node_id", "NodeHeartbeat", "node_id", "NodeMetrics", "node_id",
      "NodeStatusChanged", "node_id", "TaskStatusChanged", "task_id", "DispatchAck", "task_id",
      "PolicyChanged", "cell");

  private final KafkaProducer<String, byte[]> kafka;
  private final Registry registry;
  private final Map<String, String> schemaTexts = new HashMap<>();

  /** Connects to the brokers with the security of the environment ({@link KafkaSecurity#fromEnv}). */
  public SuanliProducer(String brokers, String registryUrl) {
    this(brokers, registryUrl, KafkaSecurity.fromEnv());
  }

  /** Connects to the brokers with these security properties (empty: PLAINTEXT). */
  public SuanliProducer(String brokers, String registryUrl, Properties security) {
    Properties p = new Properties();
    p.putAll(security);
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
    p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "none");
    p.put(ProducerConfig.LINGER_MS_CONFIG, 0);
    p.put(ProducerConfig.CLIENT_ID_CONFIG, "suanli-java-producer");
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    this.kafka = new KafkaProducer<>(p);
    this.registry = new Registry(registryUrl);
  }

  public static String subject(String kind) {
    return kind.contains(".") ? kind : NAMESPACE + "." + kind;
  }

  /** Use (and register) this schema text for the kind instead of the subject's latest version. */
  public void useSchema(String kind, String schemaText) {
    schemaTexts.put(subject(kind), schemaText);
  }

  /** The wire-format bytes of one event. */
  public byte[] encode(String kind, JsonNode event) throws IOException {
    String subject = subject(kind);
    String text = schemaTexts.get(subject);
    Registry.Entry entry = text != null ? registry.register(subject, text) : registry.latest(subject);
    byte[] body = entry.codec().encode(event);
    return ByteBuffer.allocate(5 + body.length).put((byte) 0).putInt(entry.id()).put(body).array();
  }

  /**
   * Whether a record of shortKind gets the header "suanli-lane: urgent": a task labelled
   * "scheduling: urgent", as the control plane's own producers do (streams/intake.lane_headers).
   * The header only ends intake's micro-batch wait early; urgency itself is read from the labels.
   */
  static boolean urgent(String shortKind, JsonNode event) {
    JsonNode lane = event.path("labels").path("scheduling");
    return shortKind.equals("TaskSubmitted") && lane.isTextual() && lane.asText().equals("urgent");
  }

  /** Produces the events to topic, keyed by the kind's key field, and waits until stored. */
  public List<RecordMetadata> send(String topic, String kind, List<JsonNode> events)
      throws IOException, InterruptedException, ExecutionException {
    String shortKind = kind.substring(kind.lastIndexOf('.') + 1);
    String keyField = KEY_FIELDS.get(shortKind);
    if (keyField == null) {
      throw new IllegalArgumentException(kind + " is not a producer-side event (known: " + KEY_FIELDS.keySet() + ")");
    }
    List<Future<RecordMetadata>> pending = new ArrayList<>();
    for (JsonNode event : events) {
      JsonNode key = event.get(keyField);
      if (key == null || !key.isTextual() || key.asText().isEmpty()) {
        throw new IllegalArgumentException(kind + ": the key field " + keyField + " must be a non-empty string");
      }
      ProducerRecord<String, byte[]> record = new ProducerRecord<>(topic, key.asText(), encode(kind, event));
      if (urgent(shortKind, event)) {
        record.headers().add("suanli-lane", "urgent".getBytes(StandardCharsets.UTF_8));
      }
      pending.add(kafka.send(record));
    }
    kafka.flush();
    List<RecordMetadata> stored = new ArrayList<>();
    for (Future<RecordMetadata> f : pending) {
      stored.add(f.get());
    }
    return stored;
  }

  @Override
  public void close() {
    kafka.close();
  }
}
