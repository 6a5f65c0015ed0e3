package suanli

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Vector is one file of schemas/vectors: an event in the JSON convention and the Avro body
// every client must encode it to.
type Vector struct {
	Name    string          `json:"name"`
	Subject string          `json:"subject"`
	Event   json.RawMessage `json:"event"`
	AvroHex string          `json:"avro_hex"`
}

// LoadVectors reads every vector of dir with the codec of its subject's schema
// (dir/schemas/<subject>.avsc).
func LoadVectors(dir string) ([]Vector, map[string]*Codec, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(paths)
	vectors := []Vector{}
	codecs := map[string]*Codec{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		var v Vector
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		if _, ok := codecs[v.Subject]; !ok {
			text, err := os.ReadFile(filepath.Join(dir, "schemas", v.Subject+".avsc"))
			if err != nil {
				return nil, nil, err
			}
			if codecs[v.Subject], err = NewCodec(strings.TrimSpace(string(text))); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", v.Subject, err)
			}
		}
		vectors = append(vectors, v)
	}
	if len(vectors) == 0 {
		return nil, nil, fmt.Errorf("no vectors (*.json) in %s", dir)
	}
	return vectors, codecs, nil
}

// CheckEncode encodes the vector's event and compares with its expected bytes; returns the bytes.
func CheckEncode(v Vector, codec *Codec) ([]byte, error) {
	event, err := DecodeJSON(v.Event)
	if err != nil {
		return nil, err
	}
	body, err := codec.Encode(event)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	if got := hex.EncodeToString(body); got != v.AvroHex {
		return body, fmt.Errorf("encoded bytes differ:\n  got  %s\n  want %s", got, v.AvroHex)
	}
	return body, nil
}

// CheckDecode decodes body with the codec and compares with the vector's event.
func CheckDecode(v Vector, codec *Codec, body []byte) error {
	got, err := codec.Decode(body)
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	want, err := DecodeJSON(v.Event)
	if err != nil {
		return err
	}
	if !EqualJSON(got, want) {
		text, _ := json.Marshal(got)
		return fmt.Errorf("decoded event differs from the vector's:\n  got  %s\n  want %s", text, compact(v.Event))
	}
	return nil
}

func compact(raw json.RawMessage) string {
	var out strings.Builder
	var v any
	_ = json.Unmarshal(raw, &v)
	data, _ := json.Marshal(v)
	out.Write(data)
	return out.String()
}
