// Package suanli produces Suanli events (Avro in the Confluent wire format) to Kafka.
//
// Events are JSON-shaped Go values (map[string]any, []any, strings, numbers, nil) that
// follow the contract's JSON convention (schemas/vectors/README.md): unions ["null", T]
// are null or the plain T value, timestamps are epoch-millisecond integers, enums are
// their symbols. A Codec turns such a value into the Avro binary body of one schema and
// back, with github.com/hamba/avro/v2 for the schema model and the binary primitives.
package suanli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
)

// avroAPI writes arrays and maps as one block with a plain positive count, as fastavro,
// Apache Avro for Java and avsc do: hamba's default (a negative count followed by the
// block's byte size) is valid Avro too, but the bytes would differ from every other client.
var avroAPI = avro.Config{DisableBlockSizeHeader: true, BlockLength: math.MaxInt32}.Freeze()

// Codec encodes and decodes JSON-convention values with one Avro schema.
type Codec struct {
	Schema avro.Schema
	Text   string // the schema as given (e.g. as registered)
}

// NewCodec parses a schema (JSON text). Logical types are dropped (timestamp-millis stays
// a plain long of epoch milliseconds, as in every Suanli client): the binary encoding is the
// same, and callers never get time.Time values.
func NewCodec(schemaText string) (*Codec, error) {
	var raw any
	if err := json.Unmarshal([]byte(schemaText), &raw); err != nil {
		return nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	plain, err := json.Marshal(stripLogicalTypes(raw))
	if err != nil {
		return nil, err
	}
	// A fresh cache per codec: two versions of one record name must not clash.
	schema, err := avro.ParseWithCache(string(plain), "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("parse schema: %w", err)
	}
	return &Codec{Schema: schema, Text: schemaText}, nil
}

func stripLogicalTypes(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			if k != "logicalType" {
				out[k] = stripLogicalTypes(x)
			}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = stripLogicalTypes(x)
		}
		return out
	}
	return v
}

// Encode returns the Avro binary body of value (no wire-format header). Record fields that
// are missing take their schema default; map entries are written sorted by key, so the
// bytes are canonical and equal to every other Suanli client's.
func (c *Codec) Encode(value any) ([]byte, error) {
	var buf bytes.Buffer
	w := avro.NewWriter(&buf, 512, avro.WithWriterConfig(avroAPI))
	if err := encode(w, c.Schema, value, "$"); err != nil {
		return nil, err
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Decode reads an Avro binary body with hamba/avro's generic reader and returns it in the JSON convention
// (map[string]any, []any, int64, float64, string, bool, nil).
func (c *Codec) Decode(body []byte) (any, error) {
	r := avro.NewReader(bytes.NewReader(body), len(body)+1, avro.WithReaderConfig(avroAPI))
	generic := r.ReadNext(c.Schema) // unions come back as {"type name": value}
	if r.Error != nil {
		return nil, r.Error
	}
	var probe [1]byte
	if r.Read(probe[:]); r.Error == nil {
		return nil, fmt.Errorf("trailing bytes after the %s record", c.Schema.(avro.NamedSchema).FullName())
	}
	return plainJSON(c.Schema, generic)
}

// DecodeJSON parses JSON text keeping integers exact (json.Number).
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	return v, nil
}

func resolve(s avro.Schema) avro.Schema {
	if ref, ok := s.(*avro.RefSchema); ok {
		return ref.Schema()
	}
	return s
}

func encode(w *avro.Writer, schema avro.Schema, v any, path string) error {
	schema = resolve(schema)
	switch s := schema.(type) {
	case *avro.RecordSchema:
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want a JSON object for record %s, got %T", path, s.FullName(), v)
		}
		known := make(map[string]bool, len(s.Fields()))
		for _, f := range s.Fields() {
			known[f.Name()] = true
			fv, present := obj[f.Name()]
			if !present {
				if !f.HasDefault() {
					return fmt.Errorf("%s.%s: missing, and the field has no default", path, f.Name())
				}
				fv = f.Default()
			}
			if err := encode(w, f.Type(), fv, path+"."+f.Name()); err != nil {
				return err
			}
		}
		for k := range obj {
			if !known[k] {
				return fmt.Errorf("%s.%s: no such field in %s", path, k, s.FullName())
			}
		}
	case *avro.EnumSchema:
		sym, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: want an enum symbol of %s, got %T", path, s.FullName(), v)
		}
		for i, x := range s.Symbols() {
			if x == sym {
				w.WriteInt(int32(i))
				return w.Error
			}
		}
		return fmt.Errorf("%s: %q is not a symbol of %s (%s)", path, sym, s.FullName(), strings.Join(s.Symbols(), ", "))
	case *avro.ArraySchema:
		items, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: want a JSON array, got %T", path, v)
		}
		if len(items) > 0 {
			w.WriteLong(int64(len(items)))
			for i, item := range items {
				if err := encode(w, s.Items(), item, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
		w.WriteLong(0)
	case *avro.MapSchema:
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want a JSON object (Avro map), got %T", path, v)
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys) // byte order of UTF-8 = code point order
		if len(keys) > 0 {
			w.WriteLong(int64(len(keys)))
			for _, k := range keys {
				w.WriteString(k)
				if err := encode(w, s.Values(), obj[k], path+"."+k); err != nil {
					return err
				}
			}
		}
		w.WriteLong(0)
	case *avro.UnionSchema:
		nullIdx, typIdx := s.Indices()
		if !s.Nullable() || len(s.Types()) != 2 {
			return fmt.Errorf("%s: only [\"null\", T] unions are supported (the contract has no other)", path)
		}
		if v == nil {
			w.WriteLong(int64(nullIdx))
			return w.Error
		}
		w.WriteLong(int64(typIdx))
		return encode(w, s.Types()[typIdx], v, path)
	case *avro.PrimitiveSchema:
		return encodePrimitive(w, s.Type(), v, path)
	default:
		return fmt.Errorf("%s: unsupported schema type %s", path, schema.Type())
	}
	return w.Error
}

func encodePrimitive(w *avro.Writer, typ avro.Type, v any, path string) error {
	switch typ {
	case avro.Null:
		if v != nil {
			return fmt.Errorf("%s: want null, got %v", path, v)
		}
	case avro.Boolean:
		b, ok := v.(bool)
		if !ok {
			return fmt.Errorf("%s: want true or false, got %T", path, v)
		}
		w.WriteBool(b)
	case avro.Int, avro.Long:
		n, err := toInt64(v)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if typ == avro.Int {
			if n < math.MinInt32 || n > math.MaxInt32 {
				return fmt.Errorf("%s: %d does not fit an Avro int", path, n)
			}
			w.WriteInt(int32(n))
		} else {
			w.WriteLong(n)
		}
	case avro.Float, avro.Double:
		f, err := toFloat64(v)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if typ == avro.Float {
			w.WriteFloat(float32(f))
		} else {
			w.WriteDouble(f)
		}
	case avro.String:
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: want a string, got %T", path, v)
		}
		if !utf8.ValidString(s) {
			return fmt.Errorf("%s: string is not valid UTF-8", path)
		}
		w.WriteString(s)
	default:
		return fmt.Errorf("%s: Avro %s is not used by producer events and not supported", path, typ)
	}
	return w.Error
}

func toInt64(v any) (int64, error) {
	switch n := v.(type) {
	case json.Number:
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("want an integer, got %s", n)
		}
		return i, nil
	case int:
		return int64(n), nil
	case int32:
		return int64(n), nil
	case int64:
		return n, nil
	case float64:
		if n != math.Trunc(n) || math.Abs(n) > 1<<53 {
			return 0, fmt.Errorf("want an integer, got %v", n)
		}
		return int64(n), nil
	}
	return 0, fmt.Errorf("want an integer, got %T", v)
}

func toFloat64(v any) (float64, error) {
	switch n := v.(type) {
	case json.Number:
		return strconv.ParseFloat(string(n), 64)
	case float64:
		return n, nil
	case float32:
		return float64(n), nil
	case int:
		return float64(n), nil
	case int32:
		return float64(n), nil
	case int64:
		return float64(n), nil
	}
	return 0, fmt.Errorf("want a number, got %T", v)
}

// plainJSON turns hamba's generic decoding (unions as {"type name": value}) into the convention.
func plainJSON(schema avro.Schema, v any) (any, error) {
	schema = resolve(schema)
	switch s := schema.(type) {
	case *avro.RecordSchema:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("record %s decoded as %T", s.FullName(), v)
		}
		out := make(map[string]any, len(obj))
		for _, f := range s.Fields() {
			x, err := plainJSON(f.Type(), obj[f.Name()])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.Name(), err)
			}
			out[f.Name()] = x
		}
		return out, nil
	case *avro.ArraySchema:
		items, _ := v.([]any)
		out := make([]any, len(items))
		for i, item := range items {
			x, err := plainJSON(s.Items(), item)
			if err != nil {
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	case *avro.MapSchema:
		obj, _ := v.(map[string]any)
		out := make(map[string]any, len(obj))
		for k, item := range obj {
			x, err := plainJSON(s.Values(), item)
			if err != nil {
				return nil, err
			}
			out[k] = x
		}
		return out, nil
	case *avro.UnionSchema:
		if v == nil {
			return nil, nil
		}
		wrapped, ok := v.(map[string]any)
		if !ok || len(wrapped) != 1 {
			return nil, fmt.Errorf("union decoded as %T", v)
		}
		_, typIdx := s.Indices()
		for _, x := range wrapped {
			return plainJSON(s.Types()[typIdx], x)
		}
	case *avro.EnumSchema:
		return v, nil
	case *avro.PrimitiveSchema:
		switch n := v.(type) {
		case int:
			return int64(n), nil
		case int32:
			return int64(n), nil
		case float32:
			return float64(n), nil
		}
		return v, nil
	}
	return v, nil
}

// EqualJSON compares two JSON-convention values; numbers compare by value, so 2.0 equals 2
// and json.Number("10") equals int64(10).
func EqualJSON(a, b any) bool {
	if fa, ok := number(a); ok {
		fb, ok := number(b)
		return ok && fa == fb
	}
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !EqualJSON(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !EqualJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}

// number returns a comparable form of a numeric value (exact for integers).
func number(v any) (string, bool) {
	switch n := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
			return strconv.FormatInt(i, 10), true
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil {
			return "", false
		}
		return canonicalFloat(f), true
	case int64:
		return strconv.FormatInt(n, 10), true
	case int:
		return strconv.Itoa(n), true
	case float64:
		return canonicalFloat(n), true
	}
	return "", false
}

func canonicalFloat(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1<<63 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
