package suanli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
)

// Namespace of every Suanli record; the registry subject of an event is its full name
// (RecordNameStrategy), e.g. io.suanli.events.TaskSubmitted.
const Namespace = "io.suanli.events"

// Routes maps each producer-side event kind to its raw topic (without the "<namespace>."
// prefix) and the field used as the record key (streams/topics.py RAW_ROUTES).
var Routes = map[string]struct{ Topic, KeyField string }{
	"TaskSubmitted":     {"raw.tasks", "task_id"},
	"TaskCancelled":     {"raw.tasks", "task_id"},
	"ReservationBid":    {"raw.tasks", "bid_id"},
	"NodeRegistered":    {"raw.nodes", "node_id"},
	"NodeHeartbeat":     {"raw.nodes", "node_id"},
	"NodeMetrics":       {"raw.nodes", "node_id"},
	"NodeStatusChanged": {"raw.nodes", "node_id"},
	"TaskStatusChanged": {"raw.status", "task_id"},
	"DispatchAck":       {"raw.status", "task_id"},
	"PolicyChanged":     {"raw.policy", "cell"},
}

// Subject is the registry subject of an event kind ("TaskSubmitted" or a full name).
func Subject(kind string) string {
	if strings.Contains(kind, ".") {
		return kind
	}
	return Namespace + "." + kind
}

// Registry resolves event schemas through a Confluent-compatible schema registry
// (franz-go's pkg/sr client) and caches one Codec per subject and per id.
type Registry struct {
	Client *sr.Client
	mu     sync.Mutex
	bySubj map[string]registered
	byID   map[int]*Codec
}

type registered struct {
	id    int
	codec *Codec
}

// NewRegistry talks to the registry at url (e.g. http://127.0.0.1:18081/apis/ccompat/v7).
func NewRegistry(url string) (*Registry, error) {
	cl, err := sr.NewClient(sr.URLs(url))
	if err != nil {
		return nil, err
	}
	return &Registry{Client: cl, bySubj: map[string]registered{}, byID: map[int]*Codec{}}, nil
}

// Latest returns the id and codec of the subject's latest registered schema.
func (r *Registry) Latest(ctx context.Context, subject string) (int, *Codec, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if got, ok := r.bySubj[subject]; ok {
		return got.id, got.codec, nil
	}
	ss, err := r.Client.SchemaByVersion(ctx, subject, -1)
	if err != nil {
		return 0, nil, fmt.Errorf("registry: latest schema of %s: %w", subject, err)
	}
	return r.remember(subject, ss.ID, ss.Schema.Schema)
}

// Register registers schemaText under subject (idempotent) and returns its id and codec.
func (r *Registry) Register(ctx context.Context, subject, schemaText string) (int, *Codec, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ss, err := r.Client.CreateSchema(ctx, subject, sr.Schema{Schema: schemaText, Type: sr.TypeAvro})
	if err != nil {
		return 0, nil, fmt.Errorf("registry: register %s: %w", subject, err)
	}
	return r.remember(subject, ss.ID, schemaText)
}

func (r *Registry) remember(subject string, id int, text string) (int, *Codec, error) {
	codec, err := NewCodec(text)
	if err != nil {
		return 0, nil, fmt.Errorf("schema %d of %s: %w", id, subject, err)
	}
	r.bySubj[subject] = registered{id, codec}
	r.byID[id] = codec
	return id, codec, nil
}

// ByID returns the codec of a writer schema id (for decoding).
func (r *Registry) ByID(ctx context.Context, id int) (*Codec, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.byID[id]; ok {
		return c, nil
	}
	s, err := r.Client.SchemaByID(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("registry: schema id %d: %w", id, err)
	}
	c, err := NewCodec(s.Schema)
	if err != nil {
		return nil, err
	}
	r.byID[id] = c
	return c, nil
}

// Frame prefixes an Avro body with the Confluent header: 0x00 and the 4-byte big-endian id.
func Frame(id int, body []byte) ([]byte, error) {
	var h sr.ConfluentHeader
	out, err := h.AppendEncode(make([]byte, 0, 5+len(body)), id, nil)
	if err != nil {
		return nil, err
	}
	return append(out, body...), nil
}

// Unframe splits a wire-format value into schema id and Avro body.
func Unframe(value []byte) (int, []byte, error) {
	var h sr.ConfluentHeader
	return h.DecodeID(value)
}

// Producer sends events to Kafka (franz-go: idempotent, acks=all) in the wire format.
type Producer struct {
	Kafka    *kgo.Client
	Registry *Registry
	// SchemaText, if set for a subject, is registered and used instead of the latest version.
	SchemaText map[string]string
}

// NewProducer connects to the brokers (comma-separated) and the registry. The broker's
// security comes from the SUANLI_KAFKA_* environment (KafkaSecurityFromEnv: PLAINTEXT when
// unset, or SASL/SCRAM over TLS); opts are applied after it.
func NewProducer(brokers, registryURL string, opts ...kgo.Opt) (*Producer, error) {
	security, err := KafkaSecurityFromEnv()
	if err != nil {
		return nil, err
	}
	reg, err := NewRegistry(registryURL)
	if err != nil {
		return nil, err
	}
	base := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(brokers, ",")...),
		kgo.RequiredAcks(kgo.AllISRAcks()), // the default, and what idempotence needs
		kgo.ProducerLinger(0),
		// franz-go compresses batches with snappy by default; the control plane's Python
		// consumers (aiokafka without python-snappy) cannot read those: send them plain.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ClientID("suanli-go-producer"),
	}
	base = append(base, security...)
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		return nil, err
	}
	return &Producer{Kafka: cl, Registry: reg, SchemaText: map[string]string{}}, nil
}

// Close flushes and closes the Kafka client.
func (p *Producer) Close() { p.Kafka.Close() }

// Encode returns the wire-format value of event (a JSON-convention value) as kind.
func (p *Producer) Encode(ctx context.Context, kind string, event any) ([]byte, error) {
	subject := Subject(kind)
	var (
		id    int
		codec *Codec
		err   error
	)
	if text, ok := p.SchemaText[subject]; ok {
		id, codec, err = p.Registry.Register(ctx, subject, text)
	} else {
		id, codec, err = p.Registry.Latest(ctx, subject)
	}
	if err != nil {
		return nil, err
	}
	body, err := codec.Encode(event)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	return Frame(id, body)
}

// Send produces events of one kind to topic, keyed by the kind's key field, and waits
// until the broker has stored all of them.
func (p *Producer) Send(ctx context.Context, topic, kind string, events ...any) error {
	short := kind[strings.LastIndex(kind, ".")+1:]
	route, ok := Routes[short]
	if !ok {
		return fmt.Errorf("%s is not a producer-side event (known: TaskSubmitted, ReservationBid, ...)", kind)
	}
	records := make([]*kgo.Record, 0, len(events))
	for i, event := range events {
		event, err := asJSON(event)
		if err != nil {
			return fmt.Errorf("event %d of %d: %w", i+1, len(events), err)
		}
		obj, _ := event.(map[string]any)
		key, _ := obj[route.KeyField].(string)
		if key == "" {
			return fmt.Errorf("%s %d of %d: the key field %q must be a non-empty string", kind, i+1, len(events), route.KeyField)
		}
		value, err := p.Encode(ctx, kind, event)
		if err != nil {
			if len(events) > 1 {
				return fmt.Errorf("event %d of %d (%s %s): %w", i+1, len(events), route.KeyField, key, err)
			}
			return err
		}
		records = append(records, &kgo.Record{Topic: topic, Key: []byte(key), Value: value, Headers: LaneHeaders(short, obj)})
	}
	return p.Kafka.ProduceSync(ctx, records...).FirstErr()
}

// LaneHeaders are the Kafka headers of a record of kind short (no namespace) with event obj:
// "suanli-lane: urgent" for a task labelled "scheduling: urgent", none otherwise, as the
// control plane's own producers do (streams/intake.lane_headers). The header only ends
// intake's micro-batch wait early; urgency itself is read from the labels.
func LaneHeaders(short string, obj map[string]any) []kgo.RecordHeader {
	if short != "TaskSubmitted" {
		return nil
	}
	if labels, ok := obj["labels"].(map[string]any); ok && labels["scheduling"] == "urgent" {
		return []kgo.RecordHeader{{Key: "suanli-lane", Value: []byte("urgent")}}
	}
	return nil
}

// asJSON turns a typed event (a struct of events.go) into the JSON convention.
func asJSON(event any) (any, error) {
	switch event.(type) {
	case map[string]any:
		return event, nil
	}
	data, err := json.Marshal(event)
	if err != nil {
		return nil, err
	}
	return DecodeJSON(data)
}
