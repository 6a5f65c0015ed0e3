package suanli

import (
	"encoding/hex"
	"strings"
	"testing"
)

const vectorDir = "../../../schemas/vectors"

func TestVectors(t *testing.T) {
	vectors, codecs, err := LoadVectors(vectorDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vectors {
		t.Run(v.Name, func(t *testing.T) {
			if _, err := CheckEncode(v, codecs[v.Subject]); err != nil {
				t.Error(err)
			}
			body, _ := hex.DecodeString(v.AvroHex)
			if err := CheckDecode(v, codecs[v.Subject], body); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestMissingFieldsTakeDefaultsAndBadInputIsRefused(t *testing.T) {
	_, codecs, err := LoadVectors(vectorDir)
	if err != nil {
		t.Fatal(err)
	}
	codec := codecs["io.suanli.events.TaskCancelled"]
	full, err := codec.Encode(map[string]any{"event_id": "e", "task_id": "t", "tenant": "x", "cell": "c", "reason": "", "at": int64(1)})
	if err != nil {
		t.Fatal(err)
	}
	short, err := codec.Encode(map[string]any{"event_id": "e", "task_id": "t", "tenant": "x", "cell": "c", "at": int64(1)})
	if err != nil || hex.EncodeToString(short) != hex.EncodeToString(full) {
		t.Fatalf("default of reason not applied: %x vs %x (%v)", short, full, err)
	}
	if _, err := codec.Encode(map[string]any{"event_id": "e", "task_id": "t", "tenant": "x", "cell": "c"}); err == nil || !strings.Contains(err.Error(), "$.at") {
		t.Fatalf("missing required field: %v", err)
	}
	if _, err := codec.Decode(append(full, 0)); err == nil {
		t.Fatal("trailing byte not detected")
	}
	if _, err := codec.Decode(full[:len(full)-1]); err == nil {
		t.Fatal("truncated body not detected")
	}
}
