// Command produce sends Suanli events to Kafka in the Confluent wire format.
//
// A task from flags:
//
//	go run ./cmd/produce --brokers 127.0.0.1:19092 --registry http://127.0.0.1:18081/apis/ccompat/v7 \
//	    --topic suanli.raw.tasks --task-id t-1 --cell openb --cpu-milli 4000 --memory-mib 8192 \
//	    --gpu-count 1 --gpu-milli 500 --gpu-model V100M16 --label team=vision
//
// A reservation bid from flags: --bid-id b-1 --cell openb --gpu-count 8 --gpu-milli 1000 --price 2.5 ...
// (--start-at MS --latest-start MS for a flexible start; --gang=false to accept fewer GPUs).
//
// Events from a file (one JSON object, a JSON array, or one object per line), in the JSON
// convention of schemas/vectors/README.md, all of one kind, sent as one batch:
//
//	go run ./cmd/produce --kind TaskSubmitted --file tasks.json --topic suanli.raw.tasks
//	go run ./cmd/produce --kind ReservationBid --file bids.jsonl --topic suanli.raw.tasks
//
// The schema is the subject's latest version in the registry (--schema FILE registers
// FILE instead and uses it). The record key is the event's task_id / bid_id.
//
// A broker that requires SASL/SCRAM over TLS is configured by the environment only (never
// flags, which show in `ps`): SUANLI_KAFKA_SECURITY_PROTOCOL=SASL_SSL, SUANLI_KAFKA_USERNAME,
// SUANLI_KAFKA_PASSWORD, SUANLI_KAFKA_CA (PEM) and SUANLI_KAFKA_SASL_MECHANISM (default
// SCRAM-SHA-512); see suanli.KafkaSecurityFromEnv.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/suanli/suanli/clients/go/suanli"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "produce:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		brokers    = flag.String("brokers", "127.0.0.1:19092", "Kafka bootstrap servers, comma-separated")
		registry   = flag.String("registry", "http://127.0.0.1:18081/apis/ccompat/v7", "schema registry URL (Confluent API)")
		topic      = flag.String("topic", "suanli.raw.tasks", "topic to produce to")
		kind       = flag.String("kind", "", "event kind of --file (TaskSubmitted, ReservationBid, TaskCancelled, ...)")
		file       = flag.String("file", "", "JSON file of events ('-' for stdin)")
		schemaFile = flag.String("schema", "", "register this schema file for the subject and use it (default: the latest version)")
		timeout    = flag.Duration("timeout", 30*time.Second, "give up after this long")

		taskID    = flag.String("task-id", "", "produce a TaskSubmitted with this id")
		bidID     = flag.String("bid-id", "", "produce a ReservationBid with this id")
		eventID   = flag.String("event-id", "", "event id (default: submit/<task-id> or bid/<bid-id>)")
		tenant    = flag.String("tenant", "default", "owner")
		cell      = flag.String("cell", "openb", "scheduler cell")
		cpuMilli  = flag.Int("cpu-milli", 1000, "CPU, millicores")
		memMiB    = flag.Int("memory-mib", 1024, "memory, MiB")
		gpuCount  = flag.Int("gpu-count", 0, "GPUs: 1 with --gpu-milli < 1000 is a share of one GPU")
		gpuMilli  = flag.Int("gpu-milli", 0, "GPU share per device, milli (1000 = whole)")
		gpuMemMiB = flag.Int("gpu-memory-mib", 0, "minimum memory per GPU, MiB")
		qos       = flag.String("qos", "SILVER", "GOLD, SILVER or BRONZE")
		priority  = flag.Int("priority", 0, "priority within the tier")
		duration  = flag.Int64("duration-ms", -1, "expected run time, ms (task), or window length (bid)")
		at        = flag.Int64("at", 0, "event time, epoch ms (default: now)")
		startAt   = flag.Int64("start-at", 0, "bid: window start, epoch ms (default: now + 1h)")
		price     = flag.Float64("price", 0, "bid: maximum price per GPU-hour")
		latest    = flag.Int64("latest-start", 0, "bid: latest window start, epoch ms (default: none, the window starts at --start-at)")
		gang      = flag.Bool("gang", true, "bid: all GPUs or none; --gang=false lets the auction grant fewer (at least one)")
		models    multi
		labels    multi
	)
	flag.Var(&models, "gpu-model", "accepted GPU model (repeatable)")
	flag.Var(&labels, "label", "label key=value (repeatable)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (a boolean flag takes its value after '=': --gang=false)", flag.Arg(0))
	}
	// Refuse a bad SUANLI_KAFKA_* environment before anything else (NewProducer applies it).
	if _, err := suanli.KafkaSecurityFromEnv(); err != nil {
		return err
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	now := time.Now().UnixMilli()
	if *at == 0 {
		*at = now
	}
	for name, v := range map[string]int{"cpu-milli": *cpuMilli, "memory-mib": *memMiB, "gpu-count": *gpuCount,
		"gpu-milli": *gpuMilli, "gpu-memory-mib": *gpuMemMiB, "priority": *priority} {
		if v < math.MinInt32 || v > math.MaxInt32 {
			return fmt.Errorf("--%s %d does not fit an Avro int", name, v)
		}
	}
	resources := suanli.TaskResources{CPUMilli: int32(*cpuMilli), MemoryMiB: int32(*memMiB),
		GPUCount: int32(*gpuCount), GPUMilli: int32(*gpuMilli), GPUModels: models, GPUMemoryMiB: int32(*gpuMemMiB)}

	var events []any
	switch {
	case *file != "":
		if *kind == "" {
			return fmt.Errorf("--file needs --kind")
		}
		var err error
		if events, err = readEvents(*file); err != nil {
			return err
		}
	case *taskID != "":
		*kind = "TaskSubmitted"
		task := suanli.TaskSubmitted{EventID: or(*eventID, "submit/"+*taskID), TaskID: *taskID, Tenant: *tenant,
			Cell: *cell, SubmittedAt: *at, Resources: resources, QosTier: strings.ToUpper(*qos),
			Priority: int32(*priority), Labels: map[string]string{}}
		for _, kv := range labels {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("--label %q: want key=value", kv)
			}
			task.Labels[k] = v
		}
		if *duration >= 0 {
			task.DurationEstimateMs = duration
		}
		events = append(events, task.Normalized())
	case *bidID != "":
		*kind = "ReservationBid"
		if *startAt == 0 {
			*startAt = now + 3_600_000
		}
		if *duration < 0 {
			*duration = 3_600_000
		}
		bid := suanli.ReservationBid{EventID: or(*eventID, "bid/"+*bidID), BidID: *bidID,
			Tenant: *tenant, Cell: *cell, Resources: resources, StartAt: *startAt, DurationMs: *duration,
			Price: *price, At: *at}
		if set["latest-start"] {
			if *latest < *startAt {
				return fmt.Errorf("--latest-start %d is before the start %d", *latest, *startAt)
			}
			bid.LatestStartAt = latest
		}
		if set["gang"] { // unset: left out, the schema's default (true) applies
			bid.Gang = gang
		}
		events = append(events, bid.Normalized())
	default:
		return fmt.Errorf("give --task-id, --bid-id or --kind with --file (see -h)")
	}

	p, err := suanli.NewProducer(*brokers, *registry)
	if err != nil {
		return err
	}
	defer p.Close()
	if *schemaFile != "" {
		text, err := os.ReadFile(*schemaFile)
		if err != nil {
			return err
		}
		p.SchemaText[suanli.Subject(*kind)] = strings.TrimSpace(string(text))
	}
	if err := p.Send(ctx, *topic, *kind, events...); err != nil {
		return err
	}
	fmt.Printf("produced %d %s to %s\n", len(events), *kind, *topic)
	return nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// readEvents reads a JSON object, a JSON array of objects, or one object per line.
func readEvents(path string) ([]any, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = readAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		v, err := suanli.DecodeJSON(trimmed)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return v.([]any), nil
	}
	var events []any
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	for dec.More() {
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		events = append(events, v)
	}
	return events, nil
}

func readAll(f *os.File) ([]byte, error) {
	var buf bytes.Buffer
	_, err := buf.ReadFrom(bufio.NewReader(f))
	return buf.Bytes(), err
}
