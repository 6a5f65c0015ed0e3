package io.suanli.client;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;

/**
 * The broker's security, from the environment shared by every producer under clients/ (never
 * from flags: a command line shows in {@code ps} and in logs):
 *
 * <ul>
 *   <li>{@code SUANLI_KAFKA_SECURITY_PROTOCOL}: {@code PLAINTEXT} (default) or {@code SASL_SSL};
 *   <li>{@code SUANLI_KAFKA_SASL_MECHANISM}: {@code SCRAM-SHA-512} (default) or {@code SCRAM-SHA-256};
 *   <li>{@code SUANLI_KAFKA_USERNAME}, {@code SUANLI_KAFKA_PASSWORD}: the SCRAM credentials;
 *   <li>{@code SUANLI_KAFKA_CA}: PEM file of the CA that signed the broker's certificate.
 * </ul>
 *
 * <p>SASL_SSL becomes {@code security.protocol}, {@code sasl.mechanism}, a ScramLoginModule
 * {@code sasl.jaas.config} and a PEM truststore (kafka-clients reads PEM since 2.7). The
 * client checks the broker's host name against its certificate (kafka-clients' default
 * {@code ssl.endpoint.identification.algorithm=https}). kafka-clients logs its configuration
 * with {@code sasl.jaas.config} as {@code [hidden]}; no message here shows the password.
 */
public final class KafkaSecurity {
  public static final String PROTOCOL = "SUANLI_KAFKA_SECURITY_PROTOCOL";
  public static final String MECHANISM = "SUANLI_KAFKA_SASL_MECHANISM";
  public static final String USERNAME = "SUANLI_KAFKA_USERNAME";
  public static final String PASSWORD = "SUANLI_KAFKA_PASSWORD";
  public static final String CA = "SUANLI_KAFKA_CA";

  private KafkaSecurity() {}

  /** The client properties of this process's environment (empty for PLAINTEXT). */
  public static Properties fromEnv() {
    return from(System.getenv());
  }

  /**
   * The client properties of {@code env} (an empty value counts as unset).
   *
   * @throws IllegalArgumentException naming the variable at fault (never showing the password)
   */
  public static Properties from(Map<String, String> env) {
    Properties p = new Properties();
    String protocol = get(env, PROTOCOL);
    String upper = protocol == null ? "PLAINTEXT" : protocol.toUpperCase(Locale.ROOT);
    if (upper.equals("PLAINTEXT")) {
      return p;
    }
    if (!upper.equals("SASL_SSL")) {
      throw new IllegalArgumentException(PROTOCOL + " \"" + protocol + "\" is not supported: use PLAINTEXT or SASL_SSL");
    }
    List<String> missing = new ArrayList<>();
    for (String name : List.of(USERNAME, PASSWORD, CA)) {
      if (get(env, name) == null) {
        missing.add(name);
      }
    }
    if (!missing.isEmpty()) {
      throw new IllegalArgumentException(PROTOCOL + " is SASL_SSL but " + String.join(", ", missing)
          + (missing.size() == 1 ? " is not set" : " are not set"));
    }
    String mechanism = get(env, MECHANISM);
    mechanism = mechanism == null ? "SCRAM-SHA-512" : mechanism.toUpperCase(Locale.ROOT);
    if (!mechanism.equals("SCRAM-SHA-512") && !mechanism.equals("SCRAM-SHA-256")) {
      throw new IllegalArgumentException(MECHANISM + " \"" + get(env, MECHANISM)
          + "\" is not supported: use SCRAM-SHA-512 or SCRAM-SHA-256");
    }
    Path ca = Path.of(get(env, CA));
    if (!Files.isRegularFile(ca) || !Files.isReadable(ca)) {
      throw new IllegalArgumentException(CA + ": cannot read the CA file " + ca);
    }
    p.put("security.protocol", "SASL_SSL");
    p.put("sasl.mechanism", mechanism);
    p.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username="
        + quoted(get(env, USERNAME)) + " password=" + quoted(get(env, PASSWORD)) + ";");
    p.put("ssl.truststore.type", "PEM");
    p.put("ssl.truststore.location", ca.toString());
    return p;
  }

  /** A JAAS option value: in double quotes, with backslashes and double quotes escaped. */
  static String quoted(String value) {
    return "\"" + value.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }

  private static String get(Map<String, String> env, String name) {
    String v = env.get(name);
    return v == null || v.isEmpty() ? null : v;
  }
}
