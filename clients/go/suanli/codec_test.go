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

// The typed ReservationBid writes the vectors' bytes: with neither LatestStartAt nor Gang
// (the defaults), and with both set (a flexible start, not a gang).
func TestTypedReservationBidMatchesTheVectors(t *testing.T) {
	vectors, codecs, err := LoadVectors(vectorDir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, v := range vectors {
		want[v.Name] = v.AvroHex
	}
	const t0 = int64(1_767_225_600_000)
	latest, no := t0+3*3_600_000, false
	bids := map[string]ReservationBid{
		"reservation-bid": {EventID: "bid/vec-bid-1", BidID: "vec-bid-1", Tenant: "vision", Cell: "openb",
			Resources: TaskResources{CPUMilli: 64000, MemoryMiB: 524288, GPUCount: 8, GPUMilli: 1000,
				GPUModels: []string{"A100"}},
			StartAt: t0 + 3_600_000, DurationMs: 14_400_000, Price: 2.75, At: t0},
		"reservation-bid-flexible": {EventID: "bid/vec-bid-2", BidID: "vec-bid-2", Tenant: "vision", Cell: "openb",
			Resources: TaskResources{CPUMilli: 16000, MemoryMiB: 131072, GPUCount: 4, GPUMilli: 1000,
				GPUMemoryMiB: 81920},
			StartAt: t0 + 3_600_000, DurationMs: 7_200_000, Price: 1.5, At: t0, LatestStartAt: &latest, Gang: &no},
	}
	codec := codecs["io.suanli.events.ReservationBid"]
	for name, bid := range bids {
		event, err := asJSON(bid.Normalized())
		if err != nil {
			t.Fatal(err)
		}
		body, err := codec.Encode(event)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := hex.EncodeToString(body); got != want[name] {
			t.Errorf("%s:\n got  %s\n want %s", name, got, want[name])
		}
	}
	plain, _ := asJSON(bids["reservation-bid"].Normalized())
	for _, field := range []string{"latest_start_at", "gang"} {
		if _, ok := plain.(map[string]any)[field]; ok {
			t.Errorf("%s written although unset: a registry with the older schema would refuse it", field)
		}
	}
}

func TestLaneHeadersMarkOnlyUrgentTasks(t *testing.T) {
	urgent := map[string]any{"labels": map[string]any{"scheduling": "urgent", "team": "x"}}
	if h := LaneHeaders("TaskSubmitted", urgent); len(h) != 1 || h[0].Key != "suanli-lane" || string(h[0].Value) != "urgent" {
		t.Fatalf("an urgent task: got %v", h)
	}
	for _, c := range []struct {
		kind  string
		event map[string]any
	}{
		{"TaskSubmitted", map[string]any{"labels": map[string]any{"scheduling": "batch"}}},
		{"TaskSubmitted", map[string]any{"labels": nil}},
		{"TaskSubmitted", map[string]any{}},
		{"ReservationBid", urgent},
	} {
		if h := LaneHeaders(c.kind, c.event); h != nil {
			t.Fatalf("%s %v: got %v, want no header", c.kind, c.event, h)
		}
	}
}
