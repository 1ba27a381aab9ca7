package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/luft-run/luft/storage"
)

// p99 is the 99th percentile of ds.
func p99(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[(len(ds)*99)/100]
}

// BenchmarkListRuns10k pages through /api/runs over 10,000 stored runs (issue target: p99
// ≤ 50 ms per page).
func BenchmarkListRuns10k(b *testing.B) {
	d, _ := newTestDaemon(&testing.T{})
	ctx := context.Background()
	for i := range 10000 {
		if err := d.opts.Store.CreateRun(ctx, storage.Run{ID: uuid.Must(uuid.NewV7()).String(), Workflow: fmt.Sprintf("w%d.lua", i%7),
			Status: storage.StatusCompleted, Attempt: 1, Spec: json.RawMessage(`{}`)}); err != nil {
			b.Fatal(err)
		}
	}
	h := d.handler(false)
	var lat []time.Duration
	b.ResetTimer()
	for b.Loop() {
		cursor := ""
		for range 5 { // the first five pages
			req := httptest.NewRequest("GET", "http://luft/api/runs?limit=50&cursor="+cursor, nil)
			rec := httptest.NewRecorder()
			start := time.Now()
			h.ServeHTTP(rec, req)
			lat = append(lat, time.Since(start))
			var page RunPage
			if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &page) != nil {
				b.Fatalf("HTTP %d", rec.Code)
			}
			cursor = page.NextCursor
		}
	}
	b.ReportMetric(float64(p99(lat).Microseconds())/1000, "p99-ms/page")
}
