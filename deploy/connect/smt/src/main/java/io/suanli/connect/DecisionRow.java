/*
 * Suanli: one flat row per scheduling decision, for the Debezium JDBC sink.
 *
 * Input: the value of a record of <namespace>.decisions as the Apicurio Avro converter reads
 * it (a Struct named io.suanli.events.TaskPlaced, TaskPending, TaskUnschedulable,
 * TaskReleased, TaskPreempted or TaskMigrated, with a nested Provenance).
 * Output: a Struct of one fixed schema (io.suanli.connect.DecisionRow) whatever the kind:
 * scalar columns for the ids, node, strategy, decision time and both log positions (the
 * decision record's own topic/partition/offset and the cell-log input it was decided at),
 * and JSON text for the lists (candidates, filter outcomes, reasons, path, GPU devices).
 * The key becomes the event id, so the sink upserts by it.
 *
 * Records that are not decisions (or tombstones) are dropped. No dependencies beyond the
 * Connect API; compiled by deploy/connect.py with javac.
 */
package io.suanli.connect;

import java.util.Date;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.ConnectRecord;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.data.Timestamp;
import org.apache.kafka.connect.errors.DataException;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.transforms.Transformation;

public class DecisionRow<R extends ConnectRecord<R>> implements Transformation<R> {

    static final Map<String, String> KINDS = Map.of(
            "TaskPlaced", "placement",
            "TaskPending", "pending",
            "TaskUnschedulable", "rejection",
            "TaskReleased", "release",
            "TaskPreempted", "preemption",
            "TaskMigrated", "migration");

    static final Schema OPT_STRING = Schema.OPTIONAL_STRING_SCHEMA;
    static final Schema OPT_INT = Schema.OPTIONAL_INT32_SCHEMA;
    static final Schema OPT_LONG = Schema.OPTIONAL_INT64_SCHEMA;

    public static final Schema ROW = SchemaBuilder.struct().name("io.suanli.connect.DecisionRow").version(1)
            .field("event_id", Schema.STRING_SCHEMA)
            .field("kind", Schema.STRING_SCHEMA)
            .field("event", Schema.STRING_SCHEMA)
            .field("decision_id", OPT_STRING)
            .field("task_id", OPT_STRING)
            .field("tenant", OPT_STRING)
            .field("cell", OPT_STRING)
            .field("node_id", OPT_STRING)
            .field("from_node", OPT_STRING)
            .field("decided_at", Timestamp.builder().optional().build())
            .field("strategy", OPT_STRING)
            .field("strategy_version", OPT_STRING)
            .field("strategy_digest", OPT_STRING)
            .field("matched_rule", OPT_STRING)
            .field("decision_topic", OPT_STRING)
            .field("decision_partition", OPT_INT)
            .field("decision_offset", OPT_LONG)
            .field("input_topic", OPT_STRING)
            .field("input_partition", OPT_INT)
            .field("input_offset", OPT_LONG)
            .field("top_candidate", OPT_STRING)
            .field("top_score", Schema.OPTIONAL_FLOAT64_SCHEMA)
            .field("candidates", OPT_STRING)
            .field("filtered", OPT_STRING)
            .field("reasons", OPT_STRING)
            .field("path", OPT_STRING)
            .field("queue_position", OPT_INT)
            .field("cause", OPT_STRING)
            .field("reason", OPT_STRING)
            .field("preempted_by", OPT_STRING)
            .field("gpu_devices", OPT_STRING)
            .field("gpu_milli", OPT_INT)
            .field("cpu_milli", OPT_INT)
            .field("memory_mib", OPT_INT)
            .build();

    @Override
    public void configure(Map<String, ?> configs) {
    }

    @Override
    public R apply(R record) {
        if (!(record.value() instanceof Struct)) {
            return null;                        // tombstone or not a record: nothing to store
        }
        Struct in = (Struct) record.value();
        String event = eventName(in.schema());
        String kind = KINDS.get(event);
        if (kind == null) {
            return null;                        // not a decision
        }
        Struct out = new Struct(ROW);
        String eventId = str(in, "event_id");
        if (eventId == null) {
            throw new DataException("decision without event_id at " + record.topic());
        }
        out.put("event_id", eventId);
        out.put("kind", kind);
        out.put("event", event);
        for (String f : new String[]{"decision_id", "task_id", "tenant", "cell", "cause", "reason", "preempted_by"}) {
            out.put(f, str(in, f));
        }
        String node = str(in, "node_id");
        out.put("node_id", node != null ? node : str(in, "to_node"));
        out.put("from_node", str(in, "from_node"));
        for (String f : new String[]{"queue_position", "gpu_milli", "cpu_milli", "memory_mib"}) {
            Object v = get(in, f);
            out.put(f, v == null ? null : ((Number) v).intValue());
        }
        if (get(in, "gpu_devices") != null) {
            out.put("gpu_devices", Json.of(get(in, "gpu_devices")));
        }
        if (get(in, "reasons") != null) {
            out.put("reasons", Json.of(get(in, "reasons")));
        }
        out.put("decision_topic", record.topic());
        out.put("decision_partition", record.kafkaPartition());
        if (record instanceof SinkRecord) {
            out.put("decision_offset", ((SinkRecord) record).kafkaOffset());
        }
        Object p = get(in, "provenance");
        if (p instanceof Struct) {
            Struct prov = (Struct) p;
            Object at = get(prov, "decided_at");
            if (at instanceof Date) {
                out.put("decided_at", at);
            } else if (at instanceof Number) {
                out.put("decided_at", new Date(((Number) at).longValue()));
            }
            out.put("matched_rule", str(prov, "matched_rule"));
            Object s = get(prov, "strategy");
            if (s instanceof Struct) {
                out.put("strategy", str((Struct) s, "name"));
                out.put("strategy_version", str((Struct) s, "version"));
                out.put("strategy_digest", str((Struct) s, "config_digest"));
            }
            Object input = get(prov, "input");
            if (input instanceof Struct) {
                Struct i = (Struct) input;
                out.put("input_topic", str(i, "topic"));
                Object part = get(i, "partition");
                Object off = get(i, "offset");
                out.put("input_partition", part == null ? null : ((Number) part).intValue());
                out.put("input_offset", off == null ? null : ((Number) off).longValue());
            }
            Object cands = get(prov, "candidates");
            out.put("candidates", Json.of(cands));
            if (cands instanceof List && !((List<?>) cands).isEmpty() && ((List<?>) cands).get(0) instanceof Struct) {
                Struct top = (Struct) ((List<?>) cands).get(0);
                out.put("top_candidate", str(top, "node_id"));
                Object score = get(top, "score");
                out.put("top_score", score == null ? null : ((Number) score).doubleValue());
            }
            out.put("filtered", Json.of(get(prov, "filtered")));
            out.put("path", Json.of(get(prov, "path")));
        }
        return record.newRecord(record.topic(), record.kafkaPartition(), Schema.STRING_SCHEMA, eventId,
                ROW, out, record.timestamp());
    }

    static String eventName(Schema schema) {
        String name = schema.name();
        if (name == null) {
            return "";
        }
        int dot = name.lastIndexOf('.');
        return dot >= 0 ? name.substring(dot + 1) : name;
    }

    static Object get(Struct s, String field) {
        Field f = s.schema().field(field);
        return f == null ? null : s.get(f);
    }

    static String str(Struct s, String field) {
        Object v = get(s, field);
        return v == null ? null : v.toString();
    }

    @Override
    public ConfigDef config() {
        return new ConfigDef();
    }

    @Override
    public void close() {
    }

    /** Minimal JSON writer for Connect values (Struct, List, Map, primitives, Date). */
    static final class Json {
        static String of(Object value) {
            if (value == null) {
                return null;
            }
            StringBuilder sb = new StringBuilder();
            write(sb, value);
            return sb.toString();
        }

        static void write(StringBuilder sb, Object v) {
            if (v == null) {
                sb.append("null");
            } else if (v instanceof Struct) {
                Struct s = (Struct) v;
                sb.append('{');
                boolean first = true;
                for (Field f : s.schema().fields()) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
                    string(sb, f.name());
                    sb.append(':');
                    write(sb, s.get(f));
                }
                sb.append('}');
            } else if (v instanceof List) {
                sb.append('[');
                boolean first = true;
                for (Object item : (List<?>) v) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
                    write(sb, item);
                }
                sb.append(']');
            } else if (v instanceof Map) {
                sb.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
                    string(sb, String.valueOf(e.getKey()));
                    sb.append(':');
                    write(sb, e.getValue());
                }
                sb.append('}');
            } else if (v instanceof Double || v instanceof Float) {
                double d = ((Number) v).doubleValue();
                if (Double.isNaN(d) || Double.isInfinite(d)) {
                    sb.append("null");
                } else {
                    sb.append(d);
                }
            } else if (v instanceof Number || v instanceof Boolean) {
                sb.append(v);
            } else if (v instanceof Date) {
                sb.append(((Date) v).getTime());
            } else {
                string(sb, v.toString());
            }
        }

        static void string(StringBuilder sb, String s) {
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"': sb.append("\\\""); break;
                    case '\\': sb.append("\\\\"); break;
                    case '\n': sb.append("\\n"); break;
                    case '\r': sb.append("\\r"); break;
                    case '\t': sb.append("\\t"); break;
                    default:
                        if (c < 0x20) {
                            sb.append(String.format("\\u%04x", (int) c));
                        } else {
                            sb.append(c);
                        }
                }
            }
            sb.append('"');
        }
    }
}
