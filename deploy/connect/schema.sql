-- Suanli's SQL schema in PostgreSQL, one schema per namespace (${pg_schema}).
-- Applied by deploy/connect.py (`suanli connect up`) before the connectors start; idempotent.
-- The JDBC sink never creates or alters tables (schema.evolution=none): this file is the contract.

CREATE SCHEMA IF NOT EXISTS ${pg_schema};

-- One row per scheduling decision, of every kind, upserted by event_id (the DecisionRow SMT
-- flattens each decision record; see deploy/connect/README.md). A redelivered record rewrites
-- the same row with the same values, so the table never holds a decision twice.
CREATE TABLE IF NOT EXISTS ${pg_schema}.decision (
    event_id            text PRIMARY KEY,            -- the decision event's id (dedup key)
    kind                text NOT NULL                -- placement | pending | rejection | release | preemption | migration
        CHECK (kind IN ('placement', 'pending', 'rejection', 'release', 'preemption', 'migration')),
    event               text NOT NULL,               -- Avro record: TaskPlaced, TaskPending, TaskUnschedulable, ...
    decision_id         text,                        -- cell/topic/partition/offset/n (deterministic)
    task_id             text,
    tenant              text,
    cell                text,
    node_id             text,                        -- chosen / released / preempted node; migration: target
    from_node           text,                        -- migration: source node
    decided_at          timestamptz,                 -- provenance.decided_at (event time, never the wall clock)
    strategy            text,                        -- provenance.strategy.name
    strategy_version    text,
    strategy_digest     text,                        -- provenance.strategy.config_digest
    matched_rule        text,
    decision_topic      text,                        -- where this decision record is in Kafka
    decision_partition  integer,
    decision_offset     bigint,
    input_topic         text,                        -- the cell-log input it was decided at
    input_partition     integer,
    input_offset        bigint,
    top_candidate       text,                        -- candidates[0]
    top_score           double precision,
    candidates          jsonb,                       -- [{"node_id", "score", "rank"}], best first
    filtered            jsonb,                       -- [{"reason", "nodes", "sample": [node ids]}]
    reasons             jsonb,                       -- pending / unschedulable: [{"reason", "nodes"}]
    path                jsonb,                       -- ["submitted", ..., "bind node-7"]
    queue_position      integer,                     -- pending
    cause               text,                        -- release: COMPLETED | FAILED | CANCELLED | PREEMPTED
    reason              text,                        -- preemption / migration
    preempted_by        text,
    gpu_devices         jsonb,                       -- [device index, ...]
    gpu_milli           integer,
    cpu_milli           integer,
    memory_mib          integer
);
CREATE INDEX IF NOT EXISTS decision_tenant_task ON ${pg_schema}.decision (tenant, task_id, decided_at);
CREATE INDEX IF NOT EXISTS decision_tenant_node ON ${pg_schema}.decision (tenant, node_id, decided_at);
CREATE INDEX IF NOT EXISTS decision_tenant_time ON ${pg_schema}.decision (tenant, decided_at);
CREATE INDEX IF NOT EXISTS decision_kind_time ON ${pg_schema}.decision (kind, decided_at);

-- The lists as rows.
CREATE OR REPLACE VIEW ${pg_schema}.decision_candidate AS
    SELECT d.event_id, d.task_id, d.tenant, d.kind, d.decided_at,
           (c ->> 'rank')::int AS rank, c ->> 'node_id' AS node_id, (c ->> 'score')::float8 AS score
      FROM ${pg_schema}.decision d, jsonb_array_elements(coalesce(d.candidates, '[]')) AS c;

CREATE OR REPLACE VIEW ${pg_schema}.decision_filter AS
    SELECT d.event_id, d.task_id, d.tenant, d.kind, d.decided_at,
           f ->> 'reason' AS reason, (f ->> 'nodes')::int AS nodes, f -> 'sample' AS sample
      FROM ${pg_schema}.decision d, jsonb_array_elements(coalesce(d.filtered, '[]')) AS f;

-- Node inventory: a row inserted (or updated) here becomes a NodeRegistered on
-- <namespace>.raw.nodes (Debezium PostgreSQL source -> <namespace>.cdc.${pg_schema}.nodes ->
-- the nodes bridge of deploy/connect.py). A deleted row becomes NodeStatusChanged(DOWN).
CREATE TABLE IF NOT EXISTS ${pg_schema}.nodes (
    node_id         text PRIMARY KEY,
    cell            text NOT NULL,
    site            text NOT NULL DEFAULT 'inventory',
    region          text NOT NULL DEFAULT '',
    zone            text NOT NULL DEFAULT '',
    tier            text NOT NULL DEFAULT 'onprem' CHECK (tier IN ('cloud', 'edge', 'onprem')),
    arch            text NOT NULL DEFAULT 'x86_64' CHECK (arch IN ('x86_64', 'arm64', 'riscv64', 'other')),
    cpu_milli       integer NOT NULL CHECK (cpu_milli > 0),
    memory_mib      integer NOT NULL CHECK (memory_mib > 0),
    gpu_model       text,
    gpu_count       integer NOT NULL DEFAULT 0 CHECK (gpu_count >= 0),
    gpu_memory_mib  integer NOT NULL DEFAULT 0,
    connector       text NOT NULL DEFAULT 'sim',
    pricing         text NOT NULL DEFAULT 'ON_DEMAND' CHECK (pricing IN ('ON_DEMAND', 'RESERVED', 'SPOT')),
    price_per_hour  double precision NOT NULL DEFAULT 0,
    labels          jsonb NOT NULL DEFAULT '{}'
);
-- Deletes carry the whole old row (the bridge needs the cell).
ALTER TABLE ${pg_schema}.nodes REPLICA IDENTITY FULL;
