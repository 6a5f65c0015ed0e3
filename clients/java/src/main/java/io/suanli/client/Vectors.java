package io.suanli.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Stream;

/**
 * {@code vectors --dir DIR [--check] [--out DIR] [--decode DIR]...}: checks this client against
 * the contract's test vectors (see the Go and TypeScript clients for the same modes).
 */
final class Vectors {
  private Vectors() {}

  private static int passed;
  private static int failed;

  static int run(String[] args) throws Exception {
    Map<String, List<String>> opt = Produce.parse(args);
    Path dir = Path.of(Produce.one(opt, "dir", "../../schemas/vectors"));
    boolean check = opt.containsKey("check");
    String outDir = Produce.one(opt, "out", null);
    List<String> decodeDirs = opt.getOrDefault("decode", List.of());
    if (outDir != null) {
      Files.createDirectories(Path.of(outDir));
    }
    Map<String, AvroJson> codecs = new TreeMap<>();
    List<Path> files;
    try (Stream<Path> s = Files.list(dir)) {
      files = s.filter(p -> p.toString().endsWith(".json")).sorted().toList();
    }
    if (files.isEmpty()) {
      System.err.println("vectors: no *.json in " + dir);
      return 2;
    }
    HexFormat hex = HexFormat.of();
    for (Path file : files) {
      JsonNode v = AvroJson.JSON.readTree(file.toFile());
      String name = v.get("name").asText();
      String subject = v.get("subject").asText();
      AvroJson codec = codecs.get(subject);
      if (codec == null) {
        codec = AvroJson.parse(Files.readString(dir.resolve("schemas").resolve(subject + ".avsc")).strip());
        codecs.put(subject, codec);
      }
      JsonNode event = v.get("event");
      String expected = v.get("avro_hex").asText();
      if (check || outDir != null) {
        byte[] body = null;
        String error = null;
        try {
          body = codec.encode(event);
          if (!hex.formatHex(body).equals(expected)) {
            error = "encoded bytes differ:\n  got  " + hex.formatHex(body) + "\n  want " + expected;
          }
        } catch (Exception e) {
          error = "encode: " + e;
        }
        if (check) {
          report("encode " + name, error);
          report("decode " + name, decodeError(codec, hex.parseHex(expected), event));
        }
        if (outDir != null && body != null) {
          Files.write(Path.of(outDir, name + ".avro"), body);
        }
      }
      for (String from : decodeDirs) {
        Path p = Path.of(from, name + ".avro");
        String error = Files.exists(p) ? decodeError(codec, Files.readAllBytes(p), event) : "missing file " + p;
        report("decode " + name + " from " + from, error);
      }
    }
    System.out.println("java vectors: " + passed + " passed, " + failed + " failed");
    return failed == 0 ? 0 : 1;
  }

  private static String decodeError(AvroJson codec, byte[] body, JsonNode want) {
    try {
      JsonNode got = codec.decode(body);
      return AvroJson.equalJson(got, want) ? null
          : "decoded event differs from the vector's:\n  got  " + got + "\n  want " + want;
    } catch (Exception e) {
      return "decode: " + e;
    }
  }

  private static void report(String what, String error) {
    if (error == null) {
      passed++;
      System.out.println("ok   " + what);
    } else {
      failed++;
      System.out.println("FAIL " + what + ": " + error);
    }
  }
}
