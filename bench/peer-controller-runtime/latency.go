package main

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// latencyHistogram has the same buckets as bench/latency-histogram.ts: 5 µs wide up to 1 ms,
// 50 µs to 10 ms, 500 µs to 100 ms, 5 ms to 1 s, one overflow bucket.
type latencyHistogram struct {
	mu     sync.Mutex
	counts []uint64
}

const bucketCount = 200 + 180 + 180 + 180 + 1

func newLatencyHistogram() *latencyHistogram {
	return &latencyHistogram{counts: make([]uint64, bucketCount)}
}

func bucketOf(us int64) int {
	switch {
	case us < 1_000:
		return int(us / 5)
	case us < 10_000:
		return 200 + int((us-1_000)/50)
	case us < 100_000:
		return 380 + int((us-10_000)/500)
	case us < 1_000_000:
		return 560 + int((us-100_000)/5_000)
	default:
		return bucketCount - 1
	}
}

func (h *latencyHistogram) record(d time.Duration) {
	b := bucketOf(d.Microseconds())
	h.mu.Lock()
	h.counts[b]++
	h.mu.Unlock()
}

// wrap times a handler from the moment it is called (headers read) until it returns.
func (h *latencyHistogram) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started := time.Now()
		next.ServeHTTP(w, r)
		h.record(time.Since(started))
	})
}

// ServeHTTP answers the counts so far and starts over.
func (h *latencyHistogram) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	counts := h.counts
	h.counts = make([]uint64, bucketCount)
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"counts": counts})
}
