package suanli

// Typed forms of the events a producer sends. They marshal (encoding/json) to the JSON
// convention, which Producer.Send encodes with the registry's schema. Nullable fields are
// pointers; a nil slice or map is written as the empty array or map.

// TaskResources is io.suanli.events.TaskResources.
type TaskResources struct {
	CPUMilli     int32                `json:"cpu_milli"`
	MemoryMiB    int32                `json:"memory_mib"`
	GPUCount     int32                `json:"gpu_count"`
	GPUMilli     int32                `json:"gpu_milli"`
	GPUModels    []string             `json:"gpu_models"`
	GPUMemoryMiB int32                `json:"gpu_memory_mib"`
	Accelerators []AcceleratorRequest `json:"accelerators"`
}

// AcceleratorRequest is io.suanli.events.AcceleratorRequest (kind: NPU, FPGA, ASIC, QPU, ...).
type AcceleratorRequest struct {
	Kind  string `json:"kind"`
	Model string `json:"model"`
	Count int32  `json:"count"`
}

// TaskProfile is io.suanli.events.TaskProfile.
type TaskProfile struct {
	DurationClass string             `json:"duration_class"`
	IOIntensity   float64            `json:"io_intensity"`
	Parallelism   int32              `json:"parallelism"`
	SLALevel      string             `json:"sla_level"`
	ModelArch     string             `json:"model_arch"`
	DataLocations []string           `json:"data_locations"`
	Extra         map[string]float64 `json:"extra"`
}

// TaskSubmitted is io.suanli.events.TaskSubmitted (times: epoch milliseconds).
type TaskSubmitted struct {
	EventID            string            `json:"event_id"`
	TaskID             string            `json:"task_id"`
	Tenant             string            `json:"tenant"`
	Cell               string            `json:"cell"`
	SubmittedAt        int64             `json:"submitted_at"`
	Resources          TaskResources     `json:"resources"`
	QosTier            string            `json:"qos_tier"` // GOLD, SILVER or BRONZE
	Priority           int32             `json:"priority"`
	Labels             map[string]string `json:"labels"`
	Deadline           *int64            `json:"deadline"`
	DurationEstimateMs *int64            `json:"duration_estimate_ms"`
	Command            []string          `json:"command"` // nil is null
	Profile            *TaskProfile      `json:"profile"`
	Env                map[string]string `json:"env,omitempty"`    // the command's environment; empty is {}
	JobID              *string           `json:"job_id,omitempty"` // the job it is a member of; nil is null
}

// ReservationBid is io.suanli.events.ReservationBid: GPUs for DurationMs, starting between
// StartAt and LatestStartAt, at up to Price per GPU-hour.
//
// LatestStartAt nil is the schema's default (null: the window starts at StartAt). Gang nil
// is the default (true: every GPU asked or none); point it at false to accept a partial
// grant (at least one GPU). Both are left out of the JSON when nil, so a bid without them
// encodes with a registry that still has the schema before they were added.
type ReservationBid struct {
	EventID       string        `json:"event_id"`
	BidID         string        `json:"bid_id"`
	Tenant        string        `json:"tenant"`
	Cell          string        `json:"cell"`
	Resources     TaskResources `json:"resources"`
	StartAt       int64         `json:"start_at"`
	DurationMs    int64         `json:"duration_ms"`
	Price         float64       `json:"price"`
	At            int64         `json:"at"`
	LatestStartAt *int64        `json:"latest_start_at,omitempty"`
	Gang          *bool         `json:"gang,omitempty"`
}

// TaskCancelled is io.suanli.events.TaskCancelled.
type TaskCancelled struct {
	EventID string `json:"event_id"`
	TaskID  string `json:"task_id"`
	Tenant  string `json:"tenant"`
	Cell    string `json:"cell"`
	Reason  string `json:"reason"`
	At      int64  `json:"at"`
}

func (r TaskResources) normalized() TaskResources {
	if r.GPUModels == nil {
		r.GPUModels = []string{}
	}
	if r.Accelerators == nil {
		r.Accelerators = []AcceleratorRequest{}
	}
	return r
}

// Normalized fills nil slices and maps that the schema wants as [] or {}.
func (t TaskSubmitted) Normalized() TaskSubmitted {
	t.Resources = t.Resources.normalized()
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	if t.QosTier == "" {
		t.QosTier = "SILVER"
	}
	if t.Profile != nil {
		p := *t.Profile
		if p.DataLocations == nil {
			p.DataLocations = []string{}
		}
		if p.Extra == nil {
			p.Extra = map[string]float64{}
		}
		t.Profile = &p
	}
	return t
}

// Normalized fills nil slices that the schema wants as [].
func (b ReservationBid) Normalized() ReservationBid {
	b.Resources = b.Resources.normalized()
	return b
}
