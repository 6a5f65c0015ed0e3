// Command vectors checks the Go client against the contract's test vectors.
//
//	go run ./cmd/vectors --dir ../../schemas/vectors --check [--out DIR] [--decode DIR ...]
//
// --check encodes every vector's event and compares with its avro_hex, and decodes avro_hex
// and compares with the event. --out writes this client's encodings as DIR/<name>.avro (the
// Avro body, no header). --decode reads another client's DIR/<name>.avro files and checks
// that they decode to the vectors' events. Exit status 1 if anything differs.
package main

import (
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/suanli/suanli/clients/go/suanli"
)

type multi []string

func (m *multi) String() string     { return fmt.Sprint(*m) }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	dir := flag.String("dir", "../../schemas/vectors", "folder of the vectors")
	check := flag.Bool("check", false, "encode and decode every vector and compare")
	out := flag.String("out", "", "write this client's encodings to this folder")
	var decode multi
	flag.Var(&decode, "decode", "decode another client's encodings from this folder (repeatable)")
	flag.Parse()

	vectors, codecs, err := suanli.LoadVectors(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vectors:", err)
		os.Exit(2)
	}
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	passed, failed := 0, 0
	report := func(what string, err error) {
		if err != nil {
			failed++
			fmt.Printf("FAIL %s: %v\n", what, err)
		} else {
			passed++
			fmt.Printf("ok   %s\n", what)
		}
	}
	for _, v := range vectors {
		codec := codecs[v.Subject]
		if *check || *out != "" {
			body, err := suanli.CheckEncode(v, codec)
			if *check {
				report("encode "+v.Name, err)
				expected, _ := hex.DecodeString(v.AvroHex)
				report("decode "+v.Name, suanli.CheckDecode(v, codec, expected))
			}
			if *out != "" && body != nil {
				if err := os.WriteFile(filepath.Join(*out, v.Name+".avro"), body, 0o644); err != nil {
					report("write "+v.Name, err)
				}
			}
		}
		for _, from := range decode {
			body, err := os.ReadFile(filepath.Join(from, v.Name+".avro"))
			if err == nil {
				err = suanli.CheckDecode(v, codec, body)
			}
			report(fmt.Sprintf("decode %s from %s", v.Name, from), err)
		}
	}
	fmt.Printf("go vectors: %d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}
