package io.suanli.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;

/**
 * Converts events between the contract's JSON convention (schemas/vectors/README.md) and
 * Avro generic data, and encodes/decodes the Avro binary body with Apache Avro's
 * GenericDatumWriter/GenericDatumReader.
 *
 * <p>Convention: unions ["null", T] are null or the plain T value; timestamp-millis are
 * epoch-millisecond longs (no logical-type conversion is registered, so Avro keeps them as
 * Long); enums are symbols; maps are JSON objects, written sorted by key code point so the
 * bytes are canonical; record fields missing from the JSON take their schema default.
 */
public final class AvroJson {
  public static final ObjectMapper JSON = new ObjectMapper();

  /** Map keys by Unicode code point (= UTF-8 byte order), as the other clients sort them. */
  static final Comparator<String> CODE_POINT_ORDER = (a, b) -> {
    int i = 0, j = 0;
    while (i < a.length() && j < b.length()) {
      int ca = a.codePointAt(i), cb = b.codePointAt(j);
      if (ca != cb) {
        return Integer.compare(ca, cb);
      }
      i += Character.charCount(ca);
      j += Character.charCount(cb);
    }
    return Integer.compare(a.length() - i, b.length() - j);
  };

  private final Schema schema;

  public AvroJson(Schema schema) {
    this.schema = schema;
  }

  public Schema schema() {
    return schema;
  }

  /** A fresh parser per schema: two versions of one record name must not clash. */
  public static AvroJson parse(String schemaText) {
    return new AvroJson(new Schema.Parser().parse(schemaText));
  }

  // ---------------------------------------------------------------- JSON -> Avro binary
  public byte[] encode(JsonNode event) throws IOException {
    Object datum = toAvro(schema, event, "$");
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    BinaryEncoder encoder = EncoderFactory.get().directBinaryEncoder(out, null);
    new GenericDatumWriter<Object>(schema).write(datum, encoder);
    encoder.flush();
    return out.toByteArray();
  }

  static Object toAvro(Schema s, JsonNode v, String path) {
    switch (s.getType()) {
      case RECORD: {
        if (v == null || !v.isObject()) {
          throw new IllegalArgumentException(path + ": want a JSON object for record " + s.getFullName());
        }
        GenericData.Record record = new GenericData.Record(s);
        for (Schema.Field f : s.getFields()) {
          JsonNode fv = v.get(f.name());
          if (fv == null) {
            if (!f.hasDefaultValue()) {
              throw new IllegalArgumentException(path + "." + f.name() + ": missing, and the field has no default");
            }
            record.put(f.pos(), GenericData.get().deepCopy(f.schema(), GenericData.get().getDefaultValue(f)));
          } else {
            record.put(f.pos(), toAvro(f.schema(), fv, path + "." + f.name()));
          }
        }
        Iterator<String> names = v.fieldNames();
        while (names.hasNext()) {
          String name = names.next();
          if (s.getField(name) == null) {
            throw new IllegalArgumentException(path + "." + name + ": no such field in " + s.getFullName());
          }
        }
        return record;
      }
      case ENUM:
        if (v == null || !v.isTextual() || !s.hasEnumSymbol(v.asText())) {
          throw new IllegalArgumentException(path + ": want a symbol of " + s.getFullName() + " " + s.getEnumSymbols());
        }
        return new GenericData.EnumSymbol(s, v.asText());
      case ARRAY: {
        if (v == null || !v.isArray()) {
          throw new IllegalArgumentException(path + ": want a JSON array");
        }
        List<Object> items = new ArrayList<>(v.size());
        for (int i = 0; i < v.size(); i++) {
          items.add(toAvro(s.getElementType(), v.get(i), path + "[" + i + "]"));
        }
        return new GenericData.Array<>(s, items);
      }
      case MAP: {
        if (v == null || !v.isObject()) {
          throw new IllegalArgumentException(path + ": want a JSON object (Avro map)");
        }
        Map<String, Object> map = new TreeMap<>(CODE_POINT_ORDER);
        v.fields().forEachRemaining(e -> map.put(e.getKey(), toAvro(s.getValueType(), e.getValue(), path + "." + e.getKey())));
        return map;
      }
      case UNION: {
        List<Schema> branches = s.getTypes();
        if (branches.size() != 2 || !s.isNullable()) {
          throw new IllegalArgumentException(path + ": only [\"null\", T] unions are supported (the contract has no other)");
        }
        if (v == null || v.isNull()) {
          return null;
        }
        Schema branch = branches.get(0).getType() == Schema.Type.NULL ? branches.get(1) : branches.get(0);
        return toAvro(branch, v, path);
      }
      case NULL:
        if (v != null && !v.isNull()) {
          throw new IllegalArgumentException(path + ": want null");
        }
        return null;
      case BOOLEAN:
        if (v == null || !v.isBoolean()) {
          throw new IllegalArgumentException(path + ": want true or false");
        }
        return v.booleanValue();
      case INT:
        if (v == null || !v.isIntegralNumber() || !v.canConvertToInt()) {
          throw new IllegalArgumentException(path + ": want an integer that fits an Avro int, got " + v);
        }
        return v.intValue();
      case LONG:
        if (v == null || !v.isIntegralNumber() || !v.canConvertToLong()) {
          throw new IllegalArgumentException(path + ": want an integer that fits an Avro long, got " + v);
        }
        return v.longValue();
      case FLOAT:
        if (v == null || !v.isNumber()) {
          throw new IllegalArgumentException(path + ": want a number, got " + v);
        }
        return v.floatValue();
      case DOUBLE:
        if (v == null || !v.isNumber()) {
          throw new IllegalArgumentException(path + ": want a number, got " + v);
        }
        return v.doubleValue();
      case STRING:
        if (v == null || !v.isTextual()) {
          throw new IllegalArgumentException(path + ": want a string, got " + v);
        }
        return v.textValue();
      default:
        throw new IllegalArgumentException(path + ": Avro " + s.getType() + " is not used by producer events and not supported");
    }
  }

  // ---------------------------------------------------------------- Avro binary -> JSON
  public JsonNode decode(byte[] body) throws IOException {
    BinaryDecoder decoder = DecoderFactory.get().binaryDecoder(body, null);
    Object datum = new GenericDatumReader<Object>(schema).read(null, decoder);
    if (!decoder.isEnd()) {
      throw new IOException("trailing bytes after the " + schema.getFullName() + " record");
    }
    return toJson(schema, datum);
  }

  static JsonNode toJson(Schema s, Object v) {
    JsonNodeFactory f = JsonNodeFactory.instance;
    switch (s.getType()) {
      case RECORD: {
        GenericRecord record = (GenericRecord) v;
        ObjectNode out = f.objectNode();
        for (Schema.Field field : s.getFields()) {
          out.set(field.name(), toJson(field.schema(), record.get(field.pos())));
        }
        return out;
      }
      case ARRAY: {
        ArrayNode out = f.arrayNode();
        for (Object item : (List<?>) v) {
          out.add(toJson(s.getElementType(), item));
        }
        return out;
      }
      case MAP: {
        ObjectNode out = f.objectNode();
        Map<String, Object> sorted = new TreeMap<>(CODE_POINT_ORDER);
        ((Map<?, ?>) v).forEach((k, x) -> sorted.put(k.toString(), x));
        sorted.forEach((k, x) -> out.set(k, toJson(s.getValueType(), x)));
        return out;
      }
      case UNION:
        return v == null ? f.nullNode() : toJson(s.getTypes().get(GenericData.get().resolveUnion(s, v)), v);
      case ENUM:
      case STRING:
        return f.textNode(v.toString());
      case NULL:
        return f.nullNode();
      case BOOLEAN:
        return f.booleanNode((Boolean) v);
      case INT:
        return f.numberNode((Integer) v);
      case LONG:
        return f.numberNode((Long) v);
      case FLOAT:
        return f.numberNode((Float) v);
      case DOUBLE:
        return f.numberNode((Double) v);
      default:
        throw new IllegalArgumentException("Avro " + s.getType() + " is not supported");
    }
  }

  /** JSON equality where numbers compare by value (2.0 equals 2). */
  public static boolean equalJson(JsonNode a, JsonNode b) {
    if (a.isNumber() && b.isNumber()) {
      return a.decimalValue().compareTo(b.decimalValue()) == 0;
    }
    if (a.isObject() && b.isObject()) {
      if (a.size() != b.size()) {
        return false;
      }
      Iterator<Map.Entry<String, JsonNode>> it = a.fields();
      while (it.hasNext()) {
        Map.Entry<String, JsonNode> e = it.next();
        JsonNode other = b.get(e.getKey());
        if (other == null || !equalJson(e.getValue(), other)) {
          return false;
        }
      }
      return true;
    }
    if (a.isArray() && b.isArray()) {
      if (a.size() != b.size()) {
        return false;
      }
      for (int i = 0; i < a.size(); i++) {
        if (!equalJson(a.get(i), b.get(i))) {
          return false;
        }
      }
      return true;
    }
    return a.equals(b);
  }
}
