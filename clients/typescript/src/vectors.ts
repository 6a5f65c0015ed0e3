/**
 * vectors: checks this client against the contract's test vectors.
 *
 *   node dist/vectors.js --dir ../../schemas/vectors --check [--out DIR] [--decode DIR]...
 *
 * --check encodes each vector's event and compares with avro_hex, and decodes avro_hex and
 * compares with the event; --out writes this client's encodings as DIR/<name>.avro;
 * --decode checks another client's DIR/<name>.avro files. Exit status 1 on any difference.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { decode, encode, equalJson, parseSchema } from './avrojson.js';

const { values: o } = parseArgs({
  options: {
    dir: { type: 'string', default: '../../schemas/vectors' },
    check: { type: 'boolean', default: false },
    out: { type: 'string' },
    decode: { type: 'string', multiple: true, default: [] },
  },
});

let passed = 0;
let failed = 0;
function report(what: string, error: string | null): void {
  if (error === null) {
    passed++;
    console.log(`ok   ${what}`);
  } else {
    failed++;
    console.log(`FAIL ${what}: ${error}`);
  }
}

function decodeError(type: ReturnType<typeof parseSchema>, body: Buffer, want: unknown): string | null {
  try {
    const got = decode(type, body);
    return equalJson(got, want) ? null : `decoded event differs from the vector's:\n  got  ${JSON.stringify(got)}\n  want ${JSON.stringify(want)}`;
  } catch (e) {
    return `decode: ${e instanceof Error ? e.message : e}`;
  }
}

const dir = o.dir!;
const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
if (files.length === 0) {
  console.error(`vectors: no *.json in ${dir}`);
  process.exit(2);
}
if (o.out) mkdirSync(o.out, { recursive: true });
const types = new Map<string, ReturnType<typeof parseSchema>>();
for (const file of files) {
  const v = JSON.parse(readFileSync(join(dir, file), 'utf8'));
  let type = types.get(v.subject);
  if (!type) {
    type = parseSchema(readFileSync(join(dir, 'schemas', `${v.subject}.avsc`), 'utf8'));
    types.set(v.subject, type);
  }
  if (o.check || o.out) {
    let body: Buffer | null = null;
    let error: string | null = null;
    try {
      body = encode(type, v.event);
      if (body.toString('hex') !== v.avro_hex) error = `encoded bytes differ:\n  got  ${body.toString('hex')}\n  want ${v.avro_hex}`;
    } catch (e) {
      error = `encode: ${e instanceof Error ? e.message : e}`;
    }
    if (o.check) {
      report(`encode ${v.name}`, error);
      report(`decode ${v.name}`, decodeError(type, Buffer.from(v.avro_hex, 'hex'), v.event));
    }
    if (o.out && body) writeFileSync(join(o.out, `${v.name}.avro`), body);
  }
  for (const from of o.decode!) {
    const path = join(from, `${v.name}.avro`);
    report(`decode ${v.name} from ${from}`, existsSync(path) ? decodeError(type, readFileSync(path), v.event) : `missing file ${path}`);
  }
}
console.log(`typescript vectors: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
