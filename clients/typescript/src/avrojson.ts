/**
 * The contract's JSON convention (schemas/vectors/README.md) <-> avsc values.
 *
 * Unions ["null", T] are null or the plain T value (avsc's default "unwrapped" unions);
 * timestamp-millis are epoch-millisecond numbers (no logicalTypes option is given to avsc,
 * so they stay plain longs); enums are symbols; record fields missing from the JSON take
 * their schema default; map entries are written sorted by key code point, so the bytes are
 * canonical and equal to every other Suanli client's.
 *
 * Longs are JS numbers, exact within ±(2^53 - 1) (the range JSON numbers carry exactly in
 * JavaScript). avsc's built-in long type does its zig-zag arithmetic in doubles: below -2^52
 * it silently writes and reads the wrong value (-9007199254740990 comes out as
 * +9007199254740990), and it refuses 2^53 - 1. `exactLong` below replaces it: it goes
 * through 8-byte two's complement (BigInt) and avsc's own varint packing.
 */
import avro from 'avsc';

type Type = avro.Type;
type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Code point order (= UTF-8 byte order), unlike JS's default UTF-16 code unit order. */
export function codePointCompare(a: string, b: string): number {
  const x = Array.from(a, (c) => c.codePointAt(0)!);
  const y = Array.from(b, (c) => c.codePointAt(0)!);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] !== y[i]) return x[i] - y[i];
  }
  return x.length - y.length;
}

/** Exact Avro long as a JS number (safe integers only), see the module comment. */
export const exactLong = avro.types.LongType.__with({
  fromBuffer: (buf: Buffer): number => {
    const n = buf.readBigInt64LE();
    if (n > BigInt(Number.MAX_SAFE_INTEGER) || n < BigInt(Number.MIN_SAFE_INTEGER)) {
      throw new Error(`long ${n} is beyond ±(2^53 - 1): not exact as a JS number`);
    }
    return Number(n);
  },
  toBuffer: (n: number): Buffer => {
    const buf = Buffer.alloc(8);
    buf.writeBigInt64LE(BigInt(n));
    return buf;
  },
  fromJSON: (v: unknown): number => Number(v),
  toJSON: (n: number): number => n,
  isValid: (n: unknown): boolean => Number.isSafeInteger(n),
  compare: (a: number, b: number): number => (a < b ? -1 : a > b ? 1 : 0),
});

/** avsc parsing options every Suanli TypeScript client uses (also given to the registry client). */
export const AVSC_OPTIONS: Partial<avro.ForSchemaOptions> = {
  typeHook: (schema: avro.Schema) => {
    const t = typeof schema === 'string' ? schema : (schema as { type?: unknown }).type;
    return t === 'long' ? exactLong : undefined;
  },
};

const ARRAY_INDEX = /^(0|[1-9][0-9]*)$/;

/**
 * An object whose Object.keys() order is exactly `entries`' order. avsc writes a map in
 * Object.keys() order, and JS puts integer-like keys ("2", "10") first in numeric order
 * whatever the insertion order: a Proxy keeps the canonical order for those too.
 */
function orderedObject(entries: [string, unknown][]): Record<string, unknown> {
  const target: Record<string, unknown> = Object.fromEntries(entries);
  const keys = entries.map(([k]) => k);
  if (!keys.some((k) => ARRAY_INDEX.test(k))) return target;
  return new Proxy(target, { ownKeys: () => keys });
}

function fail(path: string, message: string): never {
  throw new Error(`${path}: ${message}`);
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A JSON-convention value -> the value avsc writes for `type`. */
export function toAvsc(type: Type, v: unknown, path = '$'): unknown {
  switch (type.typeName) {
    case 'record': {
      const rec = type as avro.types.RecordType;
      if (!isPlainObject(v)) fail(path, `want a JSON object for record ${rec.name}`);
      const out: Record<string, unknown> = {};
      for (const field of rec.fields) {
        if (Object.prototype.hasOwnProperty.call(v, field.name)) {
          out[field.name] = toAvsc(field.type, v[field.name], `${path}.${field.name}`);
        } else {
          const dflt = field.defaultValue();
          if (dflt === undefined) fail(`${path}.${field.name}`, 'missing, and the field has no default');
          out[field.name] = dflt;
        }
      }
      for (const key of Object.keys(v)) {
        if (!rec.fields.some((f) => f.name === key)) fail(`${path}.${key}`, `no such field in ${rec.name}`);
      }
      return out;
    }
    case 'enum': {
      const symbols = (type as avro.types.EnumType).symbols;
      if (typeof v !== 'string' || !symbols.includes(v)) fail(path, `want one of ${symbols.join(', ')}, got ${JSON.stringify(v)}`);
      return v;
    }
    case 'array': {
      if (!Array.isArray(v)) fail(path, 'want a JSON array');
      const items = (type as avro.types.ArrayType).itemsType;
      return v.map((x, i) => toAvsc(items, x, `${path}[${i}]`));
    }
    case 'map': {
      if (!isPlainObject(v)) fail(path, 'want a JSON object (Avro map)');
      const values = (type as avro.types.MapType).valuesType as Type;
      const keys = Object.keys(v).sort(codePointCompare);
      return orderedObject(keys.map((k) => [k, toAvsc(values, v[k], `${path}.${k}`)]));
    }
    case 'union:unwrapped': {
      const branches = (type as avro.types.UnwrappedUnionType).types;
      const other = branches.filter((t) => t.typeName !== 'null');
      if (branches.length !== 2 || other.length !== 1) fail(path, 'only ["null", T] unions are supported (the contract has no other)');
      return v === null || v === undefined ? null : toAvsc(other[0], v, path);
    }
    case 'null':
      if (v !== null) fail(path, 'want null');
      return null;
    case 'boolean':
      if (typeof v !== 'boolean') fail(path, 'want true or false');
      return v;
    case 'int':
      if (typeof v !== 'number' || !Number.isInteger(v) || v < -2147483648 || v > 2147483647) fail(path, `want an integer that fits an Avro int, got ${v}`);
      return v;
    case 'long':
    case 'abstract:long':
      if (typeof v !== 'number' || !Number.isSafeInteger(v)) fail(path, `want an integer within ±(2^53 - 1), got ${v}`);
      return v;
    case 'float':
    case 'double':
      if (typeof v !== 'number') fail(path, `want a number, got ${JSON.stringify(v)}`);
      return v;
    case 'string':
      if (typeof v !== 'string') fail(path, `want a string, got ${JSON.stringify(v)}`);
      return v;
    default:
      return fail(path, `Avro ${type.typeName} is not used by producer events and not supported`);
  }
}

/** A value avsc decoded for `type` -> the JSON convention (plain objects, maps sorted). */
export function fromAvsc(type: Type, v: unknown): Json {
  switch (type.typeName) {
    case 'record': {
      const rec = v as Record<string, unknown>;
      const out: { [key: string]: Json } = {};
      for (const field of (type as avro.types.RecordType).fields) out[field.name] = fromAvsc(field.type, rec[field.name]);
      return out;
    }
    case 'array':
      return (v as unknown[]).map((x) => fromAvsc((type as avro.types.ArrayType).itemsType, x));
    case 'map': {
      const obj = v as Record<string, unknown>;
      const values = (type as avro.types.MapType).valuesType as Type;
      return Object.fromEntries(Object.keys(obj).sort(codePointCompare).map((k) => [k, fromAvsc(values, obj[k])]));
    }
    case 'union:unwrapped': {
      if (v === null) return null;
      const other = (type as avro.types.UnwrappedUnionType).types.find((t) => t.typeName !== 'null')!;
      return fromAvsc(other, v);
    }
    default:
      return v as Json;
  }
}

/** avsc Type of a schema (JSON text or object), with the exact long type. */
export function parseSchema(schema: string | object): Type {
  return avro.Type.forSchema((typeof schema === 'string' ? JSON.parse(schema) : schema) as avro.Schema, { ...AVSC_OPTIONS });
}

export function encode(type: Type, event: unknown): Buffer {
  return type.toBuffer(toAvsc(type, event));
}

/** Decodes an Avro body; avsc refuses truncated bodies and trailing bytes. */
export function decode(type: Type, body: Buffer): Json {
  return fromAvsc(type, type.fromBuffer(body));
}

/** JSON equality (numbers by value; key order ignored). */
export function equalJson(a: unknown, b: unknown): boolean {
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => equalJson(x, b[i]));
  }
  if (isPlainObject(a) || isPlainObject(b)) {
    if (!isPlainObject(a) || !isPlainObject(b)) return false;
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && equalJson(a[k], b[k]));
  }
  return a === b;
}
