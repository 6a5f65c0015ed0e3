// Command suanli-grpc is a small gRPC client of the Suanli API, written against the stubs
// generated from schemas/proto/suanli.proto (package suanlipb).
//
//	suanli-grpc [-addr 127.0.0.1:18091] [-token TOKEN] submit [-id ID] -cell CELL -cpu 1 -memory 1Gi [-gpu 0.5] ...
//	suanli-grpc [-addr ...] [-token ...] status TASK_ID
//	suanli-grpc [-addr ...] [-token ...] why-pending TASK_ID
//	suanli-grpc [-addr ...] [-token ...] cancel TASK_ID [-reason TEXT]
//
// The token defaults to $SUANLI_API_TOKEN and is sent as the metadata
// `authorization: Bearer <token>`. Replies are printed as JSON with the proto field names.
// A refused call prints `suanli-grpc: CODE: message` on stderr and exits with status 2.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/suanli/suanli/clients/grpc-go/suanlipb"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func usage() int {
	fmt.Fprintln(os.Stderr, "usage: suanli-grpc [-addr HOST:PORT] [-token TOKEN] submit|status|why-pending|cancel ...")
	return 64
}

func run(args []string) int {
	global := flag.NewFlagSet("suanli-grpc", flag.ContinueOnError)
	addr := global.String("addr", "127.0.0.1:18091", "gRPC address of `suanli api serve`")
	token := global.String("token", os.Getenv("SUANLI_API_TOKEN"), "API token (default $SUANLI_API_TOKEN)")
	timeout := global.Duration("timeout", 30*time.Second, "deadline of the call")
	if err := global.Parse(args); err != nil || global.NArg() == 0 {
		return usage()
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "suanli-grpc: %v\n", err)
		return 1
	}
	defer conn.Close()
	client := pb.NewSuanliClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+*token)

	command, rest := global.Arg(0), global.Args()[1:]
	var reply proto.Message
	switch command {
	case "submit":
		spec, code := parseSpec(rest)
		if spec == nil {
			return code
		}
		reply, err = client.SubmitTask(ctx, &pb.SubmitTaskRequest{Task: spec})
	case "status":
		if len(rest) != 1 {
			return usage()
		}
		reply, err = client.GetTask(ctx, &pb.GetTaskRequest{TaskId: rest[0]})
	case "why-pending":
		if len(rest) != 1 {
			return usage()
		}
		reply, err = client.WhyPending(ctx, &pb.WhyPendingRequest{TaskId: rest[0]})
	case "cancel":
		fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
		reason := fs.String("reason", "", "why")
		if len(rest) < 1 || fs.Parse(rest[1:]) != nil {
			return usage()
		}
		reply, err = client.CancelTask(ctx, &pb.CancelTaskRequest{TaskId: rest[0], Reason: *reason})
	default:
		return usage()
	}
	if err != nil {
		st := status.Convert(err)
		fmt.Fprintf(os.Stderr, "suanli-grpc: %s: %s\n", st.Code(), st.Message())
		return 2
	}
	out, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(reply)
	if err != nil {
		fmt.Fprintf(os.Stderr, "suanli-grpc: %v\n", err)
		return 1
	}
	fmt.Println(string(out))
	return 0
}

// parseSpec reads the flags of `submit` into a TaskSpec (the task form of schemas/task_spec.py).
func parseSpec(args []string) (*pb.TaskSpec, int) {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	id := fs.String("id", "", "task id (generated when empty)")
	cell := fs.String("cell", "", "scheduler cell (default: the server's, openb)")
	cpu := fs.Float64("cpu", 0, "CPU cores")
	memory := fs.String("memory", "", "memory, e.g. 512Mi, 12Gi")
	gpu := fs.Float64("gpu", 0, "GPU share (< 1) or whole GPUs")
	models := fs.String("gpu-models", "", "accepted GPU models, comma separated")
	qos := fs.String("qos", "", "gold | silver | bronze")
	priority := fs.Int("priority", 0, "priority within the tier")
	duration := fs.String("duration", "", "run time estimate, e.g. 30m, 2h")
	if err := fs.Parse(args); err != nil {
		return nil, 64
	}
	resources := &pb.ResourcesSpec{Cpu: proto.Float64(*cpu), Memory: proto.String(*memory)}
	if *gpu != 0 {
		resources.Gpu = proto.Float64(*gpu)
	}
	if *models != "" {
		resources.GpuModels = strings.Split(*models, ",")
	}
	spec := &pb.TaskSpec{Resources: resources, Priority: proto.Int32(int32(*priority))}
	for _, o := range []struct {
		value  string
		target **string
	}{{*id, &spec.Id}, {*cell, &spec.Cell}, {*qos, &spec.Qos}, {*duration, &spec.Duration}} {
		if o.value != "" {
			*o.target = proto.String(o.value)
		}
	}
	return spec, 0
}
