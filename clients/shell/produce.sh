#!/usr/bin/env bash
# Produce Suanli events with kcat: the Confluent wire format built in the shell.
#
#   produce.sh vector FILE.json [options]      send a test vector's Avro bytes as they are
#   produce.sh task   --task-id ID [fields]    encode a TaskSubmitted here, then send it
#   produce.sh bid    --bid-id ID  [fields]    encode a ReservationBid here, then send it
#   produce.sh cancel --task-id ID [fields]    encode a TaskCancelled here, then send it
#
# Every option also takes the form --name=value.
# options:  --brokers H:P (127.0.0.1:19092)  --registry URL (http://127.0.0.1:18081/apis/ccompat/v7)
#           --topic T (suanli.raw.tasks)  --key K (default: the event's task_id / bid_id)
#           --schema FILE (default: schemas/vectors/schemas/<subject>.avsc of this repository)
#           --hex  print the Avro body as hex and exit (no registry, no Kafka)
# broker security, from the environment only (never on a command line, which `ps` shows):
#           SUANLI_KAFKA_SECURITY_PROTOCOL=PLAINTEXT (default) or SASL_SSL, and for SASL_SSL
#           SUANLI_KAFKA_USERNAME, SUANLI_KAFKA_PASSWORD, SUANLI_KAFKA_CA (PEM file of the CA
#           that signed the broker's certificate), SUANLI_KAFKA_SASL_MECHANISM (SCRAM-SHA-512)
# fields:   --event-id ID --tenant T --cell C --at MS --cpu-milli N --memory-mib N --gpu-count N
#           --gpu-milli N --gpu-model M (repeatable) --gpu-memory-mib N
#   task:   --qos GOLD|SILVER|BRONZE --priority N --label k=v (repeatable) --deadline MS
#           --duration-ms N --arg A (repeatable: the command line) --no-args (command = [])
#           --env NAME=VALUE (repeatable: the command's environment) --job ID (the job it is a member of)
#   bid:    --start-at MS --duration-ms N --price X --latest-start MS (default: none, a fixed
#           window) --gang true|false (default true: all GPUs or none)
#   cancel: --reason TEXT
#
# The value is byte 0x00, the schema id as 4 big-endian bytes, then the Avro binary body.
# The schema id comes from registering the schema file (POST /subjects/<subject>/versions is
# idempotent: an already registered schema just returns its id). The Avro body is written
# by the small encoder below, which knows the field order of the current contract (checked
# against schemas/vectors by tests/clients/test_vectors.py): ints and longs as zig-zag
# varints in bash arithmetic, strings as length + UTF-8 bytes, arrays and maps as one block,
# map keys sorted (byte order), unions as branch index + value. Doubles (a bid's price) are
# packed by perl (perl-base is part of every Debian system). The profile of a task is
# always null and its accelerator list empty: use another client for those.
#
# Needs bash 4.3+, kcat, curl, od, sed (and perl for bids).
set -euo pipefail
export LC_ALL=C   # ${#s} counts bytes; sort compares bytes (= code point order of UTF-8)

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VECTOR_SCHEMAS="$HERE/../../schemas/vectors/schemas"

die() { echo "produce.sh: $*" >&2; exit 2; }

# ---------------------------------------------------------------- Avro binary, as hex
HEX=""
zigzag() {  # append the zig-zag varint of a signed 64-bit integer
  local n=$1
  [[ $n =~ ^-?[0-9]+$ ]] || die "not an integer: $n"
  local z=$(( (n << 1) ^ (n >> 63) )) b
  while :; do
    b=$(( z & 0x7f ))
    z=$(( (z >> 7) & 0x01ffffffffffffff ))   # logical shift: z is unsigned
    if (( z == 0 )); then HEX+=$(printf '%02x' "$b"); return; fi
    HEX+=$(printf '%02x' $(( b | 0x80 )))
  done
}
int() {
  (( $1 >= -2147483648 && $1 <= 2147483647 )) 2>/dev/null || die "$1 does not fit an Avro int"
  zigzag "$1"
}
long() { zigzag "$1"; }
str() {
  zigzag "${#1}"
  if (( ${#1} > 0 )); then HEX+=$(printf '%s' "$1" | od -An -tx1 -v | tr -d ' \n'); fi
}
double() {
  [[ $1 =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]] || die "not a number: $1"
  HEX+=$(perl -e 'print unpack("H*", pack("d<", $ARGV[0]))' "$1")
}
str_array() {  # append an array of strings (the arguments)
  if (( $# > 0 )); then zigzag $#; local s; for s in "$@"; do str "$s"; done; fi
  HEX+=00
}
enum() {  # enum VALUE SYMBOL...
  local v=$1 i=0 s; shift
  for s in "$@"; do [[ $s == "$v" ]] && { zigzag $i; return; }; i=$((i + 1)); done
  die "$v is not one of: $*"
}

# ---------------------------------------------------------------- arguments
(( $# >= 1 )) || { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
MODE=$1; shift
BROKERS=127.0.0.1:19092 REGISTRY=http://127.0.0.1:18081/apis/ccompat/v7 TOPIC=suanli.raw.tasks
KEY="" SCHEMA="" PRINT_HEX=0 VECTOR="" JOB=""
EVENT_ID="" TASK_ID="" BID_ID="" TENANT=default CELL=openb AT="" CPU=1000 MEM=1024 GPUS=0 MILLI=0
GPU_MEM=0 QOS=SILVER PRIO=0 DEADLINE="" DURATION="" START_AT="" PRICE=0 REASON="" ARGS_SET=0
LATEST_START="" GANG=true
MODELS=() ARGS=() LABEL_KEYS=() LABEL_VALUES=() ENV_KEYS=() ENV_VALUES=()
map_put() {  # map_put KEYS VALUES KEY VALUE: keep the map sorted by key (byte order; [[ < ]] under
  # LC_ALL=C); a repeated key replaces. KEYS and VALUES name the two arrays of one map.
  local -n keys=$1 values=$2
  local i n=${#keys[@]}
  for (( i = 0; i < n; i++ )); do
    if [[ ${keys[i]} == "$3" ]]; then values[i]=$4; return; fi
    [[ ${keys[i]} < "$3" ]] || break
  done
  keys=("${keys[@]:0:i}" "$3" "${keys[@]:i}")
  values=("${values[@]:0:i}" "$4" "${values[@]:i}")
}
str_map() {  # append a map of strings: str_map KEYS VALUES (array names, sorted by map_put)
  local -n keys=$1 values=$2
  if (( ${#keys[@]} > 0 )); then
    zigzag ${#keys[@]}
    local i; for i in "${!keys[@]}"; do str "${keys[i]}"; str "${values[i]}"; done
  fi
  HEX+=00
}
[[ $MODE == vector ]] && { (( $# >= 1 )) || die "vector needs a file"; VECTOR=$1; shift; }
while (( $# > 0 )); do
  if [[ $1 == --*=* ]]; then set -- "${1%%=*}" "${1#*=}" "${@:2}"; fi
  opt=$1
  case $opt in --hex|--no-args) ;; *) (( $# >= 2 )) || die "$opt needs a value" ;; esac
  case $opt in
    --brokers) BROKERS=$2 ;; --registry) REGISTRY=${2%/} ;; --topic) TOPIC=$2 ;; --key) KEY=$2 ;;
    --schema) SCHEMA=$2 ;; --hex) PRINT_HEX=1; shift; continue ;;
    --event-id) EVENT_ID=$2 ;; --task-id) TASK_ID=$2 ;; --bid-id) BID_ID=$2 ;; --tenant) TENANT=$2 ;;
    --cell) CELL=$2 ;; --at) AT=$2 ;; --cpu-milli) CPU=$2 ;; --memory-mib) MEM=$2 ;;
    --gpu-count) GPUS=$2 ;; --gpu-milli) MILLI=$2 ;; --gpu-model) MODELS+=("$2") ;; --gpu-memory-mib) GPU_MEM=$2 ;;
    --qos) QOS=${2^^} ;; --priority) PRIO=$2 ;; --deadline) DEADLINE=$2 ;; --duration-ms) DURATION=$2 ;;
    --label) [[ $2 == *=* ]] || die "--label $2: want key=value"; map_put LABEL_KEYS LABEL_VALUES "${2%%=*}" "${2#*=}" ;;
    --env) [[ $2 == *=* ]] || die "--env $2: want NAME=VALUE"; map_put ENV_KEYS ENV_VALUES "${2%%=*}" "${2#*=}" ;;
    --job) JOB=$2 ;;
    --arg) ARGS+=("$2"); ARGS_SET=1 ;; --no-args) ARGS_SET=1; shift; continue ;;
    --start-at) START_AT=$2 ;; --price) PRICE=$2 ;; --reason) REASON=$2 ;; --latest-start) LATEST_START=$2 ;;
    --gang) [[ $2 == true || $2 == false ]] || die "--gang $2: want true or false"; GANG=$2 ;;
    *) die "unknown option $opt (run without arguments for help)" ;;
  esac
  shift 2
done
NOW=$(( $(date +%s%N) / 1000000 ))
AT=${AT:-$NOW}

resources() {
  int "$CPU"; int "$MEM"; int "$GPUS"; int "$MILLI"; str_array "${MODELS[@]}"; int "$GPU_MEM"
  HEX+=00   # accelerators: []
}

case $MODE in
  task)
    [[ -n $TASK_ID ]] || die "task needs --task-id"
    SUBJECT=io.suanli.events.TaskSubmitted KEY=${KEY:-$TASK_ID}
    str "${EVENT_ID:-submit/$TASK_ID}"; str "$TASK_ID"; str "$TENANT"; str "$CELL"; long "$AT"
    resources
    enum "$QOS" GOLD SILVER BRONZE
    int "$PRIO"
    str_map LABEL_KEYS LABEL_VALUES                              # labels
    if [[ -n $DEADLINE ]]; then HEX+=02; long "$DEADLINE"; else HEX+=00; fi
    if [[ -n $DURATION ]]; then HEX+=02; long "$DURATION"; else HEX+=00; fi
    if (( ARGS_SET )); then HEX+=02; str_array ${ARGS[@]+"${ARGS[@]}"}; else HEX+=00; fi
    HEX+=00                                                      # profile: null
    str_map ENV_KEYS ENV_VALUES                                  # env
    if [[ -n $JOB ]]; then HEX+=02; str "$JOB"; else HEX+=00; fi ;;   # job_id
  bid)
    [[ -n $BID_ID ]] || die "bid needs --bid-id"
    SUBJECT=io.suanli.events.ReservationBid KEY=${KEY:-$BID_ID}
    str "${EVENT_ID:-bid/$BID_ID}"; str "$BID_ID"; str "$TENANT"; str "$CELL"
    resources
    START_AT=${START_AT:-$((NOW + 3600000))}
    long "$START_AT"; long "${DURATION:-3600000}"; double "$PRICE"; long "$AT"
    if [[ -n $LATEST_START ]]; then                              # latest_start_at: null or a long
      [[ $LATEST_START =~ ^-?[0-9]+$ ]] && (( LATEST_START >= START_AT )) \
        || die "--latest-start $LATEST_START: want epoch ms, not before the start $START_AT"
      HEX+=02; long "$LATEST_START"
    else HEX+=00; fi
    if [[ $GANG == true ]]; then HEX+=01; else HEX+=00; fi ;;   # gang: a boolean is one byte
  cancel)
    [[ -n $TASK_ID ]] || die "cancel needs --task-id"
    SUBJECT=io.suanli.events.TaskCancelled KEY=${KEY:-$TASK_ID}
    str "${EVENT_ID:-cancel/$TASK_ID}"; str "$TASK_ID"; str "$TENANT"; str "$CELL"; str "$REASON"; long "$AT" ;;
  vector)
    # The vector files are written by schemas/vectors/generate.py, one "key": value per line.
    [[ -r $VECTOR ]] || die "cannot read $VECTOR"
    field() { sed -n "s/^ *\"$1\": \"\\(.*\\)\",\\{0,1\\}\$/\\1/p" "$VECTOR" | head -n 1; }
    SUBJECT=$(field subject) HEX=$(field avro_hex)
    [[ -n $SUBJECT && $HEX =~ ^([0-9a-f]{2})*$ ]] || die "$VECTOR is not a vector file"
    if [[ -z $KEY ]]; then
      for f in task_id bid_id node_id; do KEY=$(field $f); [[ -n $KEY ]] && break; done
    fi ;;
  *) die "unknown mode $MODE: use vector, task, bid or cancel" ;;
esac

if (( PRINT_HEX )); then echo "$HEX"; exit 0; fi
[[ -n $KEY ]] || die "no record key: give --key"

# ---------------------------------------------------------------- broker security (environment)
# SASL_SSL: SASL/SCRAM over TLS. The settings reach kcat through a configuration file of mode
# 0600 (kcat -F), removed on exit, so the password is never on a command line. kcat trims each
# line of that file and reads at most 511 bytes of it: values that would not survive are refused.
SECURITY=${SUANLI_KAFKA_SECURITY_PROTOCOL:-PLAINTEXT}
case ${SECURITY^^} in
  PLAINTEXT) SECURITY=PLAINTEXT ;;
  SASL_SSL)
    SECURITY=SASL_SSL MISSING=()
    for var in SUANLI_KAFKA_USERNAME SUANLI_KAFKA_PASSWORD SUANLI_KAFKA_CA; do
      [[ -n ${!var:-} ]] || MISSING+=("$var")
    done
    if (( ${#MISSING[@]} == 1 )); then
      die "SUANLI_KAFKA_SECURITY_PROTOCOL is SASL_SSL but ${MISSING[0]} is not set"
    elif (( ${#MISSING[@]} > 1 )); then
      LIST=${MISSING[*]}
      die "SUANLI_KAFKA_SECURITY_PROTOCOL is SASL_SSL but ${LIST// /, } are not set"
    fi
    MECHANISM=${SUANLI_KAFKA_SASL_MECHANISM:-SCRAM-SHA-512}
    case ${MECHANISM^^} in
      SCRAM-SHA-512|SCRAM-SHA-256) MECHANISM=${MECHANISM^^} ;;
      *) die "SUANLI_KAFKA_SASL_MECHANISM \"$MECHANISM\" is not supported: use SCRAM-SHA-512 or SCRAM-SHA-256" ;;
    esac
    for var in SUANLI_KAFKA_USERNAME SUANLI_KAFKA_PASSWORD SUANLI_KAFKA_CA; do
      value=${!var}
      [[ $value != *[$'\n\r']* && $value != [[:space:]]* && $value != *[[:space:]] && ${#value} -le 400 ]] \
        || die "$var cannot be passed to kcat: it has a line break, leading or trailing white space, or over 400 bytes"
    done
    [[ -f $SUANLI_KAFKA_CA && -r $SUANLI_KAFKA_CA ]] || die "SUANLI_KAFKA_CA: cannot read the CA file $SUANLI_KAFKA_CA" ;;
  *) die "SUANLI_KAFKA_SECURITY_PROTOCOL \"$SECURITY\" is not supported: use PLAINTEXT or SASL_SSL" ;;
esac

# ---------------------------------------------------------------- registry: the schema id
SCHEMA=${SCHEMA:-$VECTOR_SCHEMAS/$SUBJECT.avsc}
[[ -r $SCHEMA ]] || die "cannot read the schema file $SCHEMA"
BODY="{\"schemaType\":\"AVRO\",\"schema\":\"$(tr -d '\n' < "$SCHEMA" | sed 's/\\/\\\\/g; s/"/\\"/g')\"}"
REPLY=$(curl -sS --max-time 20 -X POST -H 'Content-Type: application/vnd.schemaregistry.v1+json' \
        --data-binary "$BODY" "$REGISTRY/subjects/$SUBJECT/versions") || die "registry at $REGISTRY unreachable"
ID=$(sed -n 's/.*"id" *: *\([0-9][0-9]*\).*/\1/p' <<<"$REPLY")
[[ -n $ID ]] || die "registry refused $SUBJECT: $REPLY"

# ---------------------------------------------------------------- the record, through kcat
WIRE=00$(printf '%08x' "$ID")$HEX
MSG=$(mktemp) CONF=""; trap 'rm -f "$MSG" ${CONF:+"$CONF"}' EXIT
printf '%b' "$(sed 's/../\\x&/g' <<<"$WIRE")" > "$MSG"
SECURITY_ARGS=()
if [[ $SECURITY == SASL_SSL ]]; then
  trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM   # so the EXIT trap removes it
  CONF=$(mktemp); chmod 600 "$CONF"     # mktemp makes it 0600 already; be explicit
  # printf is a bash builtin: the password goes to the file without being on any argv.
  printf '%s\n' "security.protocol=SASL_SSL" "sasl.mechanisms=$MECHANISM" \
    "sasl.username=$SUANLI_KAFKA_USERNAME" "sasl.password=$SUANLI_KAFKA_PASSWORD" \
    "ssl.ca.location=$SUANLI_KAFKA_CA" > "$CONF"
  SECURITY_ARGS=(-F "$CONF")
fi
# A file argument is sent as one message, whatever bytes it holds (0x0a included).
# murmur2_random: the Java client's partitioner (librdkafka's default is CRC32-based).
# An urgent task ("scheduling: urgent") carries the header suanli-lane: urgent, as the control
# plane's own producers do (streams/intake.lane_headers): it ends intake's micro-batch wait early.
HEADERS=()
if [[ $MODE == task ]]; then
  for i in "${!LABEL_KEYS[@]}"; do
    [[ ${LABEL_KEYS[i]} == scheduling && ${LABEL_VALUES[i]} == urgent ]] && HEADERS=(-H suanli-lane=urgent)
  done
fi
kcat ${SECURITY_ARGS[@]+"${SECURITY_ARGS[@]}"} -P -b "$BROKERS" -t "$TOPIC" -k "$KEY" ${HEADERS[@]+"${HEADERS[@]}"} \
     -X topic.partitioner=murmur2_random -X enable.idempotence=true -X acks=all "$MSG"
echo "produced 1 ${SUBJECT##*.} (schema id $ID) to $TOPIC"
