package io.suanli.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;

/**
 * The three Confluent schema-registry calls a producer needs, over java.net.http: the latest
 * version of a subject, registering a schema (idempotent), and a schema by id. Works with
 * Confluent's registry and with Apicurio's ccompat API (e.g. http://host:8080/apis/ccompat/v7).
 */
public final class Registry {
  static final String CONTENT_TYPE = "application/vnd.schemaregistry.v1+json";

  /** A registered schema: its global id and the codec for its text. */
  public record Entry(int id, AvroJson codec) {}

  private final String baseUrl;
  private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
  private final Map<String, Entry> bySubject = new HashMap<>();
  private final Map<Integer, AvroJson> byId = new HashMap<>();

  public Registry(String baseUrl) {
    this.baseUrl = baseUrl.replaceAll("/+$", "");
  }

  /** The subject's latest version. */
  public synchronized Entry latest(String subject) throws IOException {
    Entry cached = bySubject.get(subject);
    if (cached != null) {
      return cached;
    }
    JsonNode got = call("GET", "/subjects/" + enc(subject) + "/versions/latest", null);
    return remember(subject, got.get("id").asInt(), got.get("schema").asText());
  }

  /** Registers {@code schemaText} under {@code subject} (idempotent) and returns it with its id. */
  public synchronized Entry register(String subject, String schemaText) throws IOException {
    ObjectNode body = AvroJson.JSON.createObjectNode().put("schema", schemaText).put("schemaType", "AVRO");
    JsonNode got = call("POST", "/subjects/" + enc(subject) + "/versions", body);
    return remember(subject, got.get("id").asInt(), schemaText);
  }

  /** The writer schema with this id. */
  public synchronized AvroJson byId(int id) throws IOException {
    AvroJson cached = byId.get(id);
    if (cached == null) {
      cached = AvroJson.parse(call("GET", "/schemas/ids/" + id, null).get("schema").asText());
      byId.put(id, cached);
    }
    return cached;
  }

  private Entry remember(String subject, int id, String text) {
    Entry entry = new Entry(id, AvroJson.parse(text));
    bySubject.put(subject, entry);
    byId.put(id, entry.codec());
    return entry;
  }

  private static String enc(String s) {
    return URLEncoder.encode(s, StandardCharsets.UTF_8);
  }

  private JsonNode call(String method, String path, JsonNode body) throws IOException {
    HttpRequest.Builder req = HttpRequest.newBuilder(URI.create(baseUrl + path))
        .timeout(Duration.ofSeconds(10)).header("Accept", CONTENT_TYPE);
    if (body == null) {
      req.method(method, HttpRequest.BodyPublishers.noBody());
    } else {
      req.header("Content-Type", CONTENT_TYPE)
          .method(method, HttpRequest.BodyPublishers.ofString(AvroJson.JSON.writeValueAsString(body)));
    }
    HttpResponse<String> resp;
    try {
      resp = http.send(req.build(), HttpResponse.BodyHandlers.ofString());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("interrupted", e);
    } catch (IOException e) {
      throw new IOException("schema registry at " + baseUrl + " unreachable: " + e, e);
    }
    if (resp.statusCode() >= 400) {
      throw new IOException(method + " " + path + " -> HTTP " + resp.statusCode() + ": " + resp.body());
    }
    return AvroJson.JSON.readTree(resp.body());
  }
}
