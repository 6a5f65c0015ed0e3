package io.suanli.client;

/** {@code java -jar suanli-client.jar produce|vectors [options]}. */
public final class Main {
  private Main() {}

  public static void main(String[] args) {
    // Quiet by default: the Kafka client logs its whole configuration at INFO.
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel",
        System.getProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn"));
    if (args.length == 0) {
      System.err.println("usage: suanli-client produce|vectors [options]\n" + Produce.USAGE);
      System.exit(2);
    }
    String[] rest = java.util.Arrays.copyOfRange(args, 1, args.length);
    int code;
    try {
      code = switch (args[0]) {
        case "produce" -> Produce.run(rest);
        case "vectors" -> Vectors.run(rest);
        default -> {
          System.err.println("unknown command " + args[0] + ": use produce or vectors");
          yield 2;
        }
      };
    } catch (Exception e) {
      System.err.println(args[0] + ": " + e.getMessage());
      code = 1;
    }
    System.exit(code);
  }
}
