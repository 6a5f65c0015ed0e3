package io.suanli.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.MappingIterator;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

/**
 * {@code produce}: sends a TaskSubmitted or ReservationBid built from flags, or the events of
 * a JSON file (an object, an array, or one object per line) of one --kind.
 */
final class Produce {
  private Produce() {}

  static final String USAGE = String.join("\n",
      "usage: produce [--brokers H:P] [--registry URL] [--topic T] [--schema FILE]",
      "         (--task-id ID | --bid-id ID | --kind KIND --file FILE|-)",
      "         [--tenant T] [--cell C] [--cpu-milli N] [--memory-mib N] [--gpu-count N] [--gpu-milli N]",
      "         [--gpu-model M]... [--gpu-memory-mib N] [--qos GOLD|SILVER|BRONZE] [--priority N]",
      "         [--label k=v]... [--duration-ms N] [--at MS] [--start-at MS] [--latest-start MS]",
      "         [--gang true|false] [--price X] [--event-id ID]");

  static int run(String[] args) throws Exception {
    Map<String, List<String>> opt = parse(args);
    // SUANLI_KAFKA_* (SASL_SSL): refused here, before anything else, if incomplete.
    Properties security = KafkaSecurity.fromEnv();
    String brokers = one(opt, "brokers", "127.0.0.1:19092");
    String registry = one(opt, "registry", "http://127.0.0.1:18081/apis/ccompat/v7");
    String topic = one(opt, "topic", "suanli.raw.tasks");
    long now = System.currentTimeMillis();
    long at = Long.parseLong(one(opt, "at", Long.toString(now)));
    String kind = one(opt, "kind", null);
    List<JsonNode> events = new ArrayList<>();

    if (opt.containsKey("file")) {
      if (kind == null) {
        throw new IllegalArgumentException("--file needs --kind");
      }
      events.addAll(readEvents(one(opt, "file", null)));
    } else if (opt.containsKey("task-id") || opt.containsKey("bid-id")) {
      ObjectNode resources = AvroJson.JSON.createObjectNode()
          .put("cpu_milli", Integer.parseInt(one(opt, "cpu-milli", "1000")))
          .put("memory_mib", Integer.parseInt(one(opt, "memory-mib", "1024")))
          .put("gpu_count", Integer.parseInt(one(opt, "gpu-count", "0")))
          .put("gpu_milli", Integer.parseInt(one(opt, "gpu-milli", "0")));
      ArrayNode models = resources.putArray("gpu_models");
      opt.getOrDefault("gpu-model", List.of()).forEach(models::add);
      resources.put("gpu_memory_mib", Integer.parseInt(one(opt, "gpu-memory-mib", "0")));
      resources.putArray("accelerators");
      ObjectNode e = AvroJson.JSON.createObjectNode();
      String duration = one(opt, "duration-ms", null);
      if (opt.containsKey("task-id")) {
        kind = "TaskSubmitted";
        String id = one(opt, "task-id", null);
        e.put("event_id", one(opt, "event-id", "submit/" + id)).put("task_id", id)
            .put("tenant", one(opt, "tenant", "default")).put("cell", one(opt, "cell", "openb"))
            .put("submitted_at", at).set("resources", resources);
        e.put("qos_tier", one(opt, "qos", "SILVER").toUpperCase())
            .put("priority", Integer.parseInt(one(opt, "priority", "0")));
        ObjectNode labels = e.putObject("labels");
        for (String kv : opt.getOrDefault("label", List.of())) {
          int eq = kv.indexOf('=');
          if (eq < 0) {
            throw new IllegalArgumentException("--label " + kv + ": want key=value");
          }
          labels.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        e.putNull("deadline");
        if (duration == null) {
          e.putNull("duration_estimate_ms");
        } else {
          e.put("duration_estimate_ms", Long.parseLong(duration));
        }
        e.putNull("command").putNull("profile");
      } else {
        kind = "ReservationBid";
        String id = one(opt, "bid-id", null);
        e.put("event_id", one(opt, "event-id", "bid/" + id)).put("bid_id", id)
            .put("tenant", one(opt, "tenant", "default")).put("cell", one(opt, "cell", "openb"))
            .set("resources", resources);
        long start = Long.parseLong(one(opt, "start-at", Long.toString(now + 3_600_000)));
        e.put("start_at", start)
            .put("duration_ms", Long.parseLong(duration == null ? "3600000" : duration))
            .put("price", Double.parseDouble(one(opt, "price", "0"))).put("at", at);
        // Left out unless given: the schema's defaults (null: a fixed window; true: all or nothing).
        String latest = one(opt, "latest-start", null);
        if (latest != null) {
          long latestStart = Long.parseLong(latest);
          if (latestStart < start) {
            throw new IllegalArgumentException("--latest-start " + latest + " is before the start " + start);
          }
          e.put("latest_start_at", latestStart);
        }
        String gang = one(opt, "gang", null);
        if (gang != null) {
          if (!gang.equals("true") && !gang.equals("false")) {
            throw new IllegalArgumentException("--gang " + gang + ": want true or false");
          }
          e.put("gang", Boolean.parseBoolean(gang));
        }
      }
      events.add(e);
    } else {
      System.err.println(USAGE);
      return 2;
    }

    try (SuanliProducer producer = new SuanliProducer(brokers, registry, security)) {
      if (opt.containsKey("schema")) {
        producer.useSchema(kind, Files.readString(Path.of(one(opt, "schema", null))).strip());
      }
      producer.send(topic, kind, events);
    }
    System.out.println("produced " + events.size() + " " + kind + " to " + topic);
    return 0;
  }

  static List<JsonNode> readEvents(String file) throws Exception {
    String text;
    if (file.equals("-")) {
      try (InputStream in = System.in) {
        text = new String(in.readAllBytes(), StandardCharsets.UTF_8);
      }
    } else {
      text = Files.readString(Path.of(file));
    }
    List<JsonNode> out = new ArrayList<>();
    try (MappingIterator<JsonNode> it = AvroJson.JSON.readerFor(JsonNode.class).readValues(text)) {
      while (it.hasNext()) {
        JsonNode node = it.next();
        if (node.isArray()) {
          node.forEach(out::add);
        } else {
          out.add(node);
        }
      }
    }
    return out;
  }

  static Map<String, List<String>> parse(String[] args) {
    Map<String, List<String>> out = new LinkedHashMap<>();
    for (int i = 0; i < args.length; i++) {
      String a = args[i];
      if (!a.startsWith("--")) {
        throw new IllegalArgumentException("unexpected argument " + a + "\n" + USAGE);
      }
      String name = a.substring(2);
      String value;
      int eq = name.indexOf('=');
      if (eq >= 0) {
        value = name.substring(eq + 1);
        name = name.substring(0, eq);
      } else if (name.equals("check")) {
        value = "true";
      } else if (i + 1 < args.length) {
        value = args[++i];
      } else {
        throw new IllegalArgumentException("--" + name + " needs a value");
      }
      out.computeIfAbsent(name, k -> new ArrayList<>()).add(value);
    }
    return out;
  }

  static String one(Map<String, List<String>> opt, String name, String dflt) {
    List<String> v = opt.get(name);
    return v == null ? dflt : v.get(v.size() - 1);
  }
}
