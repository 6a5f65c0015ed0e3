// Command flood is the API abuse load generator of bench/api_abuse.py: it sends garbage and
// oversized requests to a Suanli REST API at a fixed offered rate, while one well-behaved
// client keeps making valid requests, and prints one JSON document of what came back.
//
// Garbage, in turn: random bytes posted without a token; JSON that is not a task, posted
// with a made-up token; a body declared 2 MiB long (the server should answer 413 before
// reading it); and malformed JSON with a real token of a tenant other than the valid
// client's. Each garbage worker keeps one connection and waits for its answer (a closed
// loop): the offered rate is paced by a shared ticker, so a slow server shows as an
// achieved rate below the offered one, never as an unbounded queue in this process.
//
// Usage: flood -url http://127.0.0.1:18090 -valid-token T -garbage-token U [-rate 10000]
//
//	[-duration 30s] [-workers 64] [-valid-rate 20]
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type tally struct {
	mu     sync.Mutex
	codes  map[int]int64
	errors map[string]int64
}

func (t *tally) add(code int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.errors[shortError(err)]++
		return
	}
	t.codes[code]++
}

// shortError names an error by its kind, without addresses or ports, so that the
// counts add up: the server closes a connection after a 413 without reading the body,
// so the rest of an oversized body meets a reset or a broken pipe.
func shortError(err error) string {
	s := err.Error()
	for _, kind := range []string{"connection reset by peer", "broken pipe", "EOF", "timeout", "refused"} {
		if strings.Contains(s, kind) {
			return kind
		}
	}
	if len(s) > 80 {
		s = s[len(s)-80:]
	}
	return s
}

// zeros is an endless body of zero bytes, for the oversized requests.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func main() {
	url := flag.String("url", "http://127.0.0.1:18090", "the API's base URL")
	validToken := flag.String("valid-token", "", "token of the well-behaved client's tenant")
	garbageToken := flag.String("garbage-token", "", "a real token of another tenant, for malformed JSON")
	rate := flag.Float64("rate", 10000, "garbage requests offered per second")
	duration := flag.Duration("duration", 30*time.Second, "how long to flood")
	workers := flag.Int("workers", 64, "garbage connections (one request in flight each)")
	validRate := flag.Float64("valid-rate", 20, "valid requests per second")
	flag.Parse()
	if *validToken == "" || *garbageToken == "" {
		fmt.Fprintln(os.Stderr, "flood: -valid-token and -garbage-token are required")
		os.Exit(2)
	}

	garbage := &tally{codes: map[int]int64{}, errors: map[string]int64{}}
	valid := &tally{codes: map[int]int64{}, errors: map[string]int64{}}
	var sent atomic.Int64
	permits := make(chan struct{}, *workers*4)
	stop := make(chan struct{})
	started := time.Now()

	// the pacer: rate permits a second, in 1 ms slices
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		owed := 0.0
		for {
			select {
			case <-stop:
				close(permits)
				return
			case <-tick.C:
				owed += *rate / 1000
				for ; owed >= 1; owed-- {
					select {
					case permits <- struct{}{}:
					default: // every worker busy: the offer is dropped, and counted as not achieved
					}
				}
			}
		}
	}()

	var wg sync.WaitGroup
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			junk := make([]byte, 1024)
			for i := 0; ; i++ {
				if _, ok := <-permits; !ok {
					return
				}
				var req *http.Request
				switch (w + i) % 4 {
				case 0:
					_, _ = rand.Read(junk)
					req, _ = http.NewRequest("POST", *url+"/v1/tasks", bytes.NewReader(junk))
				case 1:
					req, _ = http.NewRequest("POST", *url+"/v1/tasks", bytes.NewReader([]byte(`{"resources": [1, 2, 3]}`)))
					req.Header.Set("Authorization", "Bearer made-up-"+strconv.Itoa(w*1_000_000+i))
				case 2:
					req, _ = http.NewRequest("POST", *url+"/v1/tasks", io.LimitReader(zeros{}, 2<<20))
					req.ContentLength = 2 << 20
				default:
					req, _ = http.NewRequest("POST", *url+"/v1/tasks", bytes.NewReader([]byte(`{"resources": {"cpu": `)))
					req.Header.Set("Authorization", "Bearer "+*garbageToken)
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				sent.Add(1)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					garbage.add(resp.StatusCode, nil)
				} else {
					garbage.add(0, err)
				}
			}
		}(w)
	}

	// the well-behaved client: valid reads and submissions, each timed
	var latencies []float64
	byKind := map[string][]float64{"read": nil, "submit": nil}
	wg.Add(1)
	go func() {
		defer wg.Done()
		client := &http.Client{Timeout: 10 * time.Second}
		tick := time.NewTicker(time.Duration(float64(time.Second) / *validRate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var req *http.Request
			kind := "read"
			if i%2 == 0 {
				req, _ = http.NewRequest("GET", *url+"/v1/tasks?limit=10", nil)
			} else {
				kind = "submit"
				body := fmt.Sprintf(`{"id": "flood-valid-%d-%d", "resources": {"cpu": 1, "memory": "1Gi"}}`, started.UnixNano(), i)
				req, _ = http.NewRequest("POST", *url+"/v1/tasks", bytes.NewReader([]byte(body)))
				req.Header.Set("Content-Type", "application/json")
			}
			req.Header.Set("Authorization", "Bearer "+*validToken)
			t0 := time.Now()
			resp, err := client.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			ms := float64(time.Since(t0).Microseconds()) / 1000
			latencies = append(latencies, ms)
			byKind[kind] = append(byKind[kind], ms)
			if err != nil {
				valid.add(0, err)
			} else {
				valid.add(resp.StatusCode, nil)
			}
		}
	}()

	time.Sleep(*duration)
	close(stop)
	wg.Wait()
	elapsed := time.Since(started).Seconds()

	pctOf := func(xs []float64, p float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		sort.Float64s(xs)
		return xs[min(len(xs)-1, int(p*float64(len(xs))))]
	}
	pct := func(p float64) float64 { return pctOf(latencies, p) }
	kinds := map[string]any{}
	for kind, xs := range byKind {
		kinds[kind] = map[string]any{"sent": len(xs), "p50_ms": pctOf(xs, 0.50), "p99_ms": pctOf(xs, 0.99)}
	}
	count5xx := func(t *tally) int64 {
		var n int64
		for code, c := range t.codes {
			if code >= 500 {
				n += c
			}
		}
		return n
	}
	out := map[string]any{
		"seconds": elapsed, "offered_per_s": *rate, "workers": *workers,
		"garbage": map[string]any{"sent": sent.Load(), "achieved_per_s": float64(sent.Load()) / elapsed,
			"by_status": garbage.codes, "transport_errors": garbage.errors, "5xx": count5xx(garbage)},
		"valid": map[string]any{"sent": len(latencies), "by_status": valid.codes, "transport_errors": valid.errors,
			"5xx": count5xx(valid), "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": pct(1.0),
			"by_kind": kinds},
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}
